use super::export::Endpoint;
use super::otlp::{self, Value, int, string};
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
    let (s, queue) = Spans::new(&config, metrics.clone());
    (s, queue.rx, metrics)
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
    r.finish(503, 42, false, Instant::now());
    let mut finished = rx.try_recv().expect("queued");
    // Dated as the exporter dates its batch.
    Clock::now().date(std::slice::from_mut(&mut finished));
    let resource = crate::wire::resource(&[("service.name", "router")]);
    let body = crate::wire::encode(&[finished], &resource);
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

/// Records of every shape the writer has a branch for: with and without a
/// parent, app, member, retries, query, error status, abort; IPv4, IPv6 and
/// a mapped IPv4 client; an empty request ID; a full set of moments; a
/// span too long for a two-byte length.
#[expect(clippy::vec_box, reason = "a batch is of the boxes the queue carries")]
fn records_of_every_shape(spans: &Arc<Spans>) -> Vec<Box<SpanRecord>> {
    let mut out = Vec::new();
    for shape in 0..16u32 {
        let bit = |n: u32| shape & (1 << n) != 0;
        let mut r = record(spans, bit(0).then_some(*b"1122334455667788"));
        if bit(1) {
            r.app = Some("app-ns".into());
            r.member = Some(Arc::from("10.0.0.5:8080"));
        }
        if bit(2) {
            r.path = "/no/query".into();
            r.client = "2001:db8::7".parse().expect("ip");
            r.request_id.clear();
        } else if bit(3) {
            r.client = "::ffff:192.0.2.9".parse().expect("ip");
        }
        for _ in 0..(shape % 7) {
            r.mark(Moment::Retry);
        }
        r.status = if bit(3) { 503 } else { 200 };
        r.aborted = bit(1) && bit(3);
        r.bytes = u64::from(shape) << 40;
        r.retries = (shape % 3) as u8;
        if shape == 15 {
            // A span past 16 383 bytes: its length takes three bytes.
            r.app = Some("a".repeat(20_000));
        }
        out.push(r);
    }
    out
}

#[test]
fn the_writer_writes_what_prost_writes_from_the_messages() {
    let (s, _rx, _) = spans(4);
    let batch = records_of_every_shape(&s);
    let attributes = [("service.name", "router"), ("host.name", "node-1")];
    let resource = crate::wire::resource(&attributes);
    let as_messages: Vec<otlp::KeyValue> = attributes.iter().map(|(k, v)| string(k, *v)).collect();
    for one in batch.chunks(1) {
        assert_eq!(
            crate::wire::encode(one, &resource),
            encode(one, &as_messages),
            "a span of status {} from {}",
            one[0].status,
            one[0].client
        );
    }
    assert_eq!(
        crate::wire::encode(&batch, &resource),
        encode(&batch, &as_messages)
    );
    assert_eq!(
        crate::wire::encode(&[], &resource),
        encode(&[], &as_messages)
    );
}

#[test]
fn a_full_queue_drops_and_counts_never_waits() {
    let (s, _rx, metrics) = spans(2);
    for _ in 0..5 {
        record(&s, None).finish(200, 0, false, Instant::now());
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

/// A batch as one `ExportTraceServiceRequest`, built as `prost` messages: the
/// reference for what [`crate::wire::encode`] writes (the router's encoding
/// until the writer replaced it).
fn encode(batch: &[Box<SpanRecord>], resource: &[otlp::KeyValue]) -> Vec<u8> {
    otlp::ExportTraceServiceRequest {
        resource_spans: vec![otlp::ResourceSpans {
            resource: Some(otlp::Resource {
                attributes: resource.to_vec(),
            }),
            scope_spans: vec![otlp::ScopeSpans {
                scope: Some(otlp::InstrumentationScope {
                    name: "router".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                spans: batch.iter().map(|s| span(s)).collect(),
            }],
        }],
    }
    .encode_to_vec()
}

/// Span flags: `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE` and `..._IS_REMOTE`.
use crate::wire::{HAS_IS_REMOTE, IS_REMOTE};

fn span(s: &SpanRecord) -> otlp::Span {
    let tp = &s.traceparent;
    let hex = |h: &[u8]| hex::decode(h).unwrap_or_default();
    let trace_flags = hex(&tp[53..55]).first().copied().unwrap_or(0);
    let (path, query) = s.path.split_once('?').unwrap_or((&s.path, ""));
    let mut attributes = vec![
        string("http.request.method", s.method.as_str()),
        string("url.path", path),
        string("server.address", &s.host),
        string("network.protocol.version", crate::wire::version(s.version)),
        string("client.address", s.client.to_canonical().to_string()),
        int("http.response.status_code", i64::from(s.status)),
        int(
            "http.response.body.size",
            i64::try_from(s.bytes).unwrap_or(i64::MAX),
        ),
        string("router.request_id", &s.request_id),
    ];
    if !query.is_empty() {
        attributes.push(string("url.query", query));
    }
    if let Some(app) = &s.app {
        attributes.push(string("router.app", app));
    }
    if let Some(member) = &s.member {
        attributes.push(string("router.member", &**member));
    }
    if s.retries > 0 {
        attributes.push(int("router.retries", i64::from(s.retries)));
    }
    let status = (s.status >= 500 || s.aborted).then(|| otlp::Status {
        message: if s.aborted {
            "aborted before the response's end".into()
        } else {
            String::new()
        },
        code: otlp::STATUS_ERROR,
    });
    let events = s.moments[..usize::from(s.moment_count)]
        .iter()
        .map(|(moment, at)| otlp::Event {
            time_unix_nano: s.start_unix_nanos + at,
            name: moment.name().into(),
            attributes: Vec::new(),
        })
        .collect();
    otlp::Span {
        trace_id: hex(&tp[3..35]),
        span_id: hex(&tp[36..52]),
        trace_state: String::new(),
        parent_span_id: s.parent.map(|p| hex(&p)).unwrap_or_default(),
        name: s.method.as_str().into(),
        kind: otlp::KIND_SERVER,
        start_time_unix_nano: s.start_unix_nanos,
        end_time_unix_nano: s.start_unix_nanos + s.end_nanos,
        attributes,
        events,
        status,
        flags: u32::from(trace_flags)
            | HAS_IS_REMOTE
            | if s.parent.is_some() { IS_REMOTE } else { 0 },
    }
}

#[test]
fn the_wall_clock_of_a_start_is_the_batchs_reading_less_the_time_since() {
    let start = Instant::now();
    let clock = Clock::now();
    let since = clock.at.duration_since(start).as_nanos() as u64;
    assert_eq!(clock.unix_nanos(start), clock.unix_nanos - since);
    // A start after the reading (it cannot be, but never underflows).
    assert_eq!(
        clock.unix_nanos(clock.at + Duration::from_secs(1)),
        clock.unix_nanos
    );
}

/// A collector on loopback: each export request's span count, in order.
async fn collector() -> (String, tokio::sync::mpsc::UnboundedReceiver<usize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/v1/traces", listener.local_addr().expect("addr"));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.expect("accept");
        let mut buf = Vec::new();
        loop {
            let Some(head) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                if conn.read_buf(&mut buf).await.expect("read") == 0 {
                    return;
                }
                continue;
            };
            let text = String::from_utf8_lossy(&buf[..head]).to_ascii_lowercase();
            let len: usize = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .expect("content-length");
            while buf.len() < head + 4 + len {
                if conn.read_buf(&mut buf).await.expect("read") == 0 {
                    return;
                }
            }
            let body: Vec<u8> = buf.drain(..head + 4 + len).skip(head + 4).collect();
            let req = otlp::ExportTraceServiceRequest::decode(&body[..]).expect("decodes");
            let spans = req.resource_spans[0].scope_spans[0].spans.len();
            let _ = tx.send(spans);
            conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                .await
                .expect("answer");
        }
    });
    (url, rx)
}

/// The exporter is not woken by each span: a partial batch goes when the
/// interval has passed, a full one as soon as the request path says a
/// batch's worth waits in the queue (the interval here is an hour: only that
/// word can send it). The exporter holds the first span when the next four
/// come: its batch of four goes, the fifth waits.
#[tokio::test]
async fn a_full_batch_goes_at_once_and_a_partial_one_after_the_interval() {
    for (interval, pushed, expected) in [
        (Duration::from_secs(3600), 5, vec![4]),
        (Duration::from_millis(50), 3, vec![3]),
    ] {
        let (url, mut exported) = collector().await;
        let config = TracesConfig {
            endpoint: Some(url),
            sample_ratio: 1.0,
            batch: 4,
            interval,
            ..TracesConfig::default()
        };
        let metrics = TraceMetrics::new(&Registry::new()).expect("metrics");
        let (s, queue) = Spans::new(&config, metrics.clone());
        let identity = export::Identity {
            service_name: "router".into(),
            node: None,
            host_name: "h".into(),
        };
        // The first span alone, once the exporter waits for the rest.
        record(&s, None).finish(200, 0, false, Instant::now());
        tokio::spawn(export::run(queue, config, identity, metrics.clone()));
        tokio::task::yield_now().await;
        for _ in 1..pushed {
            record(&s, None).finish(200, 0, false, Instant::now());
        }
        let mut got = Vec::new();
        while got.iter().sum::<usize>() < expected.iter().sum() {
            // A bound only so that a full batch left waiting for the hour
            // fails here saying so, instead of hanging the run.
            let next = tokio::time::timeout(Duration::from_secs(60), exported.recv()).await;
            let why = "no export: a full batch did not wake the exporter";
            got.push(next.expect(why).expect("the collector's channel"));
        }
        assert_eq!(got, expected, "spans per export, interval {interval:?}");
    }
}
