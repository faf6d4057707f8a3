//! The event path's start: the saved state loaded and published, the configured
//! source opened and run; stopped and opened again around an upgrade's hand-over
//! and a reconcile's fixes.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use spi_consumer::deadletter::DeadLetters;
use spi_consumer::source::stomp::SessionConfig;
use spi_consumer::source::stomp::tls::{TlsClient, TlsFiles};
use spi_consumer::{Consumer, Spool, Store};
use tokio::sync::watch;

use super::StartError;
use crate::admin::Admin;
use crate::config::{Config, SourceKind};
use crate::members::MemberRegistry;
use crate::metrics::Metrics;
use crate::table::{Builder, Naming, RouteTable};
use crate::tls::store::CertIndex;

/// What opens the saved state and the event source: at start, and again in a
/// router whose upgrade failed after it had stopped its source.
pub(super) struct Events {
    pub(super) config: Config,
    pub(super) naming: Naming,
    pub(super) registry: Arc<MemberRegistry>,
    pub(super) table: Arc<ArcSwap<RouteTable>>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) certs: Arc<Mutex<CertIndex>>,
    pub(super) recent: Arc<crate::table::recent::Recent>,
}

impl Events {
    /// Events applied to `table` (with `config`'s naming), its members in
    /// `registry`, its certificates in `certs`, each change noted in `recent`.
    pub(super) fn new(
        config: &Config,
        registry: &Arc<MemberRegistry>,
        table: &Arc<ArcSwap<RouteTable>>,
        metrics: &Arc<Metrics>,
        certs: &Arc<Mutex<CertIndex>>,
        recent: &Arc<crate::table::recent::Recent>,
    ) -> Events {
        Events {
            config: config.clone(),
            naming: super::naming(config),
            registry: registry.clone(),
            table: table.clone(),
            metrics: metrics.clone(),
            certs: certs.clone(),
            recent: recent.clone(),
        }
    }

    /// Loads the saved state (publishing it whole) and opens the configured source.
    pub(super) fn open(&self) -> Result<(Consumer<Builder>, EventSource), StartError> {
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
                Some(a) => EventSource::Amqp(a.clone(), dead_letters()?),
                None => EventSource::None,
            },
            (SourceKind::Spool, Some(s), _) => {
                let limits = spi_consumer::source::spool::SpoolLimits {
                    max_file_bytes: s.max_file_bytes,
                    done_retention: s.done_retention,
                    failed_retention: s.failed_retention,
                };
                EventSource::Spool(Spool::open_with(&s.path, limits).map_err(|source| {
                    StartError::Spool {
                        path: s.path.clone(),
                        source,
                    }
                })?)
            }
            (SourceKind::Stomp, _, Some(s)) => {
                EventSource::Stomp(Box::new(stomp_session(s)?), dead_letters()?)
            }
            _ => EventSource::None,
        };
        Ok((consumer, source))
    }
}

/// Where routing events come from.
pub(super) enum EventSource {
    Spool(Spool),
    Stomp(Box<SessionConfig>, DeadLetters),
    Amqp(spi_consumer::source::amqp::AmqpConfig, DeadLetters),
    None,
}

/// The STOMP session `spi.stomp` describes (its passcode and TLS files read now).
fn stomp_session(s: &crate::config::StompConfig) -> Result<SessionConfig, StartError> {
    let passcode = match &s.passcode_file {
        Some(path) => {
            Some(
                config_file::first_line(path).map_err(|source| StartError::Passcode {
                    path: path.clone(),
                    source,
                })?,
            )
        }
        None => None,
    };
    let tls = s.tls.as_ref().map(|t| {
        TlsClient::load(&TlsFiles {
            ca_file: t.ca_file.clone(),
            cert_file: t.cert_file.clone(),
            key_file: t.key_file.clone(),
            server_name: t.server_name.clone(),
        })
    });
    Ok(SessionConfig {
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
        tls: tls.transpose()?,
    })
}

/// The running event source, which an upgrade and a reconcile stop and start again.
pub(super) struct Sourcing {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Sourcing {
    pub(super) fn start(
        source: EventSource,
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

    /// Tells the source to stop, without waiting (it stops with the listeners).
    pub(super) fn signal_stop(&self) {
        let _ = self.stop.send(true);
    }

    /// Stops the source and waits until it has (its last batch saved and acked).
    pub(super) async fn stop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }

    /// After [`stop`](Self::stop): opens the saved state again (publishing it
    /// whole), lets `first` apply changes through the consumer, and starts the source.
    pub(super) fn reopen(
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
pub(super) async fn reconcile_once(
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
    let discover_max = settings.map_or(0, |r| r.discover_max);
    let table = admin.table.load_full();
    let checked =
        crate::reconcile::check(client, &table, concurrency, discover_max, &admin.metrics).await;
    let mut report = checked.report;
    report.apply = apply;
    if apply && !checked.found.is_empty() {
        // Nothing else writes the state while fixing.
        sourcing.stop().await;
        // An app an event changed since the check: the broker's answer may be older.
        let now = admin.table.load_full();
        let (fix, deferred): (Vec<_>, Vec<_>) =
            checked
                .found
                .into_iter()
                .partition(|f| match (now.app(&f.key), &f.route) {
                    (Some(now), Some(then)) => Arc::ptr_eq(now, then),
                    (None, None) => true,
                    _ => false,
                });
        report.deferred = deferred.into_iter().map(|f| f.key.to_string()).collect();
        sourcing.reopen(events, config, &admin.metrics, |consumer| {
            let fixes: Vec<_> = fix
                .iter()
                .filter_map(|f| match (consumer.state().app(&f.key), &f.theirs) {
                    (Some(app), theirs) => {
                        Some(crate::reconcile::diff::fixes(app, theirs.as_ref()))
                    }
                    (None, Some(theirs)) => Some(crate::reconcile::diff::creates(
                        &spi_consumer::decode::AppId {
                            name: f.app.name.clone(),
                            namespace: f.app.namespace.clone(),
                        },
                        theirs,
                    )),
                    (None, None) => None,
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
pub(super) fn spawn_source(
    source: EventSource,
    consumer: Consumer<Builder>,
    config: &Config,
    metrics: &Metrics,
    mut stop: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    match source {
        EventSource::Spool(spool) => {
            let interval = config
                .spi
                .spool
                .as_ref()
                .map_or(std::time::Duration::from_secs(1), |s| s.interval);
            tracing::info!(dir = %spool.dir().display(), "spool source started");
            Some(tokio::spawn(spool.run(consumer, interval, stopped)))
        }
        EventSource::Stomp(session, dead) => {
            tracing::info!(hosts = ?session.hosts, destination = %session.destination, "STOMP source started");
            Some(tokio::spawn(spi_consumer::source::stomp::source::run(
                *session,
                consumer,
                dead,
                metrics.spi.source.clone(),
                stopped,
            )))
        }
        EventSource::Amqp(amqp, dead) => {
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
        EventSource::None => Some(tokio::spawn(async move {
            stopped.await;
            drop(consumer);
        })),
    }
}
