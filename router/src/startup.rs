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
use spi_consumer::deadletter::DeadLetters;
use spi_consumer::source::stomp::SessionConfig;
use spi_consumer::source::stomp::tls::{TlsClient, TlsFiles};
use spi_consumer::{Consumer, Spool, Store};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::Admin;
use crate::config::{Config, SourceKind};
use crate::members::{MemberRegistry, MemberRegistryConfig};
use crate::metrics::Metrics;
use crate::request::Proxy;
use crate::request::listener::{Live, Serving};
use crate::request::upload::UploadSettings;
use crate::table::split::{Split, SplitStore};
use crate::table::{Builder, Naming, RouteTable};
use crate::tls::store::CertIndex;
use crate::tls::tickets::SharedTicketer;
use crate::upgrade::{Handover, Inherited};
use crate::upstream::{self, PoolSettings};
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
    #[error("rotate state: {0}")]
    Rotate(#[from] crate::members::rotate::RotateError),
    #[error("splits: {0}")]
    Splits(#[from] crate::table::split::SplitStoreError),
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
    admin: Option<TcpListener>,
    certs: Arc<Mutex<CertIndex>>,
    ticketer: Option<Arc<SharedTicketer>>,
    /// The proxy and limits every listener reads; a reload swaps them.
    live: Live,
    provider: Arc<rustls::crypto::CryptoProvider>,
    admin_api: Arc<Admin>,
    registry: Arc<MemberRegistry>,
    consumer: Consumer<Builder>,
    source: Source,
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
}

/// What opens the saved state and the event source: at start, and again in a
/// router whose upgrade failed after it had stopped its source.
struct Events {
    config: Config,
    naming: Naming,
    registry: Arc<MemberRegistry>,
    table: Arc<ArcSwap<RouteTable>>,
    metrics: Arc<Metrics>,
    certs: Arc<Mutex<CertIndex>>,
    recent: Arc<crate::table::recent::Recent>,
}

impl Events {
    /// Loads the saved state (publishing it whole) and opens the configured source.
    fn open(&self) -> Result<(Consumer<Builder>, Source), StartError> {
        let config = &self.config;
        let store = Store::open(&config.state_dir)?;
        let builder = Builder::new(
            self.naming.clone(),
            self.registry.clone(),
            self.table.clone(),
            (*self.metrics).clone(),
        )
        .with_certs(self.certs.clone())
        .with_recent(self.recent.clone());
        // The saved state is served before any source answers.
        let consumer = Consumer::start_sharded(
            store,
            builder,
            self.metrics.spi.clone(),
            config.spi.shard.clone(),
        )?;
        let dead_letters = || {
            let dir = config.state_dir.join("dead-letters");
            DeadLetters::open(&dir).map_err(|source| StartError::DeadLetters { path: dir, source })
        };
        let source = match (&config.spi.source, &config.spi.spool, &config.spi.stomp) {
            (SourceKind::Amqp, _, _) => match &config.spi.amqp {
                Some(a) => Source::Amqp(a.clone(), dead_letters()?),
                None => Source::None,
            },
            (SourceKind::Spool, Some(s), _) => {
                let limits = spi_consumer::source::spool::SpoolLimits {
                    max_file_bytes: s.max_file_bytes,
                    done_retention: s.done_retention,
                    failed_retention: s.failed_retention,
                };
                Source::Spool(Spool::open_with(&s.path, limits).map_err(|source| {
                    StartError::Spool {
                        path: s.path.clone(),
                        source,
                    }
                })?)
            }
            (SourceKind::Stomp, _, Some(s)) => {
                let passcode = match &s.passcode_file {
                    Some(path) => Some(config_file::first_line(path).map_err(|source| {
                        StartError::Passcode {
                            path: path.clone(),
                            source,
                        }
                    })?),
                    None => None,
                };
                let dead = dead_letters()?;
                Source::Stomp(
                    Box::new(SessionConfig {
                        hosts: s.hosts.clone(),
                        login: s.login.clone(),
                        passcode,
                        vhost: s.vhost.clone(),
                        client_id: s.client_id.clone(),
                        destination: s.destination.clone(),
                        subscription_name: s.subscription_name.clone(),
                        prefetch: s.prefetch,
                        heartbeat: s.heartbeat,
                        timeout: s.timeout,
                        tls: s
                            .tls
                            .as_ref()
                            .map(|t| {
                                TlsClient::load(&TlsFiles {
                                    ca_file: t.ca_file.clone(),
                                    cert_file: t.cert_file.clone(),
                                    key_file: t.key_file.clone(),
                                    server_name: t.server_name.clone(),
                                })
                            })
                            .transpose()?,
                    }),
                    dead,
                )
            }
            _ => Source::None,
        };
        Ok((consumer, source))
    }
}

/// Where routing events come from.
enum Source {
    Spool(Spool),
    Stomp(Box<SessionConfig>, DeadLetters),
    Amqp(spi_consumer::source::amqp::AmqpConfig, DeadLetters),
    None,
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
        // The state directory holds the routing state, the rotate state and the splits.
        let splits = Arc::new(SplitStore::open(&config.state_dir)?);
        let table = Arc::new(ArcSwap::from_pointee(RouteTable {
            splits: splits
                .all()
                .into_iter()
                .filter_map(|(name, w)| {
                    Some((Arc::from(name.as_str()), Arc::new(Split::new(w).ok()?)))
                })
                .collect(),
            ..RouteTable::default()
        }));
        let token = admin_token(&config)?;
        let workers = crate::workers::count(config.worker_threads, config.work_stealing)
            .map(|n| Workers::start(n, &metrics.worker_connections))
            .transpose()
            .map_err(StartError::Workers)?
            .map(Arc::new);
        let registry = Arc::new(MemberRegistry::new(MemberRegistryConfig {
            max_in_flight: config.upstream.max_connections_per_backend,
            max_per_source: config.upstream.max_per_source(),
            reserve_percent: config.upstream.source_reserve,
            pool: PoolSettings {
                max_idle: config.upstream.max_idle(),
                workers: workers.as_ref().map_or(1, |w| w.threads()),
                idle_timeout: config.upstream.idle_timeout,
                opened: metrics.upstream_connections.clone(),
            },
            health: config.health.settings(),
            metrics: metrics.health.clone(),
            rotate: crate::members::rotate::RotateStore::open(&config.state_dir)?,
            checkers: Some(tokio::runtime::Handle::current()),
        }));
        let naming = Naming {
            cloud_domain: config.cloud_domain.to_ascii_lowercase(),
            ha_prefix: config.ha_dns_prefix.clone(),
            ha_suffix: config.ha_dns_suffix.clone(),
            app_dns: config.app_dns,
            endpoint_types: config.endpoint_types.clone(),
            balance: config.upstream.balance,
            fail_open: config.health.fail_open,
            tcp: config.tcp.listen.iter().map(|p| p.matcher()).collect(),
        };
        // TLS: the default certificate must load, or the router does not start.
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let default_cert = load_default_cert(&config.tls, &provider)?;
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
        let live_certs = certs.lock().unwrap_or_else(|p| p.into_inner()).live();
        let ticketer = match &config.tls.session_ticket_key_file {
            Some(path) if config.tls.resumption => Some(Arc::new(SharedTicketer::open(
                path,
                config.tls.session_ticket_rotation,
            )?)),
            _ => None,
        };
        let recent = Arc::new(crate::table::recent::Recent::default());
        let events = Events {
            config: config.clone(),
            naming,
            registry: registry.clone(),
            table: table.clone(),
            metrics: metrics.clone(),
            certs: certs.clone(),
            recent: recent.clone(),
        };
        // The saved state is served before any source answers.
        let (consumer, source) = events.open()?;
        // Reading a large saved state leaves much freed heap behind (the file, the
        // parse): give it back before serving.
        tokio::task::spawn_blocking(crate::memory::trim);

        let mut bind = |name: &str, what, addr: SocketAddr| {
            let listener = match inherited.as_mut().and_then(|i| i.listener(name)) {
                Some(l) => {
                    if let Ok(had) = l.as_ref().map(|l| l.local_addr())
                        && let Ok(had) = had
                        && addr.port() != 0
                        && had != addr
                    {
                        tracing::warn!(listener = name, inherited = %had, configured = %addr, "kept the inherited socket; a new address needs a restart");
                    }
                    l
                }
                None => crate::request::listener::bind(addr),
            };
            listener.map_err(|source| StartError::Bind { what, addr, source })
        };
        let http_addr = config
            .listen
            .http
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 80)));
        let http = bind("http", "listen.http", http_addr)?;
        let tcp = config
            .tcp
            .listen
            .iter()
            .enumerate()
            .map(|(i, p)| bind(&format!("tcp.{i}"), "tcp.listen", p.address))
            .collect::<Result<Vec<_>, _>>()?;
        let admin = config
            .listen
            .admin
            .map(|a| bind("admin", "listen.admin", a))
            .transpose()?;
        match config.listen.admin {
            Some(a) if !a.ip().is_loopback() => tracing::warn!(
                address = %a,
                "listen.admin is not on loopback: metrics, the route table and rotate-out are open to this network"
            ),
            None => tracing::info!("listen.admin is off: no /readyz for keepalived, no metrics"),
            _ => {}
        }
        let https = match config.listen.https {
            Some(addr) => {
                if config.tls.default_cert.is_none() {
                    tracing::warn!(
                        "listen.https without tls.default_cert: clients without SNI, or with a name that has no alias certificate, fail the handshake"
                    );
                }
                let resumption = match &ticketer {
                    _ if !config.tls.resumption => crate::tls::server::Resumption::Off,
                    Some(t) => crate::tls::server::Resumption::Shared(t.clone()),
                    None => crate::tls::server::Resumption::Local,
                };
                let acceptor =
                    crate::tls::server::acceptor(live_certs.clone(), provider.clone(), resumption)?;
                Some((bind("https", "listen.https", addr)?, acceptor))
            }
            None => None,
        };
        if let Some(i) = &inherited {
            for name in i.unused() {
                tracing::warn!(
                    listener = name,
                    "the old router's listener is not in this configuration; closed"
                );
            }
        }
        // Where a successor asks for these sockets. Without it, an upgrade is a restart.
        let handover = match Handover::bind(&config.state_dir, inherited.is_some()).await {
            Ok(h) => Some(h),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(StartError::Handover(e));
            }
            Err(e) => {
                tracing::warn!(error = %e, "no upgrade socket: `router upgrade` cannot take over from this process");
                None
            }
        };
        let member_tls = crate::tls::client::connector(
            config.upstream.tls.ca_file.as_deref(),
            config.upstream.tls.verify,
            provider.clone(),
        )?;
        let redirect = match (&https, config.tls.redirect_http) {
            (Some((l, _)), true) => Some(crate::request::route::Redirect {
                https_port: l.local_addr().map(|a| a.port()).unwrap_or(443),
                certs: live_certs.clone(),
            }),
            _ => None,
        };

        let proxy = with_settings(
            Shared {
                table: table.clone(),
                member_tls: Some(member_tls),
                redirect,
                metrics: metrics.clone(),
                certs: https.is_some().then(|| live_certs.clone()),
            },
            &config,
        );
        let live: Live = Arc::new(ArcSwap::from_pointee(Serving {
            proxy: Arc::new(proxy),
            limits: config.limits.clone(),
            handshake_timeout: config.tls.handshake_timeout,
        }));
        let reconcile = config
            .reconcile
            .as_ref()
            .map(|r| r.client(provider.clone()).map(Arc::new))
            .transpose()?;
        let (reconcile_tx, reconcile_jobs) = tokio::sync::mpsc::channel(4);
        let admin_api = Arc::new(Admin {
            table,
            registry: registry.clone(),
            metrics,
            ready: Arc::new(AtomicBool::new(false)),
            splits,
            token: arc_swap::ArcSwapOption::from(token.map(Arc::new)),
            audit: Default::default(),
            reconcile: reconcile.is_some().then_some(reconcile_tx),
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
            dead_letters: match (&config.spi.source, &config.spi.spool) {
                (SourceKind::Spool, Some(s)) => s.path.join(spi_consumer::source::spool::FAILED),
                _ => config.state_dir.join("dead-letters"),
            },
        });
        Ok(Router {
            config,
            http,
            tcp,
            https,
            admin,
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
        })
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

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown` resolves, then drains within `shutdown_grace`.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        for (what, addr) in [
            ("http", Some(self.http_addr())),
            ("https", self.https_addr()),
            ("admin", self.admin_addr()),
        ] {
            if let Some(addr) = addr {
                tracing::info!(listener = what, %addr, "listening");
            }
        }

        let mut sourcing = Sourcing::start(
            self.source,
            self.consumer,
            &self.config,
            &self.admin_api.metrics,
        );
        // Descriptors a successor takes over (the tasks below keep them open).
        let mut sockets: Vec<(String, std::os::fd::RawFd)> = Vec::new();
        {
            use std::os::fd::AsRawFd;
            sockets.push(("http".into(), self.http.as_raw_fd()));
            if let Some((l, _)) = &self.https {
                sockets.push(("https".into(), l.as_raw_fd()));
            }
            if let Some(l) = &self.admin {
                sockets.push(("admin".into(), l.as_raw_fd()));
            }
            for (i, l) in self.tcp.iter().enumerate() {
                sockets.push((format!("tcp.{i}"), l.as_raw_fd()));
            }
        }
        let open_gauges = (
            self.admin_api.metrics.open_connections.clone(),
            self.admin_api.metrics.connections.clone(),
        );
        // The admin API outlives the drain: /readyz says 503 while connections finish.
        let (admin_stop_tx, admin_stop_rx) = watch::channel(false);
        let admin_task = self.admin.map(|l| {
            let limits = self.config.limits.clone();
            tokio::spawn(self.admin_api.clone().serve(l, limits, admin_stop_rx))
        });
        // With per-core workers the client listeners accept on the first one
        // (see `crate::workers`).
        let listeners = self
            .workers
            .as_ref()
            .map_or_else(tokio::runtime::Handle::current, |w| w.acceptor().clone());
        let https_task = self.https.map(|(l, tls)| {
            listeners.spawn(crate::request::accept::serve(
                l,
                "https",
                Some(tls),
                self.live.clone(),
                stop_rx.clone(),
                self.config.shutdown_grace,
                self.workers.clone(),
            ))
        });
        for (rule, (listener, port)) in self
            .tcp
            .into_iter()
            .zip(self.config.tcp.listen.clone())
            .enumerate()
        {
            tokio::spawn(crate::tcp::serve(
                listener,
                rule,
                port,
                self.live.clone(),
                stop_rx.clone(),
            ));
        }
        let http_task = listeners.spawn(crate::request::accept::serve(
            self.http,
            "http",
            None,
            self.live.clone(),
            stop_rx.clone(),
            self.config.shutdown_grace,
            self.workers.clone(),
        ));
        // Idle member connections are closed once older than the idle timeout;
        // certificates past their replacement grace go; the ticket secret is
        // re-read if its file changed.
        let trimmer = {
            let (open, accepted) = open_gauges;
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
                let mut trimmer = crate::memory::Trimmer::default();
                loop {
                    tick.tick().await;
                    let closed: u64 = ["http", "https"]
                        .iter()
                        .map(|l| {
                            accepted
                                .with_label_values(&[l])
                                .get()
                                .saturating_sub(open.with_label_values(&[l]).get().max(0) as u64)
                        })
                        .sum();
                    if trimmer.observe(closed, std::time::Instant::now()) {
                        tokio::task::spawn_blocking(crate::memory::trim);
                    }
                }
            })
        };
        let sweeper = {
            let registry = self.registry.clone();
            let certs = self.certs.clone();
            let ticketer = self.ticketer.clone();
            let period =
                (self.config.upstream.idle_timeout / 4).max(std::time::Duration::from_millis(100));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(period);
                loop {
                    tick.tick().await;
                    registry.sweep();
                    certs
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .purge(std::time::Instant::now());
                    if let Some(t) = &ticketer {
                        t.reload();
                    }
                }
            })
        };
        self.admin_api.ready.store(true, Ordering::Release);
        if let Some(old) = self.inherited
            && let Err(e) = old.confirm()
        {
            tracing::warn!(error = %e, "upgrade: could not tell the old router to drain (it drains when its successor's line closes only if it saw READY)");
        }

        // Reconcile every `reconcile.interval` (0: only when asked).
        let reconcile_timer = match (&self.config.reconcile, &self.admin_api.reconcile) {
            (Some(r), Some(jobs)) if !r.interval.is_zero() => {
                let (every, jobs) = (r.interval, jobs.clone());
                Some(tokio::spawn(async move {
                    let mut tick =
                        tokio::time::interval_at(tokio::time::Instant::now() + every, every);
                    loop {
                        tick.tick().await;
                        if jobs
                            .send(crate::reconcile::Job {
                                apply: None,
                                reply: None,
                            })
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                }))
            }
            _ => None,
        };
        let mut jobs = self.reconcile_jobs;
        tokio::pin!(shutdown);
        let handover = self.handover;
        let upgraded = loop {
            let request = async {
                match &handover {
                    Some(h) => h.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = &mut shutdown => break false,
                Some(job) = jobs.recv() => {
                    let Some(client) = &self.reconcile else { continue };
                    let run = reconcile_once(
                        client.clone(),
                        job.apply,
                        &self.config,
                        &self.admin_api,
                        &self.events,
                        &mut sourcing,
                    );
                    let report = tokio::select! {
                        r = run => r,
                        _ = &mut shutdown => break false,
                    };
                    if let Some(reply) = job.reply {
                        let _ = reply.send(report);
                    }
                }
                request = request => {
                    tracing::info!("upgrade: a new router asks for the listeners; stopping the event source first");
                    sourcing.stop().await;
                    if request.hand_over(&sockets, UPGRADE_READY_WAIT).await {
                        tracing::info!("upgrade: the new router serves; this one stops accepting and drains");
                        break true;
                    }
                    tracing::error!("upgrade: the new router did not confirm; this one carries on with its event source");
                    sourcing.reopen(&self.events, &self.config, &self.admin_api.metrics, |_| {});
                }
            }
        };
        drop(handover);
        if let Some(t) = reconcile_timer {
            t.abort();
        }
        if upgraded {
            // Readiness checks and the admin API go to the new process from now on.
            let _ = admin_stop_tx.send(true);
        } else {
            tracing::info!("shutting down");
        }
        // Not ready first, so that the VIP moves before connections are refused.
        self.admin_api.ready.store(false, Ordering::Release);
        // The source stops with the listeners; its task is awaited below.
        let _ = sourcing.stop.send(true);
        let _ = stop_tx.send(true);
        let _ = http_task.await;
        if let Some(t) = https_task {
            let _ = t.await;
        }
        sourcing.stop().await;
        sweeper.abort();
        trimmer.abort();
        let _ = admin_stop_tx.send(true);
        if let Some(t) = admin_task {
            let _ = t.await;
        }
        tracing::info!("stopped");
    }
}

/// How long an old router waits for its successor to load the state and serve.
const UPGRADE_READY_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The running event source, which an upgrade and a reconcile stop and start again.
struct Sourcing {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Sourcing {
    fn start(
        source: Source,
        consumer: Consumer<Builder>,
        config: &Config,
        metrics: &Metrics,
    ) -> Sourcing {
        let (stop, rx) = watch::channel(false);
        Sourcing {
            stop,
            task: spawn_source(source, consumer, config, metrics, rx),
        }
    }

    /// Stops the source and waits until it has (its last batch saved and acked).
    async fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }

    /// After [`stop`](Self::stop): opens the saved state again (publishing it
    /// whole), lets `first` apply changes through the consumer, and starts the source.
    fn reopen(
        &mut self,
        events: &Events,
        config: &Config,
        metrics: &Metrics,
        first: impl FnOnce(&mut Consumer<Builder>),
    ) {
        match events.open() {
            Ok((mut consumer, source)) => {
                first(&mut consumer);
                *self = Sourcing::start(source, consumer, config, metrics);
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot open the event source again; serving the table as it is")
            }
        }
    }
}

/// One reconcile run (see [`crate::reconcile`]): check; then, if asked and anything
/// differs, fix with the source stopped.
async fn reconcile_once(
    client: Arc<crate::reconcile::broker::Client>,
    apply: Option<bool>,
    config: &Config,
    admin: &Admin,
    events: &Events,
    sourcing: &mut Sourcing,
) -> crate::reconcile::Report {
    let settings = config.reconcile.as_ref();
    let apply = apply.unwrap_or(settings.is_some_and(|r| r.apply));
    let concurrency = settings.map_or(4, |r| r.concurrency);
    let table = admin.table.load_full();
    let checked = crate::reconcile::check(client, &table, concurrency, &admin.metrics).await;
    let mut report = checked.report;
    report.apply = apply;
    if apply && !checked.found.is_empty() {
        // Nothing else writes the state while fixing.
        sourcing.stop().await;
        // An app an event changed since the check: the broker's answer may be older.
        let now = admin.table.load_full();
        let (fix, deferred): (Vec<_>, Vec<_>) = checked
            .found
            .into_iter()
            .partition(|(key, route, _)| now.app(key).is_some_and(|r| Arc::ptr_eq(r, route)));
        report.deferred = deferred
            .into_iter()
            .map(|(k, _, _)| k.to_string())
            .collect();
        sourcing.reopen(events, config, &admin.metrics, |consumer| {
            let fixes: Vec<_> = fix
                .iter()
                .filter_map(|(key, _, theirs)| {
                    let app = consumer.state().app(key)?;
                    Some(crate::reconcile::diff::fixes(app, theirs.as_ref()))
                })
                .flatten()
                .collect();
            for e in &fixes {
                tracing::info!(event = %e, "reconcile: applying");
                consumer.apply_event(e);
            }
            match consumer.commit() {
                Ok(()) => report.applied = fixes.len(),
                Err(e) => {
                    tracing::error!(error = %e, "reconcile: cannot save the fixes; they stay pending");
                    report.errors.insert("state".into(), e.to_string());
                }
            }
        });
    }
    tracing::info!(
        apps = report.apps_checked,
        differing = report.differences.len(),
        errors = report.errors.len(),
        applied = report.applied,
        "reconcile done"
    );
    report
}

/// Starts the event source (with none, a task that keeps the consumer until stop).
fn spawn_source(
    source: Source,
    consumer: Consumer<Builder>,
    config: &Config,
    metrics: &Metrics,
    mut stop: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    match source {
        Source::Spool(spool) => {
            let interval = config
                .spi
                .spool
                .as_ref()
                .map_or(std::time::Duration::from_secs(1), |s| s.interval);
            tracing::info!(dir = %spool.dir().display(), "spool source started");
            Some(tokio::spawn(spool.run(consumer, interval, stopped)))
        }
        Source::Stomp(session, dead) => {
            tracing::info!(hosts = ?session.hosts, destination = %session.destination, "STOMP source started");
            Some(tokio::spawn(spi_consumer::source::stomp::source::run(
                *session,
                consumer,
                dead,
                metrics.spi.source.clone(),
                stopped,
            )))
        }
        Source::Amqp(amqp, dead) => {
            tracing::info!(queue = %amqp.queue, "AMQP source started");
            Some(tokio::spawn(spi_consumer::source::amqp::run(
                amqp,
                consumer,
                dead,
                metrics.spi.source.clone(),
                stopped,
            )))
        }
        // No source: the consumer (the whole state) is kept until shutdown rather
        // than freed during start (0.1 s of a 100k-app start went to that).
        Source::None => Some(tokio::spawn(async move {
            stopped.await;
            drop(consumer);
        })),
    }
}

/// What every generation of the [`Proxy`] shares: a reload changes only settings.
struct Shared {
    table: Arc<ArcSwap<RouteTable>>,
    member_tls: Option<tokio_rustls::TlsConnector>,
    redirect: Option<crate::request::route::Redirect>,
    metrics: Arc<Metrics>,
    certs: Option<Arc<ArcSwap<crate::tls::store::Certs>>>,
}

impl Shared {
    fn of(p: &Proxy) -> Shared {
        Shared {
            table: p.table.clone(),
            member_tls: p.member_tls.clone(),
            redirect: p.redirect.clone(),
            metrics: p.metrics.clone(),
            certs: p.certs.clone(),
        }
    }
}

/// The proxy with the settings of `config` (what a reload may change).
fn with_settings(base: Shared, config: &Config) -> Proxy {
    Proxy {
        table: base.table,
        member_tls: base.member_tls,
        redirect: base.redirect,
        upstream: upstream::ConnectSettings {
            connect_timeout: config.upstream.connect_timeout,
        },
        metrics: base.metrics,
        response_timeout: config.upstream.response_timeout,
        queue_timeout: config.upstream.queue_timeout,
        upload: UploadSettings {
            buffer: config.limits.body_buffer_bytes,
            first: config.limits.header_read_timeout,
            stall: config.limits.body_timeout,
        },
        tunnel_idle_timeout: config.limits.tunnel_idle_timeout,
        forwarded: config.forwarded.clone(),
        certs: base.certs,
        access_log: config.access_log.enabled,
    }
}

/// Applies a changed configuration file to the running router (SIGHUP, what
/// `systemctl reload` sends).
///
/// Live at once: `limits.*` (connection-level ones for connections accepted from
/// then on), `upstream` timeouts, `health.*` checks and thresholds, the default
/// certificate and the TLS handshake deadline, `access_log.enabled`, `forwarded` and
/// the admin token.
/// Everything else needs a restart (or an upgrade, see the README); a reload that
/// changes it says so by name and keeps the running value.
#[derive(Clone)]
pub struct Reloader {
    live: Live,
    admin: Arc<Admin>,
    registry: Arc<MemberRegistry>,
    certs: Arc<Mutex<CertIndex>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    metrics: Arc<Metrics>,
    /// As started: settings that cannot change live are compared with it.
    started: Arc<Config>,
}

impl Reloader {
    /// Applies `config` (already parsed and validated whole). On error nothing
    /// changed; on success, the settings that need a restart and differ are returned.
    pub fn apply(&self, mut config: Config) -> Result<Vec<&'static str>, StartError> {
        fit_file_descriptors(&mut config);
        // Everything that can fail first: on error nothing has changed.
        let loaded = load_default_cert(&config.tls, &self.provider)
            .and_then(|cert| Ok((cert, admin_token(&config)?)));
        let (default_cert, token) = match loaded {
            Ok(l) => l,
            Err(e) => {
                self.metrics.reloads.with_label_values(&["error"]).inc();
                return Err(e);
            }
        };
        self.admin.token.store(token.map(Arc::new));
        self.admin
            .names
            .store(Arc::new(crate::admin::Names::new(&config.admin.hosts)));
        let current = self.live.load_full();
        let proxy = with_settings(Shared::of(&current.proxy), &config);
        self.registry.set_health(config.health.settings());
        if let Some(l) = &default_cert {
            self.metrics.tls.set_expiry("default", l.not_after);
        }
        self.certs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set_default(default_cert.map(|l| l.key));
        self.live.store(Arc::new(Serving {
            proxy: Arc::new(proxy),
            limits: config.limits.clone(),
            handshake_timeout: config.tls.handshake_timeout,
        }));
        self.metrics.reloads.with_label_values(&["ok"]).inc();
        Ok(not_live(&self.started, &config))
    }

    /// Counts a reload refused before [`apply`](Self::apply) (the file did not parse).
    pub fn refused(&self) {
        self.metrics.reloads.with_label_values(&["error"]).inc();
    }
}

/// The settings that differ between `a` and `b` and cannot change without a restart.
fn not_live(a: &Config, b: &Config) -> Vec<&'static str> {
    macro_rules! fields {
        ($($name:literal => $($f:ident).+),* $(,)?) => {{
            let mut out = Vec::new();
            $(if format!("{:?}", a.$($f).+) != format!("{:?}", b.$($f).+) { out.push($name); })*
            out
        }};
    }
    fields! {
        "cloud_domain" => cloud_domain,
        "ha_dns_prefix" => ha_dns_prefix,
        "ha_dns_suffix" => ha_dns_suffix,
        "app_dns" => app_dns,
        "endpoint_types" => endpoint_types,
        "listen" => listen,
        "state_dir" => state_dir,
        "spi" => spi,
        "worker_threads" => worker_threads,
        "work_stealing" => work_stealing,
        "tcp" => tcp,
        "shutdown_grace" => shutdown_grace,
        "reconcile" => reconcile,
        "access_log.format" => access_log.format,
        "limits.max_admin_connections" => limits.max_admin_connections,
        "upstream.balance" => upstream.balance,
        "upstream.tls" => upstream.tls,
        "upstream.max_connections_per_backend" => upstream.max_connections_per_backend,
        "upstream.max_idle_per_backend" => upstream.max_idle_per_backend,
        "upstream.idle_timeout" => upstream.idle_timeout,
        "upstream.source_share" => upstream.source_share,
        "upstream.source_reserve" => upstream.source_reserve,
        "health.fail_open" => health.fail_open,
        "tls.session_ticket_key_file" => tls.session_ticket_key_file,
        "tls.session_ticket_rotation" => tls.session_ticket_rotation,
        "tls.resumption" => tls.resumption,
        "tls.replace_grace" => tls.replace_grace,
        "tls.redirect_http" => tls.redirect_http,
    }
}

/// Says so when a secret's file can be read by its group or by anyone (it should be
/// 0600 or 0400, as the ticket key file).
fn warn_if_readable_by_others(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path) {
        let mode = m.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                file = %path.display(),
                mode = format!("{mode:04o}"),
                "admin.token_file can be read by other users: chmod 600 it"
            );
        }
    }
}

/// `admin.token_file`'s first line (an empty one is refused).
pub fn admin_token(config: &Config) -> Result<Option<String>, StartError> {
    let Some(path) = &config.admin.token_file else {
        return Ok(None);
    };
    let error = |source| StartError::AdminToken {
        path: path.clone(),
        source,
    };
    let t = config_file::first_line(path)
        .map_err(error)?
        .trim()
        .to_string();
    if t.is_empty() {
        return Err(error(std::io::Error::other("the first line is empty")));
    }
    warn_if_readable_by_others(path);
    Ok(Some(t))
}

/// Raises the file-descriptor limit and lowers `limits.max_connections` to what
/// fits in it (see [`crate::fds`]), saying so.
fn fit_file_descriptors(config: &mut Config) {
    let limit = match crate::fds::raise_limit() {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read RLIMIT_NOFILE; client connections not sized to it");
            return;
        }
    };
    let limits = &mut config.limits;
    let b = crate::fds::budget(limit, limits.max_connections, limits.max_admin_connections);
    if b.client_connections < limits.max_connections
        || b.admin_connections < limits.max_admin_connections
    {
        tracing::warn!(
            nofile = limit,
            reserve = b.reserve,
            max_connections = limits.max_connections,
            effective = b.client_connections,
            max_admin_connections = limits.max_admin_connections,
            effective_admin = b.admin_connections,
            "connection limits do not fit in the file-descriptor limit (each client may hold a member connection too); lowered"
        );
        limits.max_connections = b.client_connections;
        limits.max_admin_connections = b.admin_connections;
    } else {
        tracing::debug!(nofile = limit, "file-descriptor limit");
    }
}

/// `tls.default_cert` and `tls.default_key` (and the pass phrase file), loaded.
fn load_default_cert(
    tls: &crate::config::TlsConfig,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<Option<crate::tls::keys::Loaded>, StartError> {
    let (Some(cert), Some(key)) = (&tls.default_cert, &tls.default_key) else {
        return Ok(None);
    };
    let read = |field: &'static str, path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|source| StartError::DefaultCertRead {
            field,
            path: path.clone(),
            source,
        })
    };
    let cert_pem = read("tls.default_cert", cert)?;
    let key_pem = read("tls.default_key", key)?;
    let pass = match &tls.default_key_pass_file {
        Some(p) => {
            Some(
                config_file::first_line(p).map_err(|source| StartError::DefaultCertRead {
                    field: "tls.default_key_pass_file",
                    path: p.clone(),
                    source,
                })?,
            )
        }
        None => None,
    };
    crate::tls::keys::load(&cert_pem, &key_pem, pass.as_deref(), provider)
        .map(Some)
        .map_err(|source| {
            let field = match source {
                crate::tls::keys::CertError::NoCertificate
                | crate::tls::keys::CertError::BadCertificate(_) => "tls.default_cert",
                _ => "tls.default_key",
            };
            let path = if field == "tls.default_cert" {
                cert
            } else {
                key
            };
            StartError::DefaultCert {
                field,
                path: path.clone(),
                source,
            }
        })
}
