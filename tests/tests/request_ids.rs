//! Every request's ID and W3C trace context, through the real binary: what the
//! member gets, what the client gets back, the access log line and the router's
//! own error pages.

use std::time::Duration;

use e2e::process::RouterProcess;
use e2e::{Backend, Echo, raw};

const HOST: &str = "ha-myapp-demo.example.com";
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn get(http: std::net::SocketAddr, path: &str, fields: &str) -> Vec<u8> {
    let req = format!("GET {path} HTTP/1.1\r\nHost: {HOST}\r\n{fields}Connection: close\r\n\r\n");
    raw::exchange(http, req.as_bytes(), Duration::from_secs(10)).await
}

/// The response's head fields named `name` (lower case).
fn response_field(resp: &[u8], name: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(resp);
    let head = text
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .to_string();
    head.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

#[tokio::test]
async fn a_made_id_and_a_new_trace_reach_the_member_the_client_and_the_log() {
    let b = Backend::start().await;
    let mut r = RouterProcess::one_app("ids-made", &b, "").await;
    let resp = get(
        r.http,
        "/one",
        "X-Request-Id: bad id\r\ntraceparent: 00-zz\r\ntracestate: k=v\r\n",
    )
    .await;
    assert_eq!(raw::status(&resp), Some(200));
    let echo = Echo::parse(raw::body(&resp));
    let id = echo
        .header("x-request-id")
        .expect("an ID to the member")
        .to_string();
    assert_eq!(id.len(), 32, "made: {id}");
    assert_ne!(id, "bad id", "a malformed ID is replaced");
    assert_eq!(echo.all("x-request-id").len(), 1);
    assert_eq!(
        response_field(&resp, "x-request-id"),
        std::slice::from_ref(&id),
        "returned to the client"
    );
    let parent = echo
        .header("traceparent")
        .expect("a traceparent to the member");
    assert_eq!(parent.len(), 55, "{parent}");
    assert!(
        parent.starts_with("00-") && parent.ends_with("-00"),
        "new, not sampled: {parent}"
    );
    assert_eq!(
        echo.all("traceparent").len(),
        1,
        "the malformed one is not passed"
    );
    assert!(
        echo.header("tracestate").is_none(),
        "dropped with an invalid parent"
    );
    let line = r.access_line("/one").await;
    assert_eq!(line["request_id"], id.as_str(), "{line}");
    assert_eq!(line["trace_id"], &parent[3..35], "{line}");
}

#[tokio::test]
async fn a_trusted_clients_id_and_trace_are_continued() {
    let b = Backend::start().await;
    let mut r = RouterProcess::one_app("ids-kept", &b, "").await;
    let resp = get(
        r.http,
        "/two",
        &format!("X-Request-Id: client-7\r\ntraceparent: {PARENT}\r\ntracestate: k=v\r\n"),
    )
    .await;
    let echo = Echo::parse(raw::body(&resp));
    assert_eq!(echo.header("x-request-id"), Some("client-7"));
    assert_eq!(response_field(&resp, "x-request-id"), ["client-7"]);
    let parent = echo.header("traceparent").expect("traceparent");
    assert_eq!(&parent[..36], &PARENT[..36], "the same trace");
    assert_ne!(
        &parent[36..52],
        &PARENT[36..52],
        "the router's own span as parent"
    );
    assert!(parent.ends_with("-01"), "the flags kept");
    assert_eq!(echo.header("tracestate"), Some("k=v"));
    let line = r.access_line("/two").await;
    assert_eq!(line["request_id"], "client-7");
    assert_eq!(line["trace_id"], &PARENT[3..35]);
}

#[tokio::test]
async fn an_untrusted_clients_id_is_replaced_and_error_pages_carry_the_id() {
    let b = Backend::start().await;
    let r =
        RouterProcess::one_app("ids-untrusted", &b, "forwarded:\n  trusted: [10.0.0.0/8]\n").await;
    let resp = get(r.http, "/three", "X-Request-Id: client-8\r\n").await;
    let echo = Echo::parse(raw::body(&resp));
    let id = echo.header("x-request-id").expect("id").to_string();
    assert_ne!(id, "client-8", "not trusted: replaced");
    assert_eq!(response_field(&resp, "x-request-id"), [id]);
    // The router's own answer (no such host): the ID in the page and the head.
    let req = "GET / HTTP/1.1\r\nHost: nope.example.com\r\nConnection: close\r\n\r\n";
    let resp = raw::exchange(r.http, req.as_bytes(), Duration::from_secs(10)).await;
    assert_eq!(raw::status(&resp), Some(404));
    let ids = response_field(&resp, "x-request-id");
    assert_eq!(ids.len(), 1);
    let page = String::from_utf8_lossy(raw::body(&resp)).to_string();
    assert!(page.contains(&format!("request id: {}", ids[0])), "{page}");
    // And a member's failure (502): the same.
    b.force_status(0);
    drop(b);
    let resp = get(r.http, "/gone", "").await;
    assert_eq!(raw::status(&resp), Some(502));
    let ids = response_field(&resp, "x-request-id");
    let page = String::from_utf8_lossy(raw::body(&resp)).to_string();
    assert!(page.contains(&format!("request id: {}", ids[0])), "{page}");
}
