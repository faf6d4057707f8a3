//! The router's Prometheus metrics.
//!
//! Label sets are bounded by design: status classes, error kinds and listener names
//! are fixed lists; nothing is labelled by host or member, so 100k routes cost no
//! series. Counters used on every request are resolved once here, not looked up by
//! label per request.

use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
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
    /// The member expects TLS, which this router does not speak to members yet.
    TlsUnsupported,
    /// The member had no free slot within `upstream.queue_timeout`.
    Busy,
}

impl UpstreamError {
    pub const ALL: [UpstreamError; 7] = [
        UpstreamError::Connect,
        UpstreamError::ConnectTimeout,
        UpstreamError::ResponseTimeout,
        UpstreamError::Reset,
        UpstreamError::Protocol,
        UpstreamError::TlsUnsupported,
        UpstreamError::Busy,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            UpstreamError::Connect => "connect",
            UpstreamError::ConnectTimeout => "connect_timeout",
            UpstreamError::ResponseTimeout => "response_timeout",
            UpstreamError::Reset => "reset",
            UpstreamError::Protocol => "protocol",
            UpstreamError::TlsUnsupported => "tls_unsupported",
            UpstreamError::Busy => "busy",
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
    pub connections: IntCounterVec,
    pub routes: IntGauge,
    pub apps: IntGauge,
    pub table_updates: IntCounter,
    /// The consumer's own metrics, in the same registry.
    pub spi: spi_consumer::metrics::Metrics,
}

impl Metrics {
    pub fn new() -> prometheus::Result<Metrics> {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "router_http_requests_total",
                "Requests answered, by status class",
            ),
            &["class"],
        )?;
        let by_class =
            ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|c| requests.with_label_values(&[c]));
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "router_http_request_duration_seconds",
                "From request head received to response body sent",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0,
            ]),
        )?;
        let errors = IntCounterVec::new(
            Opts::new(
                "router_upstream_errors_total",
                "Failed exchanges with members, by kind",
            ),
            &["kind"],
        )?;
        let upstream_errors = UpstreamError::ALL
            .iter()
            .map(|k| errors.with_label_values(&[k.as_str()]))
            .collect();
        let retries = IntCounter::new(
            "router_upstream_retries_total",
            "Idempotent requests sent again after the connection closed before a response",
        )?;
        let upstream_connections = IntCounter::new(
            "router_upstream_connections_opened_total",
            "Connections opened to members (compare with requests for the reuse ratio)",
        )?;
        let open_connections = IntGaugeVec::new(
            Opts::new(
                "router_open_connections",
                "Client connections open, by listener",
            ),
            &["listener"],
        )?;
        let connections = IntCounterVec::new(
            Opts::new(
                "router_connections_total",
                "Client connections accepted, by listener",
            ),
            &["listener"],
        )?;
        let routes = IntGauge::new("router_routes", "Host names in the live route table")?;
        let apps = IntGauge::new("router_apps", "Applications in the live route table")?;
        let table_updates =
            IntCounter::new("router_table_updates_total", "Route tables published")?;
        registry.register(Box::new(requests))?;
        registry.register(Box::new(duration.clone()))?;
        registry.register(Box::new(errors))?;
        registry.register(Box::new(retries.clone()))?;
        registry.register(Box::new(upstream_connections.clone()))?;
        registry.register(Box::new(open_connections.clone()))?;
        registry.register(Box::new(connections.clone()))?;
        registry.register(Box::new(routes.clone()))?;
        registry.register(Box::new(apps.clone()))?;
        registry.register(Box::new(table_updates.clone()))?;
        let spi = spi_consumer::metrics::Metrics::new(&registry)?;
        Ok(Metrics {
            registry,
            by_class,
            duration,
            upstream_errors,
            retries,
            upstream_connections,
            open_connections,
            connections,
            routes,
            apps,
            table_updates,
            spi,
        })
    }

    pub fn request(&self, status: u16) {
        let i = usize::from(status / 100).clamp(1, 5) - 1;
        self.by_class[i].inc();
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
