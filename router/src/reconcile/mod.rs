//! Reconcile: the saved state checked against the broker's REST API (routing-spi
//! §1: the routing plugin's messages are non-persistent by default, so a broker
//! restart loses events, and after a crash a remove can overtake its add).
//!
//! A run has two steps:
//! 1. **check** ([`check`]): every app in the route table is fetched from the broker
//!    ([`broker`]) and compared ([`diff`]); differences are logged and counted in
//!    `router_reconcile_differences_total{kind}`. Events keep flowing meanwhile.
//! 2. **fix** (when `reconcile.apply`, or asked for with `?apply=true`): the event
//!    source is stopped, so nothing else writes the state; apps that an event changed
//!    since step 1 are left for the next run (the broker's answer may be older than
//!    that event); for the others the differences are computed again against the
//!    saved state and the events that remove them are applied through the consumer's
//!    apply path, saved and published, like events from the broker; then the source
//!    starts again. See `startup` for that part.
//!
//! Step 1 also walks the broker's listing (`GET domains`, then each domain's
//! `applications`) for apps the router has never heard of (every event of theirs
//! lost): at most `reconcile.discover_max` of them a run are fetched, and each is a
//! `missing_app` difference whose fix is the events that create its route.
//!
//! Runs every `reconcile.interval`, on `POST /reconcile` and on `router reconcile`.
//! Certificates are not compared (the API returns no keys).

pub mod broker;
pub mod diff;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use spi_consumer::AppKey;

use self::broker::{BrokerApp, Client, ListedApp};
use self::diff::{Difference, Ours};
use crate::metrics::Metrics;
use crate::table::{Route, RouteTable};

/// `reconcile:` settings.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileSettings {
    /// The broker's REST base, e.g. `https://broker.example.com/broker/rest`.
    pub url: String,
    /// Time between runs; 0 runs only on demand.
    #[serde(default = "default_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// Fix what differs (else report and count only; `?apply=true` per run).
    #[serde(default)]
    pub apply: bool,
    /// Per request to the broker.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// Requests to the broker at once.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Apps the router never heard of, fetched and added at most this many a run
    /// (0: the broker's listing is not walked).
    #[serde(default = "default_discover_max")]
    pub discover_max: usize,
    /// A file whose first line is an authorization token (`Bearer`).
    pub token_file: Option<PathBuf>,
    /// HTTP Basic credentials: a user and a file holding the password.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    /// CA bundle for an `https` URL (default: the system's).
    pub ca_file: Option<PathBuf>,
}

fn default_interval() -> Duration {
    Duration::from_secs(600)
}

fn default_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_concurrency() -> usize {
    4
}

fn default_discover_max() -> usize {
    1000
}

/// Apps read from the broker's listing in one run at most (each listing answer is
/// also capped at [`broker::MAX_BODY`]): a bound on the run's memory whatever the
/// broker says.
pub const MAX_LISTED: usize = 1_000_000;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("reconcile.url: {0}")]
    Url(String),
    #[error("reconcile.{field} {path}: {source}")]
    Secret {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reconcile.ca_file: {0}")]
    Tls(#[from] crate::tls::client::ClientTlsError),
}

impl ReconcileSettings {
    /// The broker client these settings describe (secrets read now).
    pub fn client(
        &self,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Client, ReconcileError> {
        let base: http::Uri = self
            .url
            .parse()
            .map_err(|e| ReconcileError::Url(format!("{e}")))?;
        match base.scheme_str() {
            Some("http") | Some("https") if base.host().is_some() => {}
            _ => return Err(ReconcileError::Url("an http:// or https:// URL".into())),
        }
        let first_line = |field, path: &PathBuf| {
            config_file::first_line(path)
                .map(|s| s.trim().to_string())
                .map_err(|source| ReconcileError::Secret {
                    field,
                    path: path.clone(),
                    source,
                })
        };
        let authorization = match (&self.token_file, &self.user, &self.password_file) {
            (Some(t), _, _) => Some(format!("Bearer {}", first_line("token_file", t)?)),
            (None, Some(user), Some(p)) => {
                use base64ct::Encoding;
                let pass = first_line("password_file", p)?;
                Some(format!(
                    "Basic {}",
                    base64ct::Base64::encode_string(format!("{user}:{pass}").as_bytes())
                ))
            }
            _ => None,
        }
        .map(|v| http::HeaderValue::try_from(v).map_err(|e| ReconcileError::Url(e.to_string())))
        .transpose()?;
        let tls = crate::tls::client::connector(self.ca_file.as_deref(), true, provider)?;
        Ok(Client {
            base,
            timeout: self.timeout,
            authorization,
            tls: Some(tls),
        })
    }
}

/// A run asked for (`POST /reconcile`, the timer); `apply` overrides
/// `reconcile.apply` for this run; the report goes to `reply`.
pub struct Job {
    pub apply: Option<bool>,
    pub reply: Option<tokio::sync::oneshot::Sender<Report>>,
}

/// What one run found (and did), for the log, `POST /reconcile` and the CLI.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// Apps of the route table compared.
    pub apps_checked: usize,
    /// Apps the broker listed (0 when discovery is off).
    pub apps_listed: usize,
    /// Per app (`name-namespace`), what differs.
    pub differences: BTreeMap<String, Vec<Difference>>,
    /// Apps the broker could not be asked about, with the reason.
    pub errors: BTreeMap<String, String>,
    /// Whether fixing was asked for.
    pub apply: bool,
    /// Events applied.
    pub applied: usize,
    /// Apps left for the next run because an event changed them meanwhile.
    pub deferred: Vec<String>,
}

/// One app step 1 asks the broker about: its key and names, and the route it was
/// compared with (none: an app the router never heard of).
pub struct Found {
    pub key: AppKey,
    pub app: ListedApp,
    pub route: Option<Arc<Route>>,
    pub theirs: Option<BrokerApp>,
}

/// Step 1's result: the report, and each app that differs, with the broker's answer
/// and the route it was compared with (to see later whether an event changed it).
pub struct Checked {
    pub report: Report,
    pub found: Vec<Found>,
}

/// Step 1: fetches every app of `table` from the broker, and up to `discover_max`
/// listed apps the table does not have, and compares.
pub async fn check(
    client: Arc<Client>,
    table: &RouteTable,
    concurrency: usize,
    discover_max: usize,
    metrics: &Metrics,
) -> Checked {
    let mut asked: Vec<Found> = table
        .routes()
        .map(|route| Found {
            key: route.app.clone(),
            app: ListedApp {
                name: route.name.to_string(),
                namespace: route.namespace.to_string(),
            },
            route: Some(route.clone()),
            theirs: None,
        })
        .collect();
    let mut report = Report {
        apps_checked: asked.len(),
        ..Report::default()
    };
    if discover_max > 0 {
        match client.list_apps(MAX_LISTED).await {
            Ok(listed) => {
                report.apps_listed = listed.len();
                asked.extend(unknown(table, listed).take(discover_max));
            }
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: cannot list the broker's apps");
                report.errors.insert("discovery".into(), e.to_string());
            }
        }
    }
    let found = compare(client, asked, concurrency, metrics, &mut report).await;
    let result = if report.errors.is_empty() {
        "ok"
    } else {
        "error"
    };
    metrics.reconcile_runs.with_label_values(&[result]).inc();
    Checked { report, found }
}

/// The listed apps that `table` has no route for.
fn unknown(table: &RouteTable, listed: Vec<ListedApp>) -> impl Iterator<Item = Found> + '_ {
    listed.into_iter().filter_map(|app| {
        let key = AppKey::of(&spi_consumer::decode::AppId {
            name: app.name.clone(),
            namespace: app.namespace.clone(),
        });
        table.app(&key).is_none().then_some(Found {
            key,
            app,
            route: None,
            theirs: None,
        })
    })
}

/// Asks the broker about each app (`concurrency` at once) and keeps those that
/// differ, with what differs in `report`.
async fn compare(
    client: Arc<Client>,
    asked: Vec<Found>,
    concurrency: usize,
    metrics: &Metrics,
    report: &mut Report,
) -> Vec<Found> {
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for found in asked {
        let (client, slots) = (client.clone(), slots.clone());
        tasks.spawn(async move {
            let _slot = slots.acquire_owned().await;
            let got = client.app(&found.app.name, &found.app.namespace).await;
            (found, got)
        });
    }
    let mut differing = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let Ok((mut found, got)) = done else { continue };
        let name = found.key.to_string();
        match got {
            Err(e) => {
                tracing::warn!(app = %name, error = %e, "reconcile: cannot ask the broker");
                report.errors.insert(name, e.to_string());
            }
            Ok(theirs) => {
                let d = match &found.route {
                    Some(route) => diff::diff(&Ours::of_route(route), theirs.as_ref()),
                    None => diff::unknown(theirs.as_ref()),
                };
                if !d.is_empty() {
                    for x in &d {
                        metrics
                            .reconcile_differences
                            .with_label_values(&[x.kind])
                            .inc();
                        tracing::warn!(app = %name, kind = x.kind, what = %x.what, "reconcile: the broker differs");
                    }
                    report.differences.insert(name, d);
                    found.theirs = theirs;
                    differing.push(found);
                }
            }
        }
    }
    differing
}
