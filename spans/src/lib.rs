//! Spans out over OTLP (`traces.*`, off by default): one server span per
//! sampled request, with the trace and span IDs of the `traceparent` the
//! member gets and the access log's `trace_id`, so that a collector (Jaeger,
//! Tempo, an OpenTelemetry collector) shows the router between the client's
//! spans and the app's.
//!
//! - **Sampling** is parent-based: a request whose valid `traceparent` says
//!   sampled is sampled, one that says not sampled is not; a request that
//!   starts its trace here is sampled at `traces.sample_ratio` (by its trace
//!   ID, as OpenTelemetry's `TraceIdRatioBased` does), and the member then
//!   sees the sampled flag set, so the app's spans join the trace.
//! - **One span a request, its moments as span events** (`routed`,
//!   `member connected`, `retry`, `response head`): each moment is one
//!   timestamp with nothing of its own to say, and as child spans they would
//!   triple the spans a collector stores and bills for the same information.
//! - **Never slows a request**: the request path only moves its finished
//!   record into a bounded queue (`traces.queue`) with `try_send`; a full
//!   queue drops the span and counts it. One exporter task batches the queue
//!   (`traces.batch` spans, or what came within `traces.interval`; woken by
//!   a batch's first span and by a full batch, not by each, see [`Queue`]),
//!   dates the batch by one reading of the wall clock ([`Clock`]), encodes
//!   OTLP protobuf ([`otlp`]) and POSTs it to `traces.endpoint`
//!   (OTLP/HTTP); a collector that is slow, down or refusing costs the
//!   batch, counted as dropped, never a request.
//! - A small exporter of ours, not the `opentelemetry` SDK: the SDK's span
//!   (attributes as `KeyValue`s in a `Vec`, its own span processor) costs
//!   about 3 900 instructions per span on the request's thread before any
//!   export (measured with callgrind, `bench/RESULTS.md`, "Issue 51: spans, compression, slow start, the hybrid
//!   key exchange"); here a
//!   sampled request fills one boxed record and the encoding runs on the
//!   exporter task.

pub mod export;
pub mod otlp;
pub mod wire;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus::{IntCounter, IntCounterVec, Registry};
use serde::Deserialize;

/// `traces:` in the configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TracesConfig {
    /// OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces`;
    /// unset: no spans.
    pub endpoint: Option<String>,
    /// The share of traces that start here which are sampled (0.0 to 1.0).
    pub sample_ratio: f64,
    /// The resource's `service.name`.
    pub service_name: String,
    /// Finished spans waiting for export at most; more are dropped (counted).
    pub queue: usize,
    /// Spans per export request at most.
    pub batch: usize,
    /// A partial batch waits at most this long.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// An export request that takes longer has failed (its spans dropped).
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Spans a second at most that a client's own sampled flag starts, from
    /// clients `forwarded.trusted` does not name (others: `sample_ratio`).
    pub client_sampled_per_second: u32,
    /// What `url.query` carries: `redact` (the values of the keys in
    /// `redacted_keys` replaced by `REDACTED`), `drop` (none), `keep`.
    pub query: QueryPolicy,
    /// The query keys whose values are redacted (any case).
    pub redacted_keys: Vec<String>,
    /// Bytes of a path, query or host a span keeps at most.
    pub max_attribute_length: usize,
}

/// `traces.query`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryPolicy {
    #[default]
    Redact,
    Drop,
    Keep,
}

/// `traces.redacted_keys`' default: OpenTelemetry's HTTP conventions' list
/// (`AWSAccessKeyId`, `Signature`, `sig`, `X-Goog-Signature`) and the keys
/// that carry credentials by custom.
pub fn default_redacted_keys() -> Vec<String> {
    [
        "AWSAccessKeyId",
        "Signature",
        "sig",
        "X-Goog-Signature",
        "token",
        "access_token",
        "id_token",
        "refresh_token",
        "api_key",
        "apikey",
        "key",
        "secret",
        "password",
        "passwd",
        "code",
        "session",
    ]
    .map(String::from)
    .to_vec()
}

impl Default for TracesConfig {
    fn default() -> TracesConfig {
        TracesConfig {
            endpoint: None,
            sample_ratio: 0.01,
            service_name: "router".into(),
            queue: 8192,
            batch: 512,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            client_sampled_per_second: 10,
            query: QueryPolicy::Redact,
            redacted_keys: default_redacted_keys(),
            max_attribute_length: 1024,
        }
    }
}

impl TracesConfig {
    /// Whether the settings can work: the field and the problem, if not.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(e) = &self.endpoint {
            export::Endpoint::parse(e).map_err(|why| ("traces.endpoint", why))?;
        }
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(("traces.sample_ratio", "from 0.0 to 1.0".into()));
        }
        if self.service_name.is_empty() {
            return Err(("traces.service_name", "must not be empty".into()));
        }
        if !(1..=1_000_000).contains(&self.queue) {
            return Err(("traces.queue", "from 1 to 1000000 spans".into()));
        }
        if !(64..=65_536).contains(&self.max_attribute_length) {
            return Err((
                "traces.max_attribute_length",
                "from 64 to 65536 bytes".into(),
            ));
        }
        if !(1..=self.queue).contains(&self.batch) {
            return Err(("traces.batch", "from 1 to traces.queue spans".into()));
        }
        for (field, d) in [
            ("traces.interval", self.interval),
            ("traces.timeout", self.timeout),
        ] {
            if d.is_zero() || d > Duration::from_secs(60) {
                return Err((field, "more than 0s, at most 60s".into()));
            }
        }
        Ok(())
    }
}

/// Which new traces are sampled: those whose trace ID's low 64 bits are
/// below the threshold (ratio × 2^64).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample(u64);

impl Sample {
    /// No span is exported: new traces start not sampled.
    pub const OFF: Sample = Sample(0);

    pub fn ratio(ratio: f64) -> Sample {
        if ratio >= 1.0 {
            Sample(u64::MAX)
        } else {
            // `as` saturates; the ratio was checked to be in [0, 1].
            Sample((ratio.max(0.0) * 18_446_744_073_709_551_616.0) as u64)
        }
    }

    /// Whether a new trace with these low 64 bits of its ID is sampled.
    #[inline]
    pub fn new_trace(self, low: u64) -> bool {
        self.0 == u64::MAX || low < self.0
    }
}

/// The exporter's side the request path holds: the queue, the sampler, the
/// counters.
pub struct Spans {
    queue: tokio::sync::mpsc::Sender<Box<SpanRecord>>,
    /// Told when a batch's worth waits in the queue: the exporter is not woken
    /// by each span (see [`Queue`]).
    full: Arc<tokio::sync::Notify>,
    batch: usize,
    pub sample: Sample,
    /// Spans a client's own sampled flag may still start (see
    /// [`Spans::believes`]).
    client_sampled: std::sync::Mutex<token_bucket::TokenBucket>,
    client_rate: token_bucket::Rate,
    query: QueryPolicy,
    redacted: Vec<String>,
    max_len: usize,
    metrics: TraceMetrics,
}

/// `router_trace_spans_*`.
#[derive(Clone)]
pub struct TraceMetrics {
    pub exported: IntCounter,
    dropped: IntCounterVec,
}

impl TraceMetrics {
    pub fn new(r: &Registry) -> prometheus::Result<TraceMetrics> {
        let exported = IntCounter::new(
            "router_trace_spans_exported_total",
            "Spans the OTLP collector accepted (traces.endpoint)",
        )?;
        let dropped = IntCounterVec::new(
            prometheus::Opts::new(
                "router_trace_spans_dropped_total",
                "Spans not exported: the queue was full (queue_full) or the collector failed, refused or timed out (export_failed)",
            ),
            &["reason"],
        )?;
        for reason in ["queue_full", "export_failed"] {
            dropped.with_label_values(&[reason]);
        }
        r.register(Box::new(exported.clone()))?;
        r.register(Box::new(dropped.clone()))?;
        Ok(TraceMetrics { exported, dropped })
    }

    pub fn dropped(&self, reason: &'static str, n: usize) {
        self.dropped.with_label_values(&[reason]).inc_by(n as u64);
    }
}

/// The exporter's end of the queue: the finished spans, and the word that a
/// batch's worth of them waits. The exporter waits for a span, then for the
/// rest of its batch until `traces.interval` or that word, and takes what
/// came without being woken by each (a wake-up a span, with its timer reset,
/// cost about 800 instructions a request: `bench/RESULTS.md`, "A span's
/// clock reads and wake-ups").
pub struct Queue {
    pub rx: tokio::sync::mpsc::Receiver<Box<SpanRecord>>,
    pub full: Arc<tokio::sync::Notify>,
}

impl Spans {
    /// The request path's handle and the exporter task's end of the queue.
    pub fn new(config: &TracesConfig, metrics: TraceMetrics) -> (Arc<Spans>, Queue) {
        let (queue, rx) = tokio::sync::mpsc::channel(config.queue);
        let full = Arc::new(tokio::sync::Notify::new());
        let client_rate = token_bucket::Rate {
            per_second: f64::from(config.client_sampled_per_second),
            burst: f64::from(config.client_sampled_per_second.max(1)),
        };
        let spans = Spans {
            queue,
            full: full.clone(),
            batch: config.batch.clamp(1, config.queue.max(1)),
            sample: Sample::ratio(config.sample_ratio),
            client_sampled: std::sync::Mutex::new(token_bucket::TokenBucket::full(
                &client_rate,
                Instant::now(),
            )),
            client_rate,
            query: config.query,
            redacted: config.redacted_keys.clone(),
            max_len: config.max_attribute_length,
            metrics,
        };
        (Arc::new(spans), Queue { rx, full })
    }

    /// Whether a sampled trace gets a span: one that started here (the
    /// ratio chose it) or that a proxy `forwarded.trusted` names continued
    /// always; one a client's own flag sampled, within
    /// `traces.client_sampled_per_second`, else as the ratio decides on its
    /// trace ID (a client cannot make every request cost an export).
    /// `trace_low`: the trace ID's low bits, read only for that last case.
    pub fn believes(
        &self,
        continued: bool,
        trusted_proxy: bool,
        trace_low: impl FnOnce() -> u64,
    ) -> bool {
        if !continued || trusted_proxy {
            return true;
        }
        let mut bucket = self
            .client_sampled
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        bucket.take(&self.client_rate, Instant::now()).is_ok() || self.sample.new_trace(trace_low())
    }

    /// A finished span to the exporter, or dropped and counted: never waits.
    fn push(&self, span: Box<SpanRecord>) {
        if self.queue.try_send(span).is_err() {
            self.metrics.dropped("queue_full", 1);
        } else if self.queue.max_capacity() - self.queue.capacity() >= self.batch {
            self.full.notify_one();
        }
    }
}

/// A moment of a request, a span event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moment {
    /// The route phase found the app.
    Routed,
    /// A connection to the member (pooled or new) and a slot on it.
    Connected,
    /// The first attempt failed and the request goes again.
    Retry,
    /// The response's head is final (the member's, or the router's own).
    ResponseHead,
}

impl Moment {
    pub fn name(self) -> &'static str {
        match self {
            Moment::Routed => "routed",
            Moment::Connected => "member connected",
            Moment::Retry => "retry",
            Moment::ResponseHead => "response head",
        }
    }
}

/// Events a span keeps at most (a request has one of each, and a retry).
const MOMENTS: usize = 6;

/// One sampled request's span, filled in by its phases and finished by its
/// completion. Boxed and only for sampled requests.
pub struct SpanRecord {
    spans: Arc<Spans>,
    /// The `traceparent` the member got: trace ID, this span's ID, flags.
    pub traceparent: [u8; 55],
    /// The client's span, when its `traceparent` was valid (16 hex digits).
    pub parent: Option<[u8; 16]>,
    /// The start on the wall clock: set by the exporter from its batch's
    /// reading of the clock (see [`Clock`]), not read a request.
    pub start_unix_nanos: u64,
    start: Instant,
    pub method: http::Method,
    pub host: String,
    pub path: String,
    pub version: http::Version,
    pub client: IpAddr,
    pub request_id: String,
    /// `name-namespace`, once routed.
    pub app: Option<String>,
    pub member: Option<Arc<str>>,
    /// Each moment and when, in nanoseconds after the start.
    pub moments: [(Moment, u64); MOMENTS],
    pub moment_count: u8,
    pub retries: u8,
    pub status: u16,
    pub bytes: u64,
    pub aborted: bool,
    pub end_nanos: u64,
}

/// What a span is made from: the request as it came.
pub struct Started<'a> {
    pub traceparent: &'a [u8],
    pub parent: Option<[u8; 16]>,
    pub start: Instant,
    pub method: &'a http::Method,
    pub host: Option<&'a http::HeaderValue>,
    pub uri: &'a http::Uri,
    pub version: http::Version,
    pub client: IpAddr,
    pub request_id: &'a str,
}

impl SpanRecord {
    pub fn start(spans: &Arc<Spans>, s: Started<'_>) -> Box<SpanRecord> {
        let mut traceparent = [0u8; 55];
        if let Some(tp) = s.traceparent.get(..55) {
            traceparent.copy_from_slice(tp);
        }
        Box::new(SpanRecord {
            spans: spans.clone(),
            traceparent,
            parent: s.parent,
            start_unix_nanos: 0,
            start: s.start,
            method: s.method.clone(),
            host: cut(
                s.host.and_then(|h| h.to_str().ok()).unwrap_or_default(),
                spans.max_len,
            )
            .to_owned(),
            path: spans.path_of(s.uri),
            version: s.version,
            client: s.client,
            request_id: s.request_id.to_owned(),
            app: None,
            member: None,
            moments: [(Moment::Routed, 0); MOMENTS],
            moment_count: 0,
            retries: 0,
            status: 0,
            bytes: 0,
            aborted: false,
            end_nanos: 0,
        })
    }

    fn nanos(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// `moment` happened now.
    pub fn mark(&mut self, moment: Moment) {
        if moment == Moment::Retry {
            self.retries = self.retries.saturating_add(1);
        }
        let at = self.nanos();
        if let Some(slot) = self.moments.get_mut(usize::from(self.moment_count)) {
            *slot = (moment, at);
            self.moment_count += 1;
        }
    }

    /// The response was done at `end` (the request's own reading of the
    /// clock): to the exporter.
    pub fn finish(mut self: Box<Self>, status: u16, bytes: u64, aborted: bool, end: Instant) {
        let took = end.saturating_duration_since(self.start);
        self.end_nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        (self.status, self.bytes, self.aborted) = (status, bytes, aborted);
        let spans = self.spans.clone();
        spans.push(self);
    }
}

/// The wall clock and the monotonic one read together, once a batch: a
/// span's start on the wall clock is this reading less the monotonic time
/// since the span's start (the request path reads no wall clock).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    at: Instant,
    unix_nanos: u64,
}

impl Clock {
    pub fn now() -> Clock {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            at: Instant::now(),
            unix_nanos: u64::try_from(unix.as_nanos()).unwrap_or(u64::MAX),
        }
    }

    /// `at` on the wall clock, in nanoseconds since the epoch.
    pub fn unix_nanos(&self, at: Instant) -> u64 {
        let before = self.at.saturating_duration_since(at);
        self.unix_nanos
            .saturating_sub(u64::try_from(before.as_nanos()).unwrap_or(u64::MAX))
    }

    /// Each span's start on the wall clock.
    pub fn date(&self, batch: &mut [Box<SpanRecord>]) {
        for span in batch {
            span.start_unix_nanos = self.unix_nanos(span.start);
        }
    }
}

#[cfg(test)]
mod tests;

impl Spans {
    /// The path and query a span keeps: the query as `traces.query` says,
    /// each cut at `traces.max_attribute_length` (so a queued span holds at
    /// most a few KiB, whatever the request).
    fn path_of(&self, uri: &http::Uri) -> String {
        let path = cut(uri.path(), self.max_len);
        let query = match (uri.query(), self.query) {
            (None, _) | (_, QueryPolicy::Drop) => return path.to_owned(),
            (Some(q), QueryPolicy::Keep) => q.to_owned(),
            (Some(q), QueryPolicy::Redact) => redact(q, &self.redacted),
        };
        format!("{path}?{}", cut(&query, self.max_len))
    }
}

/// `query` with the values of `keys` (any case) replaced by `REDACTED`.
pub fn redact(query: &str, keys: &[String]) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _)) if keys.iter().any(|s| s.eq_ignore_ascii_case(k)) => {
                format!("{k}=REDACTED")
            }
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// `s` cut at `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod bounded {
    use super::*;

    #[test]
    fn queries_are_redacted_and_values_cut() {
        let keys = default_redacted_keys();
        assert_eq!(
            redact("sig=SECRET123&token=TOKEN456&page=2&Signature=x", &keys),
            "sig=REDACTED&token=REDACTED&page=2&Signature=REDACTED"
        );
        assert_eq!(cut("aé", 2), "a");
        assert_eq!(cut("abc", 5), "abc");
    }
}
