//! Start-up: loads the saved state, wires the modules together, binds every listener
//! and runs until shutdown. The only module that knows all the others.
//!
//! [`Router::bind`] loads the saved state and binds every listener (so tests can bind
//! port 0 and read the port back); [`Router::run`] serves until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use spi_consumer::Consumer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod events;
mod files;
mod listeners;
mod reload;
mod tasks;

pub use files::admin_token;
pub use reload::Reloader;

use events::{EventSource, Events, Sourcing, reconcile_once};
use files::{admin_tls, fit_file_descriptors, load_default_cert};
use listeners::Listeners;
use reload::{Kept, with_settings};

use crate::admin::{Admin, Role};
use crate::config::{Config, SourceKind};
use crate::members::{MemberRegistry, MemberRegistryConfig};
use crate::metrics::Metrics;
use crate::request::listener::{Live, Serving};
use crate::table::split::{Split, SplitStore};
use crate::table::{Builder, Naming, RouteTable};
use crate::tls::store::CertIndex;
use crate::tls::tickets::SharedTicketer;
use crate::upgrade::{Handover, Inherited};
use crate::upstream::PoolSettings;
use crate::workers::Workers;

/// Why the router could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("routing state: {0}")]
    State(#[from] spi_consumer::persist::StoreError),
    #[error("spool directory {path}: {source}")]
    Spool {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("spi.stomp.passcode_file {path}: {source}")]
    Passcode {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("spi.stomp.tls: {0}")]
    StompTls(#[from] spi_consumer::source::stomp::tls::TlsError),
    #[error("{field} {path}: {source}")]
    DefaultCertRead {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{field} {path}: {source}")]
    DefaultCert {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: crate::tls::keys::CertError,
    },
    #[error("tls.session_ticket_key_file: {0}")]
    TicketKey(#[from] crate::tls::tickets::TicketKeyError),
    #[error("upstream.tls: {0}")]
    MemberTls(#[from] crate::tls::client::ClientTlsError),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("listen.http3: {0}")]
    Http3(String),
    #[error("rotate state: {0}")]
    Rotate(#[from] crate::members::rotate::RotateError),
    #[error("splits: {0}")]
    Splits(#[from] crate::table::split::SplitStoreError),
    #[error("app settings: {0}")]
    AppSettings(#[from] crate::policy::store::StoreError),
    #[error("affinity_key_file: {0}")]
    AffinityKey(#[from] crate::policy::affinity::KeyError),
    #[error(
        "listen.admin {0} is not on loopback: it is served over TLS only, and needs admin.tls_cert and admin.tls_key (or tls.default_cert and tls.default_key)"
    )]
    AdminTls(SocketAddr),
    #[error("admin.token_file {path}: {source}")]
    AdminToken {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Reconcile(#[from] crate::reconcile::ReconcileError),
    #[error("upgrade socket: {0}")]
    Handover(#[source] std::io::Error),
    #[error("starting the worker threads: {0}")]
    Workers(#[source] std::io::Error),
    #[error("dead-letter directory {path}: {source}")]
    DeadLetters {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A router with its state loaded and its sockets bound, ready to [`run`](Router::run).
pub struct Router {
    config: Config,
    http: TcpListener,
    /// `tcp.listen`, in the configuration's order.
    tcp: Vec<TcpListener>,
    https: Option<(TcpListener, crate::tls::server::Acceptor)>,
    /// `listen.http3`: the bound UDP socket and its QUIC configuration.
    http3: Option<crate::quic::listener::Bound>,
    admin: Option<TcpListener>,
    /// `listen.metrics`: `/metrics`, `/healthz`, `/readyz` only.
    metrics: Option<TcpListener>,
    /// The admin listener's TLS, when it is bound off loopback.
    admin_tls: Option<tokio_rustls::TlsAcceptor>,
    certs: Arc<Mutex<CertIndex>>,
    ticketer: Option<Arc<SharedTicketer>>,
    /// The proxy and limits every listener reads; a reload swaps them.
    live: Live,
    provider: Arc<rustls::crypto::CryptoProvider>,
    admin_api: Arc<Admin>,
    registry: Arc<MemberRegistry>,
    consumer: Consumer<Builder>,
    source: EventSource,
    /// Opens the state and the source again if an upgrade fails half-way.
    events: Events,
    /// Where a successor asks for the listeners (`router upgrade`).
    handover: Option<Handover>,
    /// The predecessor, told once this router serves.
    inherited: Option<Inherited>,
    /// The broker client and the runs asked for (admin API, timer).
    reconcile: Option<Arc<crate::reconcile::broker::Client>>,
    reconcile_jobs: tokio::sync::mpsc::Receiver<crate::reconcile::Job>,
    /// The per-core runtimes client connections are served on; `None`: on the
    /// runtime this router runs on (see [`crate::workers`]).
    workers: Option<Arc<Workers>>,
    /// "Drain what is open now" for every client listener (SIGUSR1).
    drainer: crate::request::drain::Drainer,
}

impl Router {
    pub async fn bind(config: Config) -> Result<Router, StartError> {
        Router::bind_with(config, None).await
    }

    /// Like [`bind`](Self::bind), with the listening sockets of the router this one
    /// replaces (see [`crate::upgrade`]): a listener the old process had under the
    /// same name is used as it is, the others are bound.
    pub async fn bind_with(
        mut config: Config,
        mut inherited: Option<Inherited>,
    ) -> Result<Router, StartError> {
        fit_file_descriptors(&mut config);
        let metrics = Arc::new(Metrics::new()?);
        metrics.app_traffic.set_limits(config.metrics.limits());
        // The state directory holds the routing state, the rotate state and the splits.
        let splits = Arc::new(SplitStore::open(&config.state_dir)?);
        let table = Arc::new(ArcSwap::from_pointee(initial_table(&splits)));
        let policies = Arc::new(app_policies(&config, &metrics)?);
        crate::table::publish_policies(&table, &policies);
        let token = admin_token(&config)?;
        let workers = start_workers(&config, &metrics)?;
        let registry = member_registry(&config, &metrics, workers.as_deref())?;
        // TLS: the default certificate must load, or the router does not start.
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let (certs, ticketer) = tls_state(&config, &provider, &metrics)?;
        let admin_tls = admin_tls(&config, &provider)?;
        let live_certs = certs.lock().unwrap_or_else(|p| p.into_inner()).live();
        let recent = Arc::new(crate::table::recent::Recent::default());
        let events = Events {
            config: config.clone(),
            naming: naming(&config),
            registry: registry.clone(),
            table: table.clone(),
            metrics: metrics.clone(),
            certs: certs.clone(),
            recent: recent.clone(),
        };
        // The saved state is served before any source answers.
        let (consumer, source) = events.open()?;
        // Give back the heap reading a large saved state left (the file, the parse).
        tokio::task::spawn_blocking(crate::memory::trim);
        let listeners = Listeners::bind(
            &config,
            &mut inherited,
            ticketer.as_ref(),
            &live_certs,
            &provider,
        )?;
        let handover = handover(&config, inherited.is_some()).await?;
        let https_certs = listeners.https.is_some().then(|| live_certs.clone());
        let live = serving(
            &config,
            Kept {
                table: table.clone(),
                member_tls: None,
                redirect: None,
                metrics: metrics.clone(),
                certs: https_certs.clone(),
                clients: policies.clients.clone(),
                alt_svc: listeners
                    .http3
                    .as_ref()
                    .and_then(|b| b.socket.local_addr().ok())
                    .and_then(|a| config.http3.alt_svc_value(a.port())),
                acme: config.acme.directory.as_ref().map(|_| Arc::default()),
            },
            (&live_certs, &provider),
            listeners.https.as_ref().map(|(l, _)| l),
        )?;
        let reconcile = reconcile_client(&config, &provider)?;
        let (reconcile_tx, reconcile_jobs) = tokio::sync::mpsc::channel(4);
        let acme = acme_state(&config, &live, &certs, &provider);
        let admin_api = Arc::new(admin_api(
            &config,
            (table, registry.clone(), metrics),
            (splits, policies, https_certs.clone(), acme),
            token,
            recent,
            reconcile.is_some().then_some(reconcile_tx),
        ));
        Ok(Router {
            config,
            http: listeners.http,
            tcp: listeners.tcp,
            https: listeners.https,
            http3: listeners.http3,
            admin: listeners.admin,
            metrics: listeners.metrics,
            admin_tls,
            certs,
            ticketer,
            live,
            provider,
            admin_api,
            events,
            handover,
            inherited,
            reconcile,
            reconcile_jobs,
            registry,
            consumer,
            source,
            workers,
            drainer: crate::request::drain::Drainer::default(),
        })
    }

    /// What drains the client connections open now while the listeners go on
    /// accepting (see [`crate::request::drain`]).
    pub fn drainer(&self) -> crate::request::drain::Drainer {
        self.drainer.clone()
    }

    /// What applies a changed configuration while this router runs.
    pub fn reloader(&self) -> Reloader {
        Reloader {
            live: self.live.clone(),
            admin: self.admin_api.clone(),
            registry: self.registry.clone(),
            certs: self.certs.clone(),
            provider: self.provider.clone(),
            metrics: self.admin_api.metrics.clone(),
            started: Arc::new(self.config.clone()),
        }
    }

    /// The bound address of the HTTP listener (useful with port 0).
    pub fn http_addr(&self) -> SocketAddr {
        self.http
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The bound address of the HTTPS listener, if there is one.
    /// The bound `tcp.listen` addresses, in the configuration's order.
    pub fn tcp_addrs(&self) -> Vec<SocketAddr> {
        self.tcp
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    pub fn https_addr(&self) -> Option<SocketAddr> {
        self.https.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    /// The HTTP/3 listener's UDP address.
    pub fn http3_addr(&self) -> Option<SocketAddr> {
        self.http3.as_ref().and_then(|b| b.socket.local_addr().ok())
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound address of `listen.metrics`, if set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves, then drains within `shutdown_grace`.
    fn log_listeners(&self) {
        for (what, addr) in [
            ("http", Some(self.http_addr())),
            ("https", self.https_addr()),
            ("http3", self.http3_addr()),
            ("admin", self.admin_addr()),
            ("metrics", self.metrics_addr()),
        ] {
            if let Some(addr) = addr {
                tracing::info!(listener = what, %addr, "listening");
            }
        }
    }

    /// The listening descriptors by name, for a successor (`router upgrade`).
    fn handover_sockets(&self) -> Vec<(String, std::os::fd::RawFd)> {
        use std::os::fd::AsRawFd;
        let mut sockets = vec![("http".to_string(), self.http.as_raw_fd())];
        if let Some((l, _)) = &self.https {
            sockets.push(("https".into(), l.as_raw_fd()));
        }
        if let Some(l) = &self.admin {
            sockets.push(("admin".into(), l.as_raw_fd()));
        }
        if let Some(l) = &self.metrics {
            sockets.push(("metrics".into(), l.as_raw_fd()));
        }
        if let Some(b) = &self.http3 {
            sockets.push(("http3".into(), b.socket.as_raw_fd()));
        }
        for (i, l) in self.tcp.iter().enumerate() {
            sockets.push((format!("tcp.{i}"), l.as_raw_fd()));
        }
        sockets
    }

    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        self.log_listeners();
        // Descriptors a successor takes over (the tasks below keep them open).
        let sockets = self.handover_sockets();
        let mut sourcing = Sourcing::start(
            self.source,
            self.consumer,
            &self.config,
            &self.admin_api.metrics,
        );
        // The admin API outlives the drain: /readyz says 503 while connections finish.
        let (admin_stop_tx, admin_stop_rx) = watch::channel(false);
        let admin_tasks = spawn_admin(
            (self.admin, self.metrics, self.admin_tls),
            &self.admin_api,
            &self.config.limits,
            &admin_stop_rx,
        );
        let (http_task, https_task) = serve_clients(
            (self.http, self.https, self.tcp),
            &self.config,
            &self.live,
            self.workers.as_ref(),
            (&stop_rx, &self.drainer),
        );
        let http3_task = self.http3.map(|bound| {
            spawn_http3(
                bound,
                self.workers.as_ref(),
                &self.live,
                (&stop_rx, &self.drainer, self.config.shutdown_grace),
            )
        });
        // Idle member connections are closed once older than the idle timeout;
        // certificates past their replacement grace go; the ticket secret is
        // re-read if its file changed.
        let background = [
            tasks::spawn_trimmer(&self.admin_api.metrics, self.workers.clone()),
            tasks::spawn_app_traffic(self.admin_api.metrics.app_traffic.clone()),
            tasks::spawn_sweeper(
                self.registry.clone(),
                self.certs.clone(),
                self.ticketer.clone(),
                (self.config.upstream.idle_timeout / 4).max(std::time::Duration::from_millis(100)),
            ),
        ];
        self.admin_api.ready.store(true, Ordering::Release);
        if let Some(old) = self.inherited
            && let Err(e) = old.confirm()
        {
            tracing::warn!(error = %e, "upgrade: could not tell the old router to drain (it drains when its successor's line closes only if it saw READY)");
        }

        let timers = tasks::spawn_timers(&self.config, &self.admin_api);
        let upgraded = serve_until(
            shutdown,
            self.handover,
            self.reconcile_jobs,
            Running {
                config: &self.config,
                admin: &self.admin_api,
                events: &self.events,
                reconcile: self.reconcile.as_ref(),
            },
            &mut sourcing,
            &sockets,
        )
        .await;
        timers
            .iter()
            .flatten()
            .for_each(tokio::task::JoinHandle::abort);
        if upgraded {
            // Readiness checks and the admin API go to the new process from now on.
            let _ = admin_stop_tx.send(true);
        } else {
            tracing::info!("shutting down");
        }
        // Not ready first, so that the VIP moves before connections are refused.
        self.admin_api.ready.store(false, Ordering::Release);
        // The source stops with the listeners; its task is awaited below.
        sourcing.signal_stop();
        let _ = stop_tx.send(true);
        for t in [Some(http_task), https_task, http3_task]
            .into_iter()
            .flatten()
        {
            let _ = t.await;
        }
        sourcing.stop().await;
        for t in background {
            t.abort();
        }
        let _ = admin_stop_tx.send(true);
        for t in admin_tasks {
            let _ = t.await;
        }
        tracing::info!("stopped");
    }
}

/// The admin listener (over `tls` when given) and the metrics listener, each
/// until `stop`.
fn spawn_admin(
    (admin, metrics, tls): (
        Option<TcpListener>,
        Option<TcpListener>,
        Option<tokio_rustls::TlsAcceptor>,
    ),
    api: &Arc<Admin>,
    limits: &crate::config::Limits,
    stop: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    [(admin, Role::Admin(tls)), (metrics, Role::Metrics)]
        .into_iter()
        .filter_map(|(listener, role)| {
            let listen = api
                .clone()
                .listen(listener?, role, limits.clone(), stop.clone());
            Some(tokio::spawn(listen))
        })
        .collect()
}

/// The app settings saved in the state directory, the configuration's defaults
/// and the affinity key.
fn app_policies(config: &Config, metrics: &Metrics) -> Result<crate::policy::Policies, StartError> {
    let store = crate::policy::store::SettingsStore::open(&config.state_dir)?;
    let key = crate::policy::affinity::AffinityKey::load(
        config.affinity_key_file.as_deref(),
        &config.state_dir,
    )?;
    let clients = crate::policy::clients::Clients::new(metrics.app_untracked.clone());
    Ok(crate::policy::Policies::new(
        store,
        config.app_defaults.clone(),
        key,
        clients,
    ))
}

/// The route table before any event: the saved blue/green splits only.
fn initial_table(splits: &SplitStore) -> RouteTable {
    RouteTable {
        splits: splits
            .all()
            .into_iter()
            .filter_map(|(name, w)| Some((Arc::from(name.as_str()), Arc::new(Split::new(w).ok()?))))
            .collect(),
        ..RouteTable::default()
    }
}

/// Every member's slots, pool and health, from `upstream` and `health`.
fn member_registry(
    config: &Config,
    metrics: &Metrics,
    workers: Option<&Workers>,
) -> Result<Arc<MemberRegistry>, StartError> {
    Ok(Arc::new(MemberRegistry::new(MemberRegistryConfig {
        max_in_flight: config.upstream.max_connections_per_backend,
        max_per_source: config.upstream.max_per_source(),
        reserve_percent: config.upstream.source_reserve,
        pool: PoolSettings {
            max_idle: config.upstream.max_idle(),
            workers: workers.map_or(1, |w| w.threads()),
            idle_timeout: config.upstream.idle_timeout,
            opened: metrics.upstream_connections.clone(),
        },
        health: config.health.settings(),
        metrics: metrics.health.clone(),
        rotate: crate::members::rotate::RotateStore::open(&config.state_dir)?,
        checkers: Some(tokio::runtime::Handle::current()),
    })))
}

/// How host names are made from apps (the route table's builder needs it).
fn naming(config: &Config) -> Naming {
    Naming {
        cloud_domain: config.cloud_domain.to_ascii_lowercase(),
        ha_prefix: config.ha_dns_prefix.clone(),
        ha_suffix: config.ha_dns_suffix.clone(),
        app_dns: config.app_dns,
        endpoint_types: config.endpoint_types.clone(),
        balance: config.upstream.balance,
        fail_open: config.health.fail_open,
        tcp: config.tcp.listen.iter().map(|p| p.matcher()).collect(),
    }
}

/// The certificate index and the shared ticket key, if one is configured.
/// The live certificates, when there is an HTTPS listener.
type LiveCerts = Option<Arc<ArcSwap<crate::tls::store::Certs>>>;
type TlsState = (Arc<Mutex<CertIndex>>, Option<Arc<SharedTicketer>>);

/// The certificate index (with the default certificate, which must load) and the
/// shared ticket key, if one is configured.
fn tls_state(
    config: &Config,
    provider: &Arc<rustls::crypto::CryptoProvider>,
    metrics: &Metrics,
) -> Result<TlsState, StartError> {
    let default_cert = load_default_cert(&config.tls, provider)?;
    if let Some(l) = &default_cert {
        metrics.tls.set_expiry("default", l.not_after);
    }
    // The saved state is the first update: its certificates load lazily.
    let certs = Arc::new(Mutex::new(
        CertIndex::new(
            default_cert.map(|l| l.key),
            provider.clone(),
            metrics.tls.clone(),
            config.tls.replace_grace,
        )
        .restoring(),
    ));
    let ticketer = match &config.tls.session_ticket_key_file {
        Some(path) if config.tls.resumption => Some(Arc::new(SharedTicketer::open(
            path,
            config.tls.session_ticket_rotation,
        )?)),
        _ => None,
    };
    Ok((certs, ticketer))
}

/// Where a successor asks for these sockets. Without it, an upgrade is a restart.
async fn handover(config: &Config, inherited: bool) -> Result<Option<Handover>, StartError> {
    // Where a successor asks for these sockets. Without it, an upgrade is a restart.
    Ok(match Handover::bind(&config.state_dir, inherited).await {
        Ok(h) => Some(h),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            return Err(StartError::Handover(e));
        }
        Err(e) => {
            tracing::warn!(error = %e, "no upgrade socket: `router upgrade` cannot take over from this process");
            None
        }
    })
}

/// The client `reconcile:` asks the broker with, if configured.
fn reconcile_client(
    config: &Config,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Option<Arc<crate::reconcile::broker::Client>>, StartError> {
    Ok(config
        .reconcile
        .as_ref()
        .map(|r| r.client(provider.clone()).map(Arc::new))
        .transpose()?)
}

/// ACME's state (with `acme.directory`): what the issuer and the admin API's
/// `/acme/*` share.
fn acme_state(
    config: &Config,
    live: &Live,
    certs: &Arc<std::sync::Mutex<CertIndex>>,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Option<Arc<crate::tls::acme::Shared>> {
    let challenges = live.load().proxy.acme.clone()?;
    Some(Arc::new(crate::tls::acme::Shared::new(
        &config.state_dir,
        challenges,
        certs.clone(),
        provider.clone(),
    )))
}

/// The admin API's state.
fn admin_api(
    config: &Config,
    (table, registry, metrics): (Arc<ArcSwap<RouteTable>>, Arc<MemberRegistry>, Arc<Metrics>),
    (splits, policies, certs, acme): (
        Arc<SplitStore>,
        Arc<crate::policy::Policies>,
        LiveCerts,
        Option<Arc<crate::tls::acme::Shared>>,
    ),
    token: Option<String>,
    recent: Arc<crate::table::recent::Recent>,
    reconcile: Option<tokio::sync::mpsc::Sender<crate::reconcile::Job>>,
) -> Admin {
    Admin {
        table,
        registry: registry.clone(),
        metrics,
        ready: Arc::new(AtomicBool::new(false)),
        splits,
        policies,
        token: arc_swap::ArcSwapOption::from(token.map(Arc::new)),
        audit: Default::default(),
        reconcile,
        recent,
        source: match config.spi.source {
            SourceKind::Spool => "spool",
            SourceKind::Stomp => "stomp",
            SourceKind::Amqp => "amqp",
            SourceKind::None => "none",
        },
        // Where parked messages are: the spool's `failed/`, else the state's.
        body_deadline: config.limits.header_read_timeout,
        names: ArcSwap::from_pointee(crate::admin::Names::new(&config.admin.hosts)),
        certs,
        acme,
        dead_letters: match (&config.spi.source, &config.spi.spool) {
            (SourceKind::Spool, Some(s)) => s.path.join(spi_consumer::source::spool::FAILED),
            _ => config.state_dir.join("dead-letters"),
        },
    }
}

/// The client listeners served until `stop` (HTTP and HTTPS return their tasks,
/// awaited for the drain; TCP ports end with `stop`). With per-core workers the
/// client listeners accept on the first one (see [`crate::workers`]).
fn serve_clients(
    (http, https, tcp): ClientListeners,
    config: &Config,
    live: &Live,
    workers: Option<&Arc<Workers>>,
    (stop, drainer): (&watch::Receiver<bool>, &crate::request::drain::Drainer),
) -> (JoinHandle<()>, Option<JoinHandle<()>>) {
    let on = workers.map_or_else(tokio::runtime::Handle::current, |w| w.acceptor().clone());
    let listen = |l, name, tls| {
        on.spawn(crate::request::accept::listen(
            l,
            name,
            tls,
            live.clone(),
            (stop.clone(), drainer.clone()),
            config.shutdown_grace,
            workers.cloned(),
        ))
    };
    let https_task = https.map(|(l, tls)| listen(l, "https", Some(tls)));
    for (rule, (listener, port)) in tcp.into_iter().zip(config.tcp.listen.clone()).enumerate() {
        tokio::spawn(crate::tcp::listen(
            listener,
            rule,
            port,
            live.clone(),
            stop.clone(),
        ));
    }
    (listen(http, "http", None), https_task)
}

/// The plain, TLS and TCP-port listeners.
type ClientListeners = (
    TcpListener,
    Option<(TcpListener, crate::tls::server::Acceptor)>,
    Vec<TcpListener>,
);

/// What the serving loop reads of the running router.
struct Running<'a> {
    config: &'a Config,
    admin: &'a Admin,
    events: &'a Events,
    reconcile: Option<&'a Arc<crate::reconcile::broker::Client>>,
}

/// Serves until `shutdown` (false) or until a successor has taken the listeners
/// (true), running the reconcile jobs asked for meanwhile. A successor that does
/// not confirm leaves this router serving, its event source opened again.
async fn serve_until(
    shutdown: impl Future<Output = ()>,
    handover: Option<Handover>,
    mut jobs: tokio::sync::mpsc::Receiver<crate::reconcile::Job>,
    running: Running<'_>,
    sourcing: &mut Sourcing,
    sockets: &[(String, std::os::fd::RawFd)],
) -> bool {
    let Running {
        config,
        admin,
        events,
        reconcile,
    } = running;
    tokio::pin!(shutdown);
    loop {
        let request = async {
            match &handover {
                Some(h) => h.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut shutdown => return false,
            Some(job) = jobs.recv() => {
                let Some(client) = reconcile else { continue };
                let run = reconcile_once(client.clone(), job.apply, config, admin, events, sourcing);
                let report = tokio::select! {
                    r = run => r,
                    _ = &mut shutdown => return false,
                };
                if let Some(reply) = job.reply {
                    let _ = reply.send(report);
                }
            }
            request = request => {
                tracing::info!("upgrade: a new router asks for the listeners; stopping the event source first");
                sourcing.stop().await;
                if request.hand_over(sockets, UPGRADE_READY_WAIT).await {
                    tracing::info!("upgrade: the new router serves; this one stops accepting and drains");
                    return true;
                }
                tracing::error!("upgrade: the new router did not confirm; this one carries on with its event source");
                sourcing.reopen(events, config, &admin.metrics, |_| {});
            }
        }
    }
}

/// How long an old router waits for its successor to load the state and serve.
const UPGRADE_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The first serving generation: the proxy (its member TLS connector, the
/// HTTPS redirect when `https` listens and `tls.redirect_http` asks for it) and
/// the limits, with `kept` (what every later generation shares).
fn serving(
    config: &Config,
    mut kept: Kept,
    (live_certs, provider): (
        &Arc<ArcSwap<crate::tls::store::Certs>>,
        &Arc<rustls::crypto::CryptoProvider>,
    ),
    https: Option<&tokio::net::TcpListener>,
) -> Result<Live, StartError> {
    kept.member_tls = Some(crate::tls::client::connector(
        config.upstream.tls.ca_file.as_deref(),
        config.upstream.tls.verify,
        provider.clone(),
    )?);
    kept.redirect = match (https, config.tls.redirect_http) {
        (Some(l), true) => Some(crate::request::route::Redirect {
            https_port: l.local_addr().map(|a| a.port()).unwrap_or(443),
            certs: live_certs.clone(),
        }),
        _ => None,
    };
    let proxy = with_settings(kept, config);
    Ok(Arc::new(ArcSwap::from_pointee(Serving {
        proxy: Arc::new(proxy),
        limits: config.limits.clone(),
        handshake_timeout: config.tls.handshake_timeout,
    })))
}

/// The per-core workers (`worker_threads`), unless the work-stealing runtime
/// serves every connection.
fn start_workers(config: &Config, metrics: &Metrics) -> Result<Option<Arc<Workers>>, StartError> {
    Ok(
        crate::workers::count(config.worker_threads, config.work_stealing)
            .map(|n| Workers::start(n, &metrics.worker_connections))
            .transpose()
            .map_err(StartError::Workers)?
            .map(Arc::new),
    )
}

/// The HTTP/3 listener's task: on the workers' acceptor runtime when there are
/// workers, else here; it stops on `stop` and drains for `grace`.
fn spawn_http3(
    bound: crate::quic::listener::Bound,
    workers: Option<&Arc<Workers>>,
    live: &Live,
    (stop, drainer, grace): (
        &watch::Receiver<bool>,
        &crate::request::drain::Drainer,
        std::time::Duration,
    ),
) -> tokio::task::JoinHandle<()> {
    let on = workers.map_or_else(tokio::runtime::Handle::current, |w| w.acceptor().clone());
    on.spawn(crate::quic::listener::listen(
        bound,
        live.clone(),
        (stop.clone(), drainer.clone()),
        grace,
    ))
}
