//! Traffic per app, with a bound on what is exported.
//!
//! Every app in the table has an [`AppTraffic`]: a few counters the request path
//! adds to when a response is done (requests by status class, a response-time
//! histogram, bytes each way, upstream errors), found on its route, so a request
//! costs atomic adds and no label lookup. What the exposition shows is bounded:
//! at most `metrics.max_apps` apps have series of their own (label `app`, the
//! `name-namespace` the admin API uses), chosen by recent traffic (requests of
//! about the last minute); the rest, and requests that reached no app (404,
//! 400), are summed into `app="_other"`. Free places go to the busiest waiting
//! apps; with none free, a waiting app [`SWAP_FACTOR`] times busier than an
//! exported one takes its place once that one held it for [`MIN_HOLD`], so a
//! newly busy app is seen within a minute or two and series do not churn.
//!
//! So totals always add up: at any scrape, the sum over every `app` value equals
//! `router_http_requests_total` (and each other family its global figure), and
//! every series only grows:
//! - an app given a place starts its series at zero (its earlier requests stay
//!   counted in `_other`);
//! - an app that gives its place back (no request for `metrics.app_idle`) or
//!   leaves the table takes its series away, and what they counted moves into
//!   `_other`, which only grows by it.
//!
//! Why a bound: at 100 000 apps one series per app and family would be millions
//! of series per router; OpenShift's HAProxy router stops exporting per-server
//! series past a threshold for the same reason. Why a histogram with five buckets
//! and not sum and count alone: a per-app p99 (and an alert on it) needs buckets,
//! and `histogram_quantile` over them aggregates across both routers of a pair;
//! five keep an app at 14 series.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Bucket, Counter, Histogram, LabelPair, Metric, MetricFamily, MetricType};

/// Upper bounds of the response-time buckets, in seconds (and `+Inf`).
pub const BUCKETS: [f64; 5] = [0.005, 0.025, 0.1, 0.5, 2.5];

/// The label value of everything without a series of its own.
pub const OTHER: &str = "_other";

/// One app's counters, since it entered the table. Added to by the request
/// path, read by the exposition, the admin API and the status page.
#[derive(Debug, Default)]
pub struct AppTraffic {
    /// Requests answered, by status class (1xx..5xx).
    classes: [AtomicU64; 5],
    /// Response times: one count per bucket of [`BUCKETS`] and one past them
    /// (not cumulative), and their sum in microseconds.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    duration_us: AtomicU64,
    /// Request body bytes received from clients, response bytes sent to them.
    received: AtomicU64,
    sent: AtomicU64,
    /// Requests that failed at a member (`router_upstream_errors_total`'s kinds).
    upstream_errors: AtomicU64,
}

/// A copy of an [`AppTraffic`] (or a sum of them) at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Totals {
    pub classes: [u64; 5],
    pub buckets: [u64; BUCKETS.len() + 1],
    pub duration_us: u64,
    pub received: u64,
    pub sent: u64,
    pub upstream_errors: u64,
}

impl AppTraffic {
    /// A response finished: its status, how long the request took, the bytes
    /// of its request body and of its response.
    pub fn record(&self, status: u16, elapsed: Duration, received: u64, sent: u64) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.classes[class].fetch_add(1, Ordering::Relaxed);
        let secs = elapsed.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.duration_us.fetch_add(us, Ordering::Relaxed);
        if received > 0 {
            self.received.fetch_add(received, Ordering::Relaxed);
        }
        self.sent.fetch_add(sent, Ordering::Relaxed);
    }

    /// A request of this app failed at a member.
    pub fn upstream_error(&self) {
        self.upstream_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn totals(&self) -> Totals {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Totals {
            classes: self.classes.each_ref().map(load),
            buckets: self.buckets.each_ref().map(load),
            duration_us: load(&self.duration_us),
            received: load(&self.received),
            sent: load(&self.sent),
            upstream_errors: load(&self.upstream_errors),
        }
    }
}

impl Totals {
    pub fn requests(&self) -> u64 {
        self.classes.iter().sum()
    }

    fn zip(self, other: Totals, f: impl Fn(u64, u64) -> u64) -> Totals {
        let mut out = self;
        for (o, (a, b)) in out
            .classes
            .iter_mut()
            .zip(self.classes.iter().zip(other.classes))
        {
            *o = f(*a, b);
        }
        for (o, (a, b)) in out
            .buckets
            .iter_mut()
            .zip(self.buckets.iter().zip(other.buckets))
        {
            *o = f(*a, b);
        }
        out.duration_us = f(self.duration_us, other.duration_us);
        out.received = f(self.received, other.received);
        out.sent = f(self.sent, other.sent);
        out.upstream_errors = f(self.upstream_errors, other.upstream_errors);
        out
    }

    pub fn plus(self, other: Totals) -> Totals {
        self.zip(other, u64::saturating_add)
    }

    /// What was added since `earlier` (a copy of the same counters).
    pub fn since(self, earlier: Totals) -> Totals {
        self.zip(earlier, u64::saturating_sub)
    }

    /// The response time below which `q` (0..1) of the requests were answered,
    /// in seconds, read off the buckets (linear within one; past the last bound,
    /// that bound). `None` without requests.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let count: u64 = self.buckets.iter().sum();
        if count == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * count as f64;
        let mut below = 0u64;
        let mut lower = 0.0;
        for (i, n) in self.buckets.iter().enumerate() {
            let Some(upper) = BUCKETS.get(i).copied() else {
                return Some(lower);
            };
            if (below + n) as f64 >= rank && *n > 0 {
                return Some(lower + (upper - lower) * (rank - below as f64) / *n as f64);
            }
            below += n;
            lower = upper;
        }
        Some(lower)
    }
}

/// The limits of the export (`metrics` in the configuration).
#[derive(Clone, Copy, Debug)]
pub struct ExportLimits {
    /// `metrics.max_apps`: apps with series of their own.
    pub max_apps: usize,
    /// `metrics.app_idle`: an app without a request for this long gives its
    /// place back.
    pub idle: Duration,
}

impl Default for ExportLimits {
    fn default() -> ExportLimits {
        ExportLimits {
            max_apps: 1000,
            idle: Duration::from_secs(600),
        }
    }
}

/// One app as the export sees it.
struct AppEntry {
    traffic: Arc<AppTraffic>,
    /// Its totals when it was given its place, and when; `None`: summed into
    /// `_other`.
    placed: Option<Box<(Totals, Instant)>>,
    /// Its request count at the last pass, and when that count last moved.
    requests: u64,
    moved: Instant,
    /// Its recent traffic, what places are given by: requests, each weighing
    /// less with age (a third after [`BUSY_TAU`]).
    busy: f64,
    /// Two copies of its totals a window apart, for the rates of the admin API:
    /// (taken at, totals), the older first. Only while the app has traffic.
    windows: Option<Box<Windows>>,
}

/// Every app's traffic, and which apps have series of their own.
#[derive(Default)]
struct State {
    /// foldhash: an event adds or looks up its app here (SipHash was 1.4 % of
    /// an event's CPU at 100 000 apps, `bench-events --replay --perf`).
    apps: HashMap<Arc<str>, AppEntry, foldhash::fast::RandomState>,
    /// What apps that left the table counted.
    gone: Totals,
    limits: ExportLimits,
    last_pass: Option<Instant>,
}

/// How long a recent-traffic figure takes to fall to a third: requests about
/// this long ago still count towards a place.
const BUSY_TAU: Duration = Duration::from_secs(60);

/// An exported app keeps its place at least this long before a busier one may
/// take it (series that come and go every pass would be useless).
const MIN_HOLD: Duration = Duration::from_secs(60);

/// A waiting app takes a place from an exported one only when it is this many
/// times busier.
const SWAP_FACTOR: f64 = 2.0;

impl State {
    /// Reads every app's counters: recent traffic, idleness (an idle app gives
    /// its place back), the admin API's windows. How many keep their places.
    fn update(&mut self, now: Instant, since: Duration) -> usize {
        let ExportLimits { max_apps, idle } = self.limits;
        let decay = (-since.as_secs_f64() / BUSY_TAU.as_secs_f64()).exp();
        let mut placed = 0;
        for e in self.apps.values_mut() {
            let totals = e.traffic.totals();
            let requests = totals.requests();
            let recent = requests - e.requests.min(requests);
            e.busy = e.busy * decay + recent as f64;
            // An app's first requests count from its entry into the table.
            let first = (e.requests == 0).then_some(e.moved);
            if requests != e.requests {
                e.requests = requests;
                e.moved = now;
            }
            let idle_for = now.saturating_duration_since(e.moved);
            if e.placed.is_some() && (idle_for >= idle || placed >= max_apps) {
                e.placed = None;
            }
            placed += usize::from(e.placed.is_some());
            step_windows(&mut e.windows, (now, totals), idle_for, first);
        }
        placed
    }

    /// Free places go to the busiest waiting apps.
    fn fill(&mut self, free: usize, now: Instant) {
        for key in self.busiest_waiting(free) {
            if let Some(e) = self.apps.get_mut(&key) {
                e.placed = Some(Box::new((e.traffic.totals(), now)));
            }
        }
    }

    /// With every place taken: the busiest waiting apps take the places of the
    /// least busy exported ones that held theirs for [`MIN_HOLD`], when
    /// [`SWAP_FACTOR`] times busier; a tenth of the places at most a pass.
    fn swap(&mut self, now: Instant) {
        let most = (self.limits.max_apps / 10).max(1);
        let waiting = self.busiest_waiting(most);
        if waiting.is_empty() {
            return;
        }
        let mut held: Vec<(f64, Arc<str>)> = self
            .apps
            .iter()
            .filter(|(_, e)| {
                e.placed
                    .as_deref()
                    .is_some_and(|(_, at)| now.saturating_duration_since(*at) >= MIN_HOLD)
            })
            .map(|(k, e)| (e.busy, k.clone()))
            .collect();
        held.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        for (key, (quiet_busy, quiet)) in waiting.into_iter().zip(held) {
            let busy = self.apps.get(&key).map_or(0.0, |e| e.busy);
            if busy <= SWAP_FACTOR * quiet_busy {
                break;
            }
            if let Some(e) = self.apps.get_mut(&quiet) {
                e.placed = None;
            }
            if let Some(e) = self.apps.get_mut(&key) {
                e.placed = Some(Box::new((e.traffic.totals(), now)));
            }
        }
    }

    /// Up to `n` apps without a place, busiest first (none without traffic).
    fn busiest_waiting(&self, n: usize) -> Vec<Arc<str>> {
        let mut waiting: Vec<(f64, &Arc<str>)> = self
            .apps
            .iter()
            .filter(|(_, e)| e.placed.is_none() && e.busy > 0.0)
            .map(|(k, e)| (e.busy, k))
            .collect();
        let by_busy = |a: &(f64, &Arc<str>), b: &(f64, &Arc<str>)| b.0.total_cmp(&a.0);
        if waiting.len() > n && n > 0 {
            waiting.select_nth_unstable_by(n - 1, by_busy);
            waiting.truncate(n);
        }
        waiting.sort_unstable_by(by_busy);
        waiting
            .into_iter()
            .take(n)
            .map(|(_, k)| k.clone())
            .collect()
    }
}

/// The per-app traffic of every app, and their export (a Prometheus collector
/// in the router's registry: see the module doc).
pub struct AppsTraffic {
    state: Mutex<State>,
    /// Requests that reached no app: always in `_other`.
    unrouted: Arc<AppTraffic>,
    descs: Vec<Desc>,
}

/// The window the admin API's rates cover (at least this, at most twice).
pub const WINDOW: Duration = Duration::from_secs(60);

/// How often places are given out at most (a scrape between passes reads the
/// last pass's places).
const PASS_EVERY: Duration = Duration::from_secs(1);

/// The families, by name and help.
const FAMILIES: [(&str, &str); 5] = [
    (
        "router_app_requests_total",
        "Requests answered per app, by status class (app=\"_other\": apps without series of their own and requests that reached no app)",
    ),
    (
        "router_app_request_duration_seconds",
        "Response time per app (head and body), few buckets",
    ),
    (
        "router_app_received_bytes_total",
        "Request body bytes received from clients per app",
    ),
    (
        "router_app_sent_bytes_total",
        "Response bytes sent to clients per app",
    ),
    (
        "router_app_upstream_errors_total",
        "Requests per app that failed at a member (see router_upstream_errors_total for kinds)",
    ),
];

/// What the admin API and the status page show of one app.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AppStats {
    /// Since the app entered the table.
    pub totals: Totals,
    /// Over the last window (one to two minutes): requests per second, the
    /// share of them answered 5xx, and response times (seconds) at p50 and p99
    /// read off the buckets. `None` without a request in the window.
    pub window_seconds: f64,
    pub requests_per_second: f64,
    pub error_ratio: Option<f64>,
    pub p50_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
    /// Whether the app has series of its own now.
    pub exported: bool,
}

impl AppsTraffic {
    pub fn new() -> prometheus::Result<AppsTraffic> {
        let descs = FAMILIES
            .iter()
            .map(|(name, help)| {
                let labels = if *name == "router_app_requests_total" {
                    vec!["app".to_string(), "class".to_string()]
                } else {
                    vec!["app".to_string()]
                };
                Desc::new(name.to_string(), help.to_string(), labels, HashMap::new())
            })
            .collect::<prometheus::Result<Vec<_>>>()?;
        Ok(AppsTraffic {
            state: Mutex::default(),
            unrouted: Arc::default(),
            descs,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the export's limits (at start and on reload).
    pub fn set_limits(&self, limits: ExportLimits) {
        self.state().limits = limits;
    }

    /// The counters of the app `app` (`name-namespace`), made when it enters
    /// the table; the same ones while it stays (a table update keeps them).
    pub fn of(&self, app: &str) -> Arc<AppTraffic> {
        let mut state = self.state();
        if let Some(e) = state.apps.get(app) {
            return e.traffic.clone();
        }
        let traffic = Arc::new(AppTraffic::default());
        state.apps.insert(
            Arc::from(app),
            AppEntry {
                traffic: traffic.clone(),
                placed: None,
                requests: 0,
                moved: Instant::now(),
                busy: 0.0,
                windows: None,
            },
        );
        traffic
    }

    /// The app left the table: its series go, what it counted moves to `_other`.
    pub fn remove(&self, app: &str) {
        let mut state = self.state();
        if let Some(e) = state.apps.remove(app) {
            state.gone = state.gone.plus(e.traffic.totals());
        }
    }

    /// Where requests that reached no app are counted.
    pub fn unrouted(&self) -> &Arc<AppTraffic> {
        &self.unrouted
    }

    /// Gives out places and moves the admin API's windows (see the module doc):
    /// called by the exposition and by a timer.
    pub fn pass(&self, now: Instant) {
        let mut state = self.state();
        let since = match state.last_pass {
            Some(t) if now.saturating_duration_since(t) < PASS_EVERY => return,
            Some(t) => now.saturating_duration_since(t),
            None => Duration::ZERO,
        };
        state.last_pass = Some(now);
        let placed = state.update(now, since);
        let free = state.limits.max_apps.saturating_sub(placed);
        if free > 0 {
            state.fill(free, now);
        } else {
            state.swap(now);
        }
    }

    /// One app's figures (see [`AppStats`]); `None`: no such app in the table.
    pub fn stats(&self, app: &str, now: Instant) -> Option<AppStats> {
        let state = self.state();
        let e = state.apps.get(app)?;
        let totals = e.traffic.totals();
        let (secs, window) = match e.windows.as_deref() {
            Some([(at, older), _]) => (
                now.saturating_duration_since(*at).as_secs_f64(),
                totals.since(*older),
            ),
            None => (0.0, Totals::default()),
        };
        let requests = window.requests();
        Some(AppStats {
            totals,
            window_seconds: secs,
            requests_per_second: if secs > 0.0 {
                requests as f64 / secs
            } else {
                0.0
            },
            error_ratio: (requests > 0).then(|| window.classes[4] as f64 / requests as f64),
            p50_seconds: window.quantile(0.5),
            p99_seconds: window.quantile(0.99),
            exported: e.placed.is_some(),
        })
    }

    /// How many apps have series of their own, and how many are summed into
    /// `_other`.
    pub fn placed(&self) -> (usize, usize) {
        let state = self.state();
        let placed = state.apps.values().filter(|e| e.placed.is_some()).count();
        (placed, state.apps.len() - placed)
    }

    /// Each exported app's series' values, and `_other`'s, as label and totals.
    fn exported(&self) -> Vec<(Arc<str>, Totals)> {
        let state = self.state();
        let mut other = state.gone.plus(self.unrouted.totals());
        let mut out = Vec::with_capacity(state.limits.max_apps.min(state.apps.len()) + 1);
        for (key, e) in &state.apps {
            let totals = e.traffic.totals();
            match e.placed.as_deref() {
                Some((base, _)) => {
                    other = other.plus(*base);
                    out.push((key.clone(), totals.since(*base)));
                }
                None => other = other.plus(totals),
            }
        }
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out.push((Arc::from(OTHER), other));
        out
    }
}

/// The admin API's two copies of an app's totals a window apart: a new copy
/// once the newer is a window old; none once the app has been idle for two
/// windows (its rates are zero, and 100 000 idle apps keep no copies). An app
/// with traffic again starts from now (`first`: it never had any before, and
/// entered the table then: it starts from zero at that moment).
fn step_windows(
    windows: &mut Option<Box<Windows>>,
    (now, totals): (Instant, Totals),
    idle_for: Duration,
    first: Option<Instant>,
) {
    match windows {
        None if idle_for < WINDOW => {
            let older = first.map_or((now, totals), |at| (at, Totals::default()));
            *windows = Some(Box::new([older, (now, totals)]));
        }
        None => {}
        Some(_) if idle_for >= 2 * WINDOW => *windows = None,
        Some(w) if now.saturating_duration_since(w[1].0) >= WINDOW => {
            **w = [w[1], (now, totals)];
        }
        Some(_) => {}
    }
}

/// Two copies of an app's totals a window apart, the older first (boxed in
/// an entry: only apps with traffic have them, and an entry stays small).
type Windows = [(Instant, Totals); 2];

/// The export of an [`AppsTraffic`] the request path shares: what the registry
/// holds.
pub struct Export(pub Arc<AppsTraffic>);

impl Collector for Export {
    fn desc(&self) -> Vec<&Desc> {
        self.0.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.families(Instant::now())
    }
}

impl AppsTraffic {
    /// The families as a scrape at `now` sees them.
    fn families(&self, now: Instant) -> Vec<MetricFamily> {
        self.pass(now);
        let rows = self.exported();
        let mut families: Vec<MetricFamily> = FAMILIES
            .iter()
            .map(|(name, help)| {
                let mut f = MetricFamily::default();
                f.set_name(name.to_string());
                f.set_help(help.to_string());
                f.set_field_type(if name.ends_with("_seconds") {
                    MetricType::HISTOGRAM
                } else {
                    MetricType::COUNTER
                });
                f
            })
            .collect();
        for (app, t) in &rows {
            for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
                families[0]
                    .mut_metric()
                    .push(counter(&[("app", app), ("class", class)], t.classes[i]));
            }
            families[1].mut_metric().push(histogram(app, t));
            families[2]
                .mut_metric()
                .push(counter(&[("app", app)], t.received));
            families[3]
                .mut_metric()
                .push(counter(&[("app", app)], t.sent));
            families[4]
                .mut_metric()
                .push(counter(&[("app", app)], t.upstream_errors));
        }
        families
    }
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(n, v)| {
            let mut l = LabelPair::default();
            l.set_name(n.to_string());
            l.set_value(v.to_string());
            l
        })
        .collect()
}

fn counter(pairs: &[(&str, &str)], value: u64) -> Metric {
    let mut c = Counter::default();
    c.set_value(value as f64);
    let mut m = Metric::from_label(labels(pairs));
    m.set_counter(c);
    m
}

fn histogram(app: &str, t: &Totals) -> Metric {
    let mut h = Histogram::default();
    let mut cumulative = 0;
    let buckets = BUCKETS
        .iter()
        .zip(t.buckets)
        .map(|(bound, n)| {
            cumulative += n;
            let mut b = Bucket::default();
            b.set_upper_bound(*bound);
            b.set_cumulative_count(cumulative);
            b
        })
        .collect();
    h.set_bucket(buckets);
    h.set_sample_count(t.buckets.iter().sum());
    h.set_sample_sum(t.duration_us as f64 / 1e6);
    let mut m = Metric::from_label(labels(&[("app", app)]));
    m.set_histogram(h);
    m
}

#[cfg(test)]
mod tests;
