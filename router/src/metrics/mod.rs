//! The router's Prometheus metrics.
//!
//! Label sets are bounded by design: status classes, error kinds and listener names
//! are fixed lists; nothing is labelled by host, so 100k routes cost no series. Two
//! families are labelled by what they describe and shrink with it:
//! `router_backend_up{backend}` (one series per live member) and
//! `router_tls_certificate_expiry_timestamp_seconds{alias}` (one per certificate).
//!
//! Traffic per app is the one family labelled by app, with a bound on how many
//! apps it exports (see [`apps`]).
//!
//! This module imports nothing from the rest of the crate: every other module
//! reports into it. Counters used on every request are resolved once here, not looked up by
//! label per request.

pub mod apps;
mod tls;

pub use tls::{TLS_GROUPS, TlsMetrics};

use std::sync::Arc;

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
// The `prometheus` crate's own registration macros: one statement a family.
use prometheus::{
    register_histogram_with_registry as histogram,
    register_int_counter_vec_with_registry as counters,
    register_int_counter_with_registry as counter, register_int_gauge_vec_with_registry as gauges,
    register_int_gauge_with_registry as gauge,
};

/// What went wrong talking to a member; the `kind` label of
/// `router_upstream_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamError {
    /// TCP connect refused or failed.
    Connect,
    /// TCP connect did not finish in `upstream.connect_timeout`.
    ConnectTimeout,
    /// No response headers within `upstream.response_timeout`.
    ResponseTimeout,
    /// The connection was reset or closed before a complete response.
    Reset,
    /// The member answered with something that is not HTTP.
    Protocol,
    /// The TLS handshake with a member failed (or its certificate was refused).
    Tls,
    /// The member had no free slot within `upstream.queue_timeout`.
    Busy,
    /// The client's address held its share of the member's slots already
    /// (`upstream.source_share`) for the queue timeout: 503, never counted
    /// against the member.
    SourceShare,
    /// The router itself ran out of file descriptors (or memory) connecting: 503,
    /// never counted against the member.
    LocalResources,
    /// The client's request body failed while it was being sent on (an aborted
    /// upload, a malformed chunk): the client's fault, never counted against the
    /// member; answered 400 if the client still listens.
    ClientBody,
    /// The client sent its request body too slowly: the part read before a member
    /// is involved took longer than `limits.header_read_timeout`, or the rest
    /// stalled for `limits.body_timeout` (408, never counted against the member).
    ClientTimeout,
    /// The client's request body went past its app's `max_request_body_bytes`
    /// (a body of no declared length, cut there): 413 if the client still
    /// listens, never counted against the member.
    ClientBodyTooLarge,
}

impl UpstreamError {
    pub const ALL: [UpstreamError; 12] = [
        UpstreamError::Connect,
        UpstreamError::ConnectTimeout,
        UpstreamError::ResponseTimeout,
        UpstreamError::Reset,
        UpstreamError::Protocol,
        UpstreamError::Tls,
        UpstreamError::Busy,
        UpstreamError::SourceShare,
        UpstreamError::ClientBody,
        UpstreamError::ClientTimeout,
        UpstreamError::ClientBodyTooLarge,
        UpstreamError::LocalResources,
    ];

    /// Counts towards the member's passive ejection: it could not be reached or
    /// broke the connection. Timeouts waiting for a response, protocol errors, a
    /// full member and the client's own failures do not.
    pub fn members_fault(self) -> bool {
        matches!(
            self,
            UpstreamError::Connect | UpstreamError::ConnectTimeout | UpstreamError::Reset
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamError::Connect => "connect",
            UpstreamError::ConnectTimeout => "connect_timeout",
            UpstreamError::ResponseTimeout => "response_timeout",
            UpstreamError::Reset => "reset",
            UpstreamError::Protocol => "protocol",
            UpstreamError::Tls => "tls",
            UpstreamError::Busy => "busy",
            UpstreamError::SourceShare => "source_share",
            UpstreamError::ClientBody => "client_body",
            UpstreamError::ClientTimeout => "client_timeout",
            UpstreamError::ClientBodyTooLarge => "client_body_too_large",
            UpstreamError::LocalResources => "local_resources",
        }
    }
}

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// `router_http_requests_total{class}`, indexed by status / 100 - 1.
    by_class: [IntCounter; 5],
    pub duration: Histogram,
    upstream_errors: Vec<IntCounter>,
    pub retries: IntCounter,
    pub upstream_connections: IntCounter,
    pub open_connections: IntGaugeVec,
    /// `router_worker_connections{worker}`: client connections open on each
    /// per-core worker (none without workers; see `router::workers`).
    pub worker_connections: IntGaugeVec,
    pub connections: IntCounterVec,
    /// `router_connections_evicted_total{listener}`: quiet connections closed to
    /// make room when every slot was taken.
    pub evicted: IntCounterVec,
    pub routes: IntGauge,
    pub apps: IntGauge,
    pub table_updates: IntCounter,
    /// Publishes that copied the whole table's names and apps: the first after
    /// start, and those whose spare copy a reader still held (see `table::maps`).
    pub table_copies: IntCounter,
    pub health: HealthMetrics,
    pub tls: TlsMetrics,
    /// Requests that waited for a slot on a full member.
    pub queue_waits: IntCounter,
    /// `router_tls_passthrough_total{result}`: relayed, no_member, member_failed.
    pub passthrough: IntCounterVec,
    /// `router_tcp_connections_total{listener, result}` (`tcp.listen` ports).
    pub tcp: IntCounterVec,
    /// `router_config_reloads_total{result}`: ok, error (SIGHUP).
    pub reloads: IntCounterVec,
    /// `router_reconcile_runs_total{result}`: ok, error (the broker's answer).
    pub reconcile_runs: IntCounterVec,
    /// `router_reconcile_differences_total{kind}`: what reconcile found between the
    /// saved state and the broker (missing_app, stale_app, missing_member,
    /// stale_member, missing_alias, stale_alias), fixed or not.
    pub reconcile_differences: IntCounterVec,
    /// `router_admin_refused_total{reason}`: admin calls refused (host, origin,
    /// token).
    pub admin_refused: IntCounterVec,
    /// `router_accept_errors_total{listener}`: `accept(2)` failures, every listener
    /// (see `nofile::accept_pause` for what each means).
    pub accept_errors: IntCounterVec,
    /// `router_connections_refused_total{listener, reason}`: client connections
    /// closed at accept (`source_limit`: the address held its share).
    pub refused: IntCounterVec,
    /// `router_app_requests_refused_total{app, reason}`: requests an app's policy
    /// refused; `app` is the app's name for apps with settings of their own,
    /// `_default` for the rest (bounded by what operators configure).
    pub app_refused: IntCounterVec,
    /// `router_affinity_total{result}`: requests of apps with cookie affinity: kept
    /// on the cookie's member, moved (its member was not eligible), new (no cookie).
    affinity: [IntCounter; 3],
    /// `router_http_requests_by_protocol_total{protocol}`: requests begun, by the
    /// client's protocol (`http/1`, `h2`, `h3`).
    by_protocol: [IntCounter; 3],
    /// `router_http3_handshakes_total{result}`: QUIC connections offered to the
    /// HTTP/3 listener, by what became of them (see `router::quic`).
    pub http3: IntCounterVec,
    /// `router_app_limit_untracked_total`: clients let through without a rate
    /// bucket because the table of buckets was full (see `policy::clients`).
    pub app_untracked: IntCounter,
    /// `router_app_*{app}`: traffic per app, a bounded number of apps exported
    /// (see [`apps`]).
    pub app_traffic: Arc<apps::AppsTraffic>,
    /// The consumer's own metrics, in the same registry.
    pub spi: spi_consumer::metrics::Metrics,
}

/// What affinity did for one request (`router_affinity_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AffinityResult {
    Kept = 0,
    Moved = 1,
    New = 2,
}

/// Creates the series of `values` at zero, so that alerts on them work from the
/// start (a missing series is not a zero to Prometheus).
fn zeroed(family: &IntCounterVec, values: &[&str]) {
    for v in values {
        family.with_label_values(&[v]);
    }
}

/// What every request counts: by status class, by protocol, its duration,
/// its failed exchanges with members, its affinity.
struct RequestMetrics {
    by_class: [IntCounter; 5],
    by_protocol: [IntCounter; 3],
    http3: IntCounterVec,
    duration: Histogram,
    upstream_errors: Vec<IntCounter>,
    affinity: [IntCounter; 3],
}

impl RequestMetrics {
    fn new(r: &Registry) -> prometheus::Result<RequestMetrics> {
        let requests = counters!(
            "router_http_requests_total",
            "Requests answered, by status class",
            &["class"],
            r
        )?;
        let errors = counters!(
            "router_upstream_errors_total",
            "Failed exchanges with members, by kind",
            &["kind"],
            r
        )?;
        let affinity = counters!(
            "router_affinity_total",
            "Requests of apps with cookie affinity, by result (kept: on the cookie's member; moved: that member was not eligible; new: no valid cookie)",
            &["result"],
            r
        )?;
        let by_protocol = counters!(
            "router_http_requests_by_protocol_total",
            "Requests begun, by the client's protocol (http/1, h2, h3)",
            &["protocol"],
            r
        )?;
        let http3 = counters!(
            "router_http3_handshakes_total",
            "QUIC connections offered to the HTTP/3 listener, by result (ok, failed, timeout, retry: asked to prove its address first, refused: a connection or source limit)",
            &["result"],
            r
        )?;
        zeroed(&http3, &["ok", "failed", "timeout", "retry", "refused"]);
        Ok(RequestMetrics {
            by_class: ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|c| requests.with_label_values(&[c])),
            by_protocol: ["http/1", "h2", "h3"].map(|p| by_protocol.with_label_values(&[p])),
            http3,
            duration: histogram!(
                "router_http_request_duration_seconds",
                "From request head received to response body sent",
                buckets(60.0),
                r
            )?,
            upstream_errors: UpstreamError::ALL
                .iter()
                .map(|k| errors.with_label_values(&[k.as_str()]))
                .collect(),
            affinity: ["kept", "moved", "new"].map(|v| affinity.with_label_values(&[v])),
        })
    }
}

/// `router_open_connections{listener}` and `router_worker_connections{worker}`.
fn open_gauges(r: &Registry) -> prometheus::Result<[IntGaugeVec; 2]> {
    Ok([
        gauges!(
            "router_open_connections",
            "Client connections open, by listener",
            &["listener"],
            r
        )?,
        gauges!(
            "router_worker_connections",
            "Client connections open on each worker thread (per-core runtimes)",
            &["worker"],
            r
        )?,
    ])
}

/// The operations' counters, each series at zero from the start: reloads,
/// reconcile runs and differences, passthrough results, refused admin calls.
fn operations(r: &Registry) -> prometheus::Result<[IntCounterVec; 5]> {
    let reloads = counters!(
        "router_config_reloads_total",
        "Configuration reloads (SIGHUP), by result (ok, error: the old configuration stays)",
        &["result"],
        r
    )?;
    let reconcile_runs = counters!(
        "router_reconcile_runs_total",
        "Comparisons of the saved state with the broker's REST API, by result (ok, error)",
        &["result"],
        r
    )?;
    let reconcile_differences = counters!(
        "router_reconcile_differences_total",
        "Differences reconcile found between the saved state and the broker, by kind",
        &["kind"],
        r
    )?;
    let passthrough = counters!(
        "router_tls_passthrough_total",
        "TLS connections for passthrough apps, by result (relayed, no_member, member_failed)",
        &["result"],
        r
    )?;
    let admin_refused = counters!(
        "router_admin_refused_total",
        "Admin calls refused, by reason (host: not a name of the listener, origin: a cross-site call, token: no valid token)",
        &["reason"],
        r
    )?;
    zeroed(&reloads, &["ok", "error"]);
    zeroed(&reconcile_runs, &["ok", "error"]);
    zeroed(
        &reconcile_differences,
        &[
            "missing_member",
            "stale_member",
            "changed_member",
            "missing_alias",
            "stale_alias",
            "stale_app",
        ],
    );
    zeroed(&passthrough, &["relayed", "no_member", "member_failed"]);
    zeroed(&admin_refused, &["host", "origin", "token"]);
    Ok([
        reloads,
        reconcile_runs,
        reconcile_differences,
        passthrough,
        admin_refused,
    ])
}

/// The listeners' counters, by listener: connections accepted, evicted,
/// accept errors, refused at accept, and `tcp.listen` results.
fn listener_counters(r: &Registry) -> prometheus::Result<[IntCounterVec; 5]> {
    let connections = counters!(
        "router_connections_total",
        "Client connections accepted, by listener",
        &["listener"],
        r
    )?;
    let evicted = counters!(
        "router_connections_evicted_total",
        "Quiet client connections closed to make room at limits.max_connections",
        &["listener"],
        r
    )?;
    let accept_errors = counters!(
        "router_accept_errors_total",
        "accept(2) failures by listener (out of descriptors pauses the listener 100 ms)",
        &["listener"],
        r
    )?;
    let refused = counters!(
        "router_connections_refused_total",
        "Client connections closed at accept, by listener and reason (source_limit: the client address held limits.max_connections_per_source; proxy_header: a trusted load balancer's connection without a valid PROXY header, or its client over the source limit)",
        &["listener", "reason"],
        r
    )?;
    let tcp = counters!(
        "router_tcp_connections_total",
        "Connections on tcp.listen ports, by listener and result (relayed, no_member, member_failed)",
        &["listener", "result"],
        r
    )?;
    Ok([connections, evicted, accept_errors, refused, tcp])
}

/// The member side's counters: retries, connections opened, waits for a slot.
fn upstream_counters(r: &Registry) -> prometheus::Result<[IntCounter; 3]> {
    let retries = counter!(
        "router_upstream_retries_total",
        "Idempotent requests sent again: on another member when nothing reached the first, or on a new connection when a reused one closed before a response",
        r
    )?;
    let upstream_connections = counter!(
        "router_upstream_connections_opened_total",
        "Connections opened to members (compare with requests for the reuse ratio)",
        r
    )?;
    let queue_waits = counter!(
        "router_upstream_queue_waits_total",
        "Requests that waited for a free slot on a full member (the ones that waited in vain are router_upstream_errors_total{kind=\"busy\"})",
        r
    )?;
    Ok([retries, upstream_connections, queue_waits])
}

/// The live route table's size, and how often it was published (and from a
/// whole copy: see `table::maps`).
fn table_metrics(r: &Registry) -> prometheus::Result<([IntGauge; 2], [IntCounter; 2])> {
    let routes = gauge!("router_routes", "Host names in the live route table", r)?;
    let apps = gauge!("router_apps", "Applications in the live route table", r)?;
    let updates = counter!("router_table_updates_total", "Route tables published", r)?;
    let copies = counter!(
        "router_table_copies_total",
        "Route tables published from a whole copy of the live table's names and apps (the first after start, or the spare copy was still held)",
        r
    )?;
    Ok(([routes, apps], [updates, copies]))
}

/// The app policies' series: refusals by app and reason, and clients let
/// through a rate limit untracked.
fn policy_metrics(r: &Registry) -> prometheus::Result<(IntCounterVec, IntCounter)> {
    let app_refused = counters!(
        "router_app_requests_refused_total",
        "Requests an app's policy refused, by app (_default: apps without settings of their own) and reason (address, maintenance, rate_limit, max_connections_per_client)",
        &["app", "reason"],
        r
    )?;
    let app_untracked = counter!(
        "router_app_limit_untracked_total",
        "Clients let through a rate limit untracked because the table of per-client buckets was full",
        r
    )?;
    Ok((app_refused, app_untracked))
}

/// Latency buckets from 0.5 ms to `up_to` seconds.
fn buckets(up_to: f64) -> Vec<f64> {
    [
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0,
    ]
    .into_iter()
    .filter(|b| *b <= up_to)
    .collect()
}

impl Metrics {
    pub fn new() -> prometheus::Result<Metrics> {
        let r = Registry::new();
        let [
            reloads,
            reconcile_runs,
            reconcile_differences,
            passthrough,
            admin_refused,
        ] = operations(&r)?;
        let [connections, evicted, accept_errors, refused, tcp] = listener_counters(&r)?;
        let [retries, upstream_connections, queue_waits] = upstream_counters(&r)?;
        let (app_refused, app_untracked) = policy_metrics(&r)?;
        let ([routes, apps], [table_updates, table_copies]) = table_metrics(&r)?;
        let RequestMetrics {
            by_class,
            by_protocol,
            http3,
            duration,
            upstream_errors,
            affinity,
        } = RequestMetrics::new(&r)?;
        let [open_connections, worker_connections] = open_gauges(&r)?;
        let app_traffic = Arc::new(apps::AppsTraffic::new()?);
        r.register(Box::new(apps::Export(app_traffic.clone())))?;
        Ok(Metrics {
            app_traffic,
            by_protocol,
            http3,
            by_class,
            duration,
            upstream_errors,
            retries,
            upstream_connections,
            queue_waits,
            open_connections,
            worker_connections,
            connections,
            evicted,
            accept_errors,
            refused,
            tcp,
            routes,
            apps,
            table_updates,
            table_copies,
            health: HealthMetrics::new(&r)?,
            tls: TlsMetrics::new(&r)?,
            spi: spi_consumer::metrics::Metrics::new(&r)?,
            app_refused,
            affinity,
            app_untracked,
            passthrough,
            reloads,
            reconcile_runs,
            reconcile_differences,
            admin_refused,
            registry: r,
        })
    }

    pub fn request(&self, status: u16) {
        let i = usize::from(status / 100).clamp(1, 5) - 1;
        self.by_class[i].inc();
    }

    /// Counts a request by its client's protocol.
    pub fn protocol(&self, version: http::Version) {
        let i = match version {
            http::Version::HTTP_2 => 1,
            http::Version::HTTP_3 => 2,
            _ => 0,
        };
        self.by_protocol[i].inc();
    }

    pub fn affinity(&self, result: AffinityResult) {
        self.affinity[result as usize].inc();
    }

    pub fn admin_refused(&self, reason: &str) {
        self.admin_refused.with_label_values(&[reason]).inc();
    }

    pub fn upstream_error(&self, kind: UpstreamError) {
        if let Some(c) = UpstreamError::ALL
            .iter()
            .position(|k| *k == kind)
            .and_then(|i| self.upstream_errors.get(i))
        {
            c.inc();
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        prometheus::TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .unwrap_or_else(|e| format!("# error encoding metrics: {e}\n"))
    }
}

impl std::fmt::Debug for HealthMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HealthMetrics")
    }
}

/// Member health: `router_backend_up` is labelled by member address, so its series
/// count is the member count (a series is removed when its member leaves every
/// table); the rest have fixed labels.
#[derive(Clone)]
pub struct HealthMetrics {
    up: IntGaugeVec,
    /// `router_health_checks_total{result}`: pass, fail, skipped (the router could
    /// not make the check: no file descriptor left).
    checks: [IntCounter; 3],
    check_duration: Histogram,
    ejections: IntCounterVec,
    pub recoveries: IntCounter,
}

impl HealthMetrics {
    fn new(r: &Registry) -> prometheus::Result<HealthMetrics> {
        let checks = counters!(
            "router_health_checks_total",
            "Active checks, by result",
            &["result"],
            r
        )?;
        Ok(HealthMetrics {
            up: gauges!(
                "router_backend_up",
                "1 if the member takes new requests by health, 0 if down or not checked yet",
                &["backend"],
                r
            )?,
            checks: ["pass", "fail", "skipped"].map(|v| checks.with_label_values(&[v])),
            check_duration: histogram!(
                "router_health_check_duration_seconds",
                "Time an active check took (failures included)",
                buckets(5.0),
                r
            )?,
            ejections: counters!(
                "router_backend_ejections_total",
                "Members taken out of service, by what noticed (check, passive)",
                &["reason"],
                r
            )?,
            recoveries: counter!(
                "router_backend_recoveries_total",
                "Down members that passed their checks and came back",
                r
            )?,
        })
    }

    /// Unregistered metrics, for unit tests.
    #[cfg(test)]
    pub(crate) fn detached() -> HealthMetrics {
        HealthMetrics::new(&Registry::new()).unwrap_or_else(|_| unreachable!("fixed names"))
    }

    /// One active check: how long it took and whether it passed.
    pub fn observe(&self, took: std::time::Duration, passed: bool) {
        self.check_duration.observe(took.as_secs_f64());
        self.checks[usize::from(!passed)].inc();
    }

    /// A check the router could not make (counted, never a verdict).
    pub fn skipped(&self) {
        self.checks[2].inc();
    }

    pub fn set_up(&self, member: &str, up: bool) {
        self.up.with_label_values(&[member]).set(i64::from(up));
    }

    pub fn ejected(&self, reason: &str) {
        self.ejections.with_label_values(&[reason]).inc();
    }

    /// Drops the series of a member that left every table.
    pub fn forget(&self, member: &str) {
        let _ = self.up.remove_label_values(&[member]);
    }
}
