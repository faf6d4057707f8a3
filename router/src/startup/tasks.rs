//! The router's periodic chores, each a task `run` starts and aborts at shutdown.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::members::MemberRegistry;
use crate::tls::store::CertIndex;
use crate::tls::tickets::SharedTicketer;

/// Moves the per-app traffic windows and places (see [`crate::metrics::apps`])
/// every 10 s, also when nothing scrapes.
pub(super) fn spawn_app_traffic(apps: Arc<crate::metrics::apps::AppsTraffic>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        loop {
            tick.tick().await;
            apps.pass(std::time::Instant::now());
        }
    })
}

/// Gives freed heap back to the system after a storm of client connections closed
/// (see the `heap` crate); looks every 5 s at the connections the client
/// listeners accepted and still hold.
pub(super) fn spawn_trimmer(
    metrics: &crate::metrics::Metrics,
    workers: Option<Arc<crate::workers::Workers>>,
) -> JoinHandle<()> {
    let (open, accepted) = (
        metrics.open_connections.clone(),
        metrics.connections.clone(),
    );
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        let mut trimmer = heap::Trimmer::default();
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
            if trimmer.observe(closed, Instant::now()) {
                // Each thread gives back its own heap's pages (see `memory`).
                tokio::task::spawn_blocking(heap::trim);
                heap::trim();
                if let Some(workers) = &workers {
                    workers.on_each(heap::trim);
                }
            }
        }
    })
}

/// Every `period`: idle member connections older than the idle timeout are
/// closed, certificates past their replacement grace go, and the ticket secret is
/// read again if its file changed.
pub(super) fn spawn_sweeper(
    registry: Arc<MemberRegistry>,
    certs: Arc<Mutex<CertIndex>>,
    ticketer: Option<Arc<SharedTicketer>>,
    period: Duration,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            registry.sweep();
            certs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .purge(Instant::now());
            if let Some(t) = &ticketer {
                t.reload();
            }
        }
    })
}

/// Asks for a reconcile run every `reconcile.interval`, until the router stops
/// taking jobs; none without reconcile or with an interval of 0 (only when
/// asked).
fn spawn_reconcile_timer(
    settings: Option<&crate::reconcile::ReconcileSettings>,
    jobs: Option<&tokio::sync::mpsc::Sender<crate::reconcile::Job>>,
) -> Option<JoinHandle<()>> {
    let every = settings.map(|r| r.interval).filter(|i| !i.is_zero())?;
    let jobs = jobs?.clone();
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tick.tick().await;
            let job = crate::reconcile::Job {
                apply: None,
                reply: None,
            };
            if jobs.send(job).await.is_err() {
                return;
            }
        }
    }))
}

/// The tasks only some configurations run: the reconcile timer, the ACME
/// issuer, the pair's link and its shared limit.
pub(super) fn spawn_timers(
    config: &crate::config::Config,
    admin: &Arc<crate::admin::Admin>,
) -> [Option<JoinHandle<()>>; 4] {
    [
        spawn_reconcile_timer(config.reconcile.as_ref(), admin.reconcile.as_ref()),
        spawn_issuer(config, admin),
        spawn_pair_link(admin),
        spawn_pair_counts(admin),
    ]
}

/// Orders and renews ACME certificates (see [`crate::issuer`]); none without
/// `acme.directory`. The certificates saved by earlier runs are served first.
fn spawn_issuer(
    config: &crate::config::Config,
    admin: &Arc<crate::admin::Admin>,
) -> Option<JoinHandle<()>> {
    let shared = admin.acme.clone()?;
    config.acme.directory.as_ref()?;
    let pair = pair(config, admin);
    let mut issuer = crate::issuer::Manager::new(
        config.acme.clone(),
        admin.table.clone(),
        shared,
        admin.metrics.tls.clone(),
        pair,
    )
    .with_audit({
        let admin = admin.clone();
        Arc::new(move |action: &str, alias: &str, result: &str| {
            admin.audit.acme("issuer", action, alias, result)
        })
    });
    issuer.restore();
    Some(tokio::spawn(issuer.run()))
}

/// ACME's part of the pair: the link's peer (`pair.peer`, or `acme.peer`).
fn pair(
    config: &crate::config::Config,
    admin: &crate::admin::Admin,
) -> Option<crate::issuer::Pair> {
    let link = admin.pair.as_ref()?;
    Some(crate::issuer::Pair::new(
        link.peer.clone(),
        link.state.node() == crate::config::Node::B,
        config.acme.peer_timeout,
    ))
}

/// The pair's link's sender (see [`crate::pair::link`]); none without a pair.
fn spawn_pair_link(admin: &crate::admin::Admin) -> Option<JoinHandle<()>> {
    let link = admin.pair.clone()?;
    Some(tokio::spawn(link.run()))
}

/// The pair's shared rate limit's sender (see [`crate::pair::counts`]).
fn spawn_pair_counts(admin: &crate::admin::Admin) -> Option<JoinHandle<()>> {
    let link = admin.pair.clone()?;
    let interval = link.limit_interval;
    let clients = admin.policies.clients.clone();
    Some(tokio::spawn(crate::pair::counts::run(
        link, clients, interval,
    )))
}
