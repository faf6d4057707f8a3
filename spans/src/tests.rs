use super::export::{Endpoint, encode};
use super::otlp::{self, Value};
use super::*;
use prost::Message;

fn spans(
    queue: usize,
) -> (
    Arc<Spans>,
    tokio::sync::mpsc::Receiver<Box<SpanRecord>>,
    TraceMetrics,
) {
    let metrics = TraceMetrics::new(&Registry::new()).expect("metrics");
    let config = TracesConfig {
        queue,
        sample_ratio: 1.0,
        ..TracesConfig::default()
    };
    let (s, rx) = Spans::new(&config, metrics.clone());
    (s, rx, metrics)
}

fn record(spans: &Arc<Spans>, parent: Option<[u8; 16]>) -> Box<SpanRecord> {
    let uri: http::Uri = "/a/b?x=1".parse().expect("uri");
    let host = http::HeaderValue::from_static("app-ns.example.com");
    SpanRecord::start(
        spans,
        Started {
            traceparent: b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            parent,
            start: Instant::now(),
            method: &http::Method::POST,
            host: Some(&host),
            uri: &uri,
            version: http::Version::HTTP_2,
            client: "10.1.2.3".parse().expect("ip"),
            request_id: "rid",
        },
    )
}

fn attr<'a>(span: &'a otlp::Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

#[test]
fn a_finished_span_is_encoded_as_otlp_with_the_traceparents_ids() {
    let (s, mut rx, _) = spans(4);
    let mut r = record(&s, Some(*b"1122334455667788"));
    r.app = Some("app-ns".into());
    r.member = Some(Arc::from("10.0.0.5:8080"));
    r.mark(Moment::Routed);
    r.mark(Moment::Retry);
    r.finish(503, 42, false);
    let finished = rx.try_recv().expect("queued");
    let body = encode(&[finished], &[otlp::string("service.name", "router")]);
    let req = otlp::ExportTraceServiceRequest::decode(&body[..]).expect("decodes");
    let span = &req.resource_spans[0].scope_spans[0].spans[0];
    assert_eq!(
        hex::encode(&span.trace_id),
        "4bf92f3577b34da6a3ce929d0e0e4736"
    );
    assert_eq!(hex::encode(&span.span_id), "00f067aa0ba902b7");
    assert_eq!(hex::encode(&span.parent_span_id), "1122334455667788");
    assert_eq!((span.name.as_str(), span.kind), ("POST", otlp::KIND_SERVER));
    assert_eq!(span.flags, 0x301, "sampled, the parent remote");
    assert_eq!(
        attr(span, "http.response.status_code"),
        Some(&Value::Int(503))
    );
    assert_eq!(attr(span, "url.path"), Some(&Value::String("/a/b".into())));
    assert_eq!(attr(span, "url.query"), Some(&Value::String("x=1".into())));
    assert_eq!(
        attr(span, "router.member"),
        Some(&Value::String("10.0.0.5:8080".into()))
    );
    assert_eq!(attr(span, "router.retries"), Some(&Value::Int(1)));
    assert_eq!(
        span.status.as_ref().map(|s| s.code),
        Some(otlp::STATUS_ERROR)
    );
    let events: Vec<&str> = span.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(events, ["routed", "retry"]);
    assert!(span.end_time_unix_nano >= span.start_time_unix_nano);
    assert!(
        span.start_time_unix_nano > 1_700_000_000_000_000_000,
        "Unix time"
    );
}

#[test]
fn a_full_queue_drops_and_counts_never_waits() {
    let (s, _rx, metrics) = spans(2);
    for _ in 0..5 {
        record(&s, None).finish(200, 0, false);
    }
    assert_eq!(metrics.dropped.with_label_values(&["queue_full"]).get(), 3);
}

#[test]
fn the_ratio_and_the_endpoint_are_checked() {
    assert!(Sample::ratio(1.0).new_trace(u64::MAX));
    assert!(!Sample::ratio(0.0).new_trace(0));
    assert!(Sample::ratio(0.5).new_trace(u64::MAX / 2 - 1));
    assert!(!Sample::ratio(0.5).new_trace(u64::MAX / 2 + 2));
    let e = Endpoint::parse("http://127.0.0.1:4318").expect("ok");
    assert_eq!(
        (e.authority.as_str(), e.path.as_str()),
        ("127.0.0.1:4318", "/v1/traces")
    );
    let e = Endpoint::parse("http://collector/otlp/v1/traces").expect("ok");
    assert_eq!(
        (e.authority.as_str(), e.path.as_str()),
        ("collector:80", "/otlp/v1/traces")
    );
    assert!(Endpoint::parse("https://c:4318").is_err());
    assert!(Endpoint::parse("c:4317").is_err());
    let bad = |c: TracesConfig| c.check().expect_err("refused").0;
    let on = TracesConfig {
        endpoint: Some("http://127.0.0.1:4318".into()),
        ..TracesConfig::default()
    };
    assert!(on.check().is_ok());
    assert_eq!(
        bad(TracesConfig {
            sample_ratio: 1.5,
            ..on.clone()
        }),
        "traces.sample_ratio"
    );
    assert_eq!(
        bad(TracesConfig {
            batch: 0,
            ..on.clone()
        }),
        "traces.batch"
    );
    assert_eq!(
        bad(TracesConfig {
            endpoint: Some("ftp://x".into()),
            ..on
        }),
        "traces.endpoint"
    );
}
