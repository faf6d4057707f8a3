//! Spans out over OTLP (`traces.*`), through the real binary and a real OTLP
//! receiver (`tests/otlp/receiver.py`, decoding with the reference protobuf
//! definitions of the `opentelemetry-proto` package, in the virtualenv
//! `tests/run.sh` makes): one server span per sampled request whose IDs are
//! the member's `traceparent` and the access log's; an incoming sampled
//! parent is the span's parent; a collector that hangs or refuses costs no
//! request, and its spans are counted as dropped.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use e2e::process::RouterProcess;
use e2e::{Backend, Echo, raw};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

const HOST: &str = "ha-myapp-demo.example.com";
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The receiver process and the JSON lines it printed.
struct Receiver {
    _child: Child,
    port: u16,
    lines: mpsc::UnboundedReceiver<serde_json::Value>,
}

impl Receiver {
    async fn start(mode: &str) -> Receiver {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let python = root.join("../target/h3-venv/bin/python3");
        assert!(
            python.exists(),
            "{} is missing: tests/run.sh makes it (python3 -m venv target/h3-venv && target/h3-venv/bin/pip install opentelemetry-proto)",
            python.display()
        );
        let mut child = Command::new(python)
            .arg(root.join("otlp/receiver.py"))
            .arg(mode)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("receiver starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, mut lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(l)) = r.next_line().await {
                let v: serde_json::Value =
                    serde_json::from_str(&l).expect("json from the receiver");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let first = tokio::time::timeout(Duration::from_secs(30), lines.recv())
            .await
            .expect(
                "the receiver says its port (is opentelemetry-proto installed in target/h3-venv?)",
            )
            .expect("receiver running");
        let port = first["port"].as_u64().expect("port") as u16;
        Receiver {
            _child: child,
            port,
            lines,
        }
    }

    /// Spans until `n` arrived (or 20 s passed: what came).
    async fn spans(&mut self, n: usize) -> Vec<serde_json::Value> {
        self.spans_until(|spans| spans.len() >= n).await
    }

    /// Spans until `enough` says so (or 20 s passed: what came).
    async fn spans_until(
        &mut self,
        enough: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        self.spans_within(enough, Duration::from_secs(20)).await
    }

    /// Spans until `enough` says so (or `wait` passed: what came).
    async fn spans_within(
        &mut self,
        enough: impl Fn(&[serde_json::Value]) -> bool,
        wait: Duration,
    ) -> Vec<serde_json::Value> {
        let mut spans = Vec::new();
        let deadline = tokio::time::Instant::now() + wait;
        while !enough(&spans) {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(v)) => {
                    if let Some(s) = v.get("span") {
                        spans.push(s.clone());
                    }
                }
                _ => break,
            }
        }
        spans
    }

    /// Export requests seen until one came (or 20 s).
    async fn export_request(&mut self) -> Option<serde_json::Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(v)) if v.get("request").is_some() => return Some(v),
                Ok(Some(_)) => {}
                _ => return None,
            }
        }
    }
}

async fn get(http: std::net::SocketAddr, path: &str, fields: &str) -> Vec<u8> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n{fields}Connection: close\r\n\r\n");
    raw::exchange(http, req.as_bytes(), Duration::from_secs(10)).await
}

/// The `traceparent` the member got for a request.
fn member_traceparent(resp: &[u8]) -> String {
    Echo::parse(raw::body(resp))
        .header("traceparent")
        .expect("a traceparent to the member")
        .to_string()
}

fn traces_config(port: u16, extra: &str) -> String {
    format!(
        "traces:\n  endpoint: http://127.0.0.1:{port}/v1/traces\n  sample_ratio: 1.0\n  interval: 100ms\n  service_name: edge-router\n{extra}"
    )
}

#[tokio::test]
async fn each_sampled_request_has_one_server_span_with_the_members_ids() {
    let b = Backend::start().await;
    let mut rx = Receiver::start("ok").await;
    let mut r = RouterProcess::one_app("traces-ok", &b, &traces_config(rx.port, "")).await;
    // A new trace (sampled at ratio 1.0), and one continued from the client's.
    let new = get(r.http, "/new?q=1", "").await;
    let continued = get(r.http, "/continued", &format!("traceparent: {PARENT}\r\n")).await;
    let (new_tp, cont_tp) = (member_traceparent(&new), member_traceparent(&continued));
    assert!(
        new_tp.ends_with("-01"),
        "a new sampled trace tells the member: {new_tp}"
    );
    let new_line = r.access_line("/new?q=1").await;
    assert_eq!(new_line["trace_id"], &new_tp[3..35], "{new_line}");

    // The spans of the /warm requests before them come too.
    let with_ids = |spans: &[serde_json::Value], tp: &str| -> usize {
        spans
            .iter()
            .filter(|s| s["trace_id"] == tp[3..35] && s["span_id"] == tp[36..52])
            .count()
    };
    // A last request: spans leave in the order requests end, so by its span
    // every span of the two above has come (a second one for either too).
    let last = member_traceparent(&get(r.http, "/last", "").await);
    let spans = rx.spans_until(|s| with_ids(s, &last) > 0).await;
    assert!(
        with_ids(&spans, &new_tp) > 0 && with_ids(&spans, &cont_tp) > 0,
        "{spans:#?}"
    );
    let of = |tp: &str| -> Vec<&serde_json::Value> {
        spans
            .iter()
            .filter(|s| s["trace_id"] == tp[3..35] && s["span_id"] == tp[36..52])
            .collect()
    };
    let [new_span] = of(&new_tp)[..] else {
        panic!("one span with the member's IDs {new_tp}: {spans:#?}");
    };
    let [cont_span] = of(&cont_tp)[..] else {
        panic!("one span with the member's IDs {cont_tp}: {spans:#?}");
    };
    assert_eq!(new_span["parent_span_id"], "", "a root span: {new_span}");
    assert_eq!(
        cont_span["parent_span_id"],
        &PARENT[36..52],
        "the client's span is the parent: {cont_span}"
    );
    assert_eq!(cont_span["trace_id"], &PARENT[3..35]);
    let attrs = &new_span["attributes"];
    assert_eq!(new_span["name"], "GET");
    assert_eq!(new_span["kind"], 2, "SPAN_KIND_SERVER");
    assert_eq!(attrs["http.request.method"], "GET");
    assert_eq!(attrs["url.path"], "/new");
    assert_eq!(attrs["url.query"], "q=1");
    assert_eq!(attrs["server.address"], HOST);
    assert_eq!(attrs["http.response.status_code"], 200);
    assert_eq!(attrs["router.app"], "myapp-demo");
    assert_eq!(attrs["router.member"], b.addr.to_string());
    assert_eq!(attrs["router.request_id"], new_line["request_id"]);
    assert!(
        attrs["http.response.body.size"]
            .as_i64()
            .is_some_and(|n| n > 0),
        "{attrs}"
    );
    assert_eq!(
        new_span["events"],
        serde_json::json!(["routed", "member connected", "response head"]),
        "the request's moments as span events"
    );
    assert!(new_span["end"].as_u64() >= new_span["start"].as_u64());
    let resource = &new_span["resource"];
    assert_eq!(resource["service.name"], "edge-router");
    assert!(
        resource["host.name"]
            .as_str()
            .is_some_and(|h| !h.is_empty()),
        "{resource}"
    );
    // Counted once the collector's 200 is read, just after it printed them.
    let decoded = spans.len() as f64;
    e2e::eventually(
        "each span the receiver decoded counted as exported",
        Duration::from_secs(10),
        async || r.metric_sum("router_trace_spans_exported_total", &[]).await == decoded,
    )
    .await;
}

#[tokio::test]
async fn a_not_sampled_parent_and_a_zero_ratio_export_nothing() {
    let b = Backend::start().await;
    let mut rx = Receiver::start("ok").await;
    let config = format!(
        "traces:\n  endpoint: http://127.0.0.1:{}/v1/traces\n  sample_ratio: 0.0\n  interval: 100ms\n",
        rx.port
    );
    let r = RouterProcess::one_app("traces-none", &b, &config).await;
    let not = PARENT.replace("-01", "-00");
    for _ in 0..20 {
        let tp = member_traceparent(&get(r.http, "/x", &format!("traceparent: {not}\r\n")).await);
        assert!(tp.ends_with("-00"), "not sampled stays so: {tp}");
        let tp = member_traceparent(&get(r.http, "/y", "").await);
        assert!(tp.ends_with("-00"), "ratio 0: {tp}");
    }
    // A sampled parent is exported whatever the ratio: its span, and only it;
    // its query's credentials redacted (OpenTelemetry's conventions).
    get(
        r.http,
        "/z?sig=SECRET123&token=TOKEN456&page=2",
        &format!("traceparent: {PARENT}\r\n"),
    )
    .await;
    let spans = rx.spans(1).await;
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0]["attributes"]["url.path"], "/z");
    assert_eq!(
        spans[0]["attributes"]["url.query"],
        "sig=REDACTED&token=REDACTED&page=2"
    );
    // A client flooding sampled flags (not a proxy forwarded.trusted names)
    // starts at most traces.client_sampled_per_second spans (10 a second, a
    // burst of 10) at ratio 0: not one per request.
    let started = std::time::Instant::now();
    for _ in 0..200 {
        get(r.http, "/flood", &format!("traceparent: {PARENT}\r\n")).await;
    }
    let flood = started.elapsed();
    let mut all = Vec::new();
    let end = loop {
        get(r.http, "/end", &format!("traceparent: {PARENT}\r\n")).await;
        // The exporter sends every 100 ms: a second is ten of its rounds.
        let ended =
            |s: &[serde_json::Value]| s.iter().any(|x| x["attributes"]["url.path"] == "/end");
        let got = rx.spans_within(ended, Duration::from_secs(1)).await;
        let done = got.iter().any(|x| x["attributes"]["url.path"] == "/end");
        all.extend(got);
        if done {
            break started.elapsed();
        }
    };
    let flooded = all
        .iter()
        .filter(|x| x["attributes"]["url.path"] == "/flood")
        .count();
    let bound = 10 + (10.0 * end.as_secs_f64()).ceil() as usize;
    assert!(
        flooded <= bound && flooded < 200,
        "{flooded} spans from 200 client-sampled requests in {flood:?} (bound {bound})"
    );
}

/// A collector that hangs (takes the request, never answers) or refuses
/// (503) costs no request; what it did not take is counted as dropped.
#[tokio::test]
async fn a_hanging_or_refusing_collector_costs_no_request_and_drops_are_counted() {
    for mode in ["hang", "refuse"] {
        let b = Backend::start().await;
        let mut rx = Receiver::start(mode).await;
        let extra = "  timeout: 1s\n  queue: 64\n  batch: 16\n";
        let r = RouterProcess::one_app(
            &format!("traces-{mode}"),
            &b,
            &traces_config(rx.port, extra),
        )
        .await;
        let mut ok = 0;
        for i in 0..300 {
            if raw::status(&get(r.http, &format!("/{i}"), "").await) == Some(200) {
                ok += 1;
            }
        }
        assert_eq!(ok, 300, "{mode}: every request answered");
        assert!(
            rx.export_request().await.is_some(),
            "{mode}: the router tried"
        );
        e2e::eventually(
            &format!("{mode}: spans counted as dropped"),
            Duration::from_secs(20),
            async || {
                r.metric_sum(
                    "router_trace_spans_dropped_total",
                    &[("reason", "export_failed")],
                )
                .await
                    > 0.0
            },
        )
        .await;
        let exported = r.metric_sum("router_trace_spans_exported_total", &[]).await;
        assert_eq!(exported, 0.0, "{mode}: nothing counted as exported");
        if mode == "hang" {
            // One batch in flight for 1 s at a time: the 64-span queue fills.
            let full = r
                .metric_sum(
                    "router_trace_spans_dropped_total",
                    &[("reason", "queue_full")],
                )
                .await;
            assert!(full > 0.0, "a queue that cannot drain drops and counts");
        }
    }
}
