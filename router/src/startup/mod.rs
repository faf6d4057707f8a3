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
mod parts;
use parts::*;
mod serve;
use serve::*;
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
use crate::request::connection::listener::{Live, Serving};
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
    #[error("pair.peer: {0}")]
    PairPeer(#[from] crate::pair::PeerError),
    #[error("tls.client_certificates: {0}")]
    ClientAuth(#[from] crate::tls::client_auth::ClientAuthError),
    #[error("access_log.syslog: {0}")]
    Syslog(String),
    #[error("error_pages: {0}")]
    ErrorPages(#[from] crate::policy::pages::PagesError),
    #[error("state_dir/pair.json: {0}")]
    PairState(pair_state::StateError),
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
    /// Fetches the OCSP answers stapled (`tls.ocsp.stapling`), started with the
    /// timers.
    stapler: Option<crate::tls::ocsp::stapler::Stapler>,
    /// "Drain what is open now" for every client listener (SIGUSR1).
    drainer: crate::request::connection::drain::Drainer,
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
        let (splits, table, policies) = routing_state(&config, &metrics)?;
        let token = admin_token(&config)?;
        let workers = start_workers(&config, &metrics)?;
        let registry = member_registry(&config, &metrics, workers.as_deref())?;
        // TLS: the default certificate must load, or the router does not start.
        let provider = Arc::new(config.tls.provider());
        let tls = tls_state(&config, &provider, &metrics)?;
        let admin_tls = admin_tls(&config, &provider)?;
        let recent = Arc::new(crate::table::recent::Recent::default());
        let events = Events::new(&config, &registry, &table, &metrics, &tls.certs, &recent);
        // The saved state is served before any source answers.
        let (consumer, source) = events.open()?;
        // Give back the heap reading a large saved state left (the file, the parse).
        tokio::task::spawn_blocking(heap::trim);
        let listeners = Listeners::bind(
            &config,
            &mut inherited,
            tls.ticketer.as_ref(),
            (&tls.live, &tls.staples),
            &provider,
        )?;
        let handover = handover(&config, inherited.is_some()).await?;
        let (https_certs, live) = first_generation(
            &config,
            (&table, &metrics, &policies),
            &listeners,
            (&tls.live, &provider),
        )?;
        let reconcile = reconcile_client(&config, &provider)?;
        let (reconcile_tx, reconcile_jobs) = tokio::sync::mpsc::channel(4);
        let acme = acme_state(&config, &live, &tls.certs, &provider);
        let pair = pair_link(&config, &metrics)?;
        // Router `b` of a pair staples what `a` fetched.
        let stapler = tls.stapler.map(|s| s.with_peer(ocsp_peer(pair.as_ref())));
        let admin_api = Arc::new(admin_api(
            &config,
            (table, registry.clone(), metrics),
            (splits, policies, https_certs.clone(), acme, pair),
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
            certs: tls.certs,
            ticketer: tls.ticketer,
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
            stapler,
            drainer: crate::request::connection::drain::Drainer::default(),
        })
    }

    /// What drains the client connections open now while the listeners go on
    /// accepting (see [`crate::request::connection::drain`]).
    pub fn drainer(&self) -> crate::request::connection::drain::Drainer {
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
        let background = self.spawn_background();
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
        ready(&self.admin_api, self.inherited);

        let timers = tasks::spawn_timers(&self.config, &self.admin_api);
        let stapler = self.stapler.map(|s| tokio::spawn(s.run()));
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
        abort_each(timers.into_iter().chain([stapler]));
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
        join_each([Some(http_task), https_task, http3_task]).await;
        sourcing.stop().await;
        abort_each(background.map(Some));
        let _ = admin_stop_tx.send(true);
        join_each(admin_tasks.into_iter().map(Some)).await;
        tracing::info!("stopped");
    }

    /// What runs beside the listeners: idle member connections closed once
    /// older than the idle timeout, certificates past their replacement grace
    /// removed, the ticket secret read again if its file changed.
    fn spawn_background(&self) -> [JoinHandle<()>; 3] {
        [
            tasks::spawn_trimmer(&self.admin_api.metrics, self.workers.clone()),
            tasks::spawn_app_traffic(self.admin_api.metrics.app_traffic.clone()),
            tasks::spawn_sweeper(
                self.registry.clone(),
                self.certs.clone(),
                self.ticketer.clone(),
                (self.config.upstream.idle_timeout / 4).max(std::time::Duration::from_millis(100)),
            ),
        ]
    }
}

/// Ready: `/readyz` says so, and the router this one replaces (if any) is
/// told to drain.
fn ready(admin: &Admin, inherited: Option<Inherited>) {
    admin.ready.store(true, Ordering::Release);
    if let Some(old) = inherited
        && let Err(e) = old.confirm()
    {
        tracing::warn!(error = %e, "upgrade: could not tell the old router to drain (it drains when its successor's line closes only if it saw READY)");
    }
}

/// Awaits each task there is.
async fn join_each(tasks: impl IntoIterator<Item = Option<JoinHandle<()>>>) {
    for t in tasks.into_iter().flatten() {
        let _ = t.await;
    }
}

/// Aborts each task there is.
fn abort_each(tasks: impl IntoIterator<Item = Option<JoinHandle<()>>>) {
    tasks.into_iter().flatten().for_each(|t| t.abort());
}
