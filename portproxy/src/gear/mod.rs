//! OpenShift gear mode: public ports on the node forwarded to gears' loopback
//! addresses.
//!
//! - `alloc`: the v2 formulas for a gear's port block and loopback address.
//! - `table`: the mapping table and its rules (pure).
//! - `store`: the table on disk, written durably before each answer.
//! - `admin`: the daemon's side of the operator socket; `client`: the CLI's side.
//!
//! One listener per mapping, bound on `gear.bind`. An operator change is serialised
//! (one at a time), validated whole, bound, persisted, then answered: a port that
//! cannot be bound or a table that cannot be saved leaves nothing changed. A removed
//! mapping stops accepting at once; its open connections run on for `drain_grace`.

pub mod admin;
pub mod alloc;
pub mod client;
mod settings;
pub mod store;
pub mod table;

pub use settings::{GearConfig, SendProxy};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::metrics::Mode;
use crate::proxy_protocol::{Version, header};
use crate::server::{self, Shared};
use store::Store;
use table::{RuleError, Rules, Table};

/// Why an operator request failed; each maps to the CLI's exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error("port {port}: cannot listen on {addr}: {source}")]
    Bind {
        port: u16,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot save the table to {path}: {source}")]
    Persist {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The running gear mode.
pub struct Gear {
    shared: Arc<Shared>,
    cfg: GearConfig,
    rules: Rules,
    store: Store,
    state: Mutex<State>,
}

struct State {
    table: Table,
    listening: HashMap<u16, Listening>,
}

/// One mapping's listener and the token that ends its connections after a removal.
struct Listening {
    accept: JoinHandle<()>,
    drain: CancellationToken,
}

impl Listening {
    /// Stops accepting; returns once the socket is closed.
    async fn close(self) -> CancellationToken {
        self.accept.abort();
        let _ = self.accept.await;
        self.drain
    }
}

impl Gear {
    /// Loads the saved table and binds every mapping. A port that cannot be bound is
    /// logged and counted, and stays in the table (it is the platform's record).
    pub async fn start(
        shared: Arc<Shared>,
        cfg: GearConfig,
        store: Store,
    ) -> Result<Arc<Gear>, config_file::ConfigError> {
        let rules = Rules {
            ports: cfg.ports.clone(),
            allowed: cfg.allowed_targets.clone(),
        };
        let table = store.load(&rules)?;
        let gear = Arc::new(Gear {
            shared,
            cfg,
            rules,
            store,
            state: Mutex::new(State {
                table: Table::default(),
                listening: HashMap::new(),
            }),
        });
        {
            let mut st = gear.state.lock().await;
            for (port, target) in table.iter() {
                match gear.bind(port) {
                    Ok(l) => {
                        let h = gear.spawn_listener(l, target);
                        st.listening.insert(port, h);
                    }
                    Err(e) => {
                        gear.shared.metrics.mode(Mode::Gear).bind_failures.inc();
                        tracing::error!(%e, "gear mapping restored but not listening");
                    }
                }
            }
            st.table = table;
            gear.update_gauges(&st);
            tracing::info!(
                mappings = st.table.len(),
                listening = st.listening.len(),
                "gear mode up"
            );
        }
        Ok(gear)
    }

    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    pub fn config(&self) -> &GearConfig {
        &self.cfg
    }

    /// Maps each port to its target; identical mappings are no-ops. Returns the
    /// mappings created.
    pub async fn add(
        &self,
        pairs: &[(u16, SocketAddr)],
    ) -> Result<Vec<(u16, SocketAddr)>, OpError> {
        // A mapping onto its own public socket would connect to itself forever.
        if let Some(&(port, _)) = pairs.iter().find(|(p, t)| {
            t.port() == *p && (self.cfg.bind.is_unspecified() || t.ip() == self.cfg.bind)
        }) {
            return Err(RuleError::Loop(port).into());
        }
        let mut st = self.state.lock().await;
        let new = st.table.plan_add(pairs)?;
        if new.is_empty() {
            return Ok(new);
        }
        let mut bound = Vec::with_capacity(new.len());
        for &(port, _) in &new {
            bound.push(self.bind(port)?);
        }
        let table = st.table.with_added(&new);
        self.save(&table)?;
        for (l, &(port, target)) in bound.into_iter().zip(&new) {
            let h = self.spawn_listener(l, target);
            st.listening.insert(port, h);
            tracing::info!(port, %target, "gear mapping added");
        }
        st.table = table;
        self.update_gauges(&st);
        Ok(new)
    }

    /// Unmaps the ports (unknown ones are no-ops). Returns the mappings removed.
    pub async fn remove(&self, ports: &[u16]) -> Result<Vec<(u16, SocketAddr)>, OpError> {
        let mut st = self.state.lock().await;
        let gone = st.table.plan_remove(ports.iter().copied());
        if gone.is_empty() {
            return Ok(Vec::new());
        }
        let removed: Vec<(u16, SocketAddr)> = gone
            .iter()
            .filter_map(|&p| st.table.get(p).map(|t| (p, t)))
            .collect();
        let table = st.table.with_removed(&gone);
        self.save(&table)?;
        for &(port, target) in &removed {
            if let Some(l) = st.listening.remove(&port) {
                let drain = l.close().await;
                let grace = self.cfg.drain_grace;
                tokio::spawn(async move {
                    tokio::time::sleep(grace).await;
                    drain.cancel();
                });
            }
            tracing::info!(port, %target, "gear mapping removed; open connections drain");
        }
        st.table = table;
        self.update_gauges(&st);
        Ok(removed)
    }

    /// The mappings of `ports`, or all when empty.
    pub async fn show(&self, ports: &[u16]) -> Vec<(u16, SocketAddr)> {
        let st = self.state.lock().await;
        if ports.is_empty() {
            st.table.iter().collect()
        } else {
            ports
                .iter()
                .filter_map(|&p| st.table.get(p).map(|t| (p, t)))
                .collect()
        }
    }

    /// Stops every listener (shutdown); connections are the tracker's business.
    pub async fn stop_listening(&self) {
        let mut st = self.state.lock().await;
        for (_, l) in st.listening.drain() {
            l.close().await;
        }
    }

    fn save(&self, table: &Table) -> Result<(), OpError> {
        self.store.save(table).map_err(|source| OpError::Persist {
            path: self.store.path().display().to_string(),
            source,
        })
    }

    fn bind(&self, port: u16) -> Result<TcpListener, OpError> {
        let addr = SocketAddr::new(self.cfg.bind, port);
        server::bind(addr).map_err(|source| OpError::Bind { port, addr, source })
    }

    fn spawn_listener(&self, listener: TcpListener, target: SocketAddr) -> Listening {
        let drain = CancellationToken::new();
        let shared = self.shared.clone();
        let send_proxy = self.cfg.send_proxy.version();
        let conn_drain = drain.clone();
        let task = tokio::spawn(server::accept_loop(
            listener,
            shared.clone(),
            Mode::Gear,
            move |client, peer| {
                let shared = shared.clone();
                let drain = conn_drain.clone();
                async move {
                    tokio::select! {
                        () = forward(&shared, client, peer, target, send_proxy) => {}
                        () = drain.cancelled() => {}
                    }
                }
            },
        ));
        Listening {
            accept: task,
            drain,
        }
    }

    fn update_gauges(&self, st: &State) {
        self.shared
            .metrics
            .mappings
            .with_label_values(&["gear"])
            .set(st.table.len() as i64);
    }
}

/// One gear connection: connect, optionally announce the client, relay.
async fn forward(
    shared: &Shared,
    mut client: TcpStream,
    peer: SocketAddr,
    target: SocketAddr,
    send_proxy: Option<Version>,
) {
    let mut upstream = match server::connect(target, shared.limits.connect_timeout).await {
        Ok(s) => s,
        Err(e) => {
            shared.metrics.mode(Mode::Gear).connect_failures.inc();
            tracing::info!(%peer, %target, error = %e, "gear connect failed");
            server::reset(&client);
            return;
        }
    };
    if let Some(v) = send_proxy {
        let local = client.local_addr().unwrap_or(target);
        let h = header::encode(v, peer, local);
        if tokio::io::AsyncWriteExt::write_all(&mut upstream, &h)
            .await
            .is_err()
        {
            return;
        }
    }
    server::relay_and_count(shared, Mode::Gear, &mut client, &mut upstream, false).await;
}
