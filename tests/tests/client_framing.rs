//! The router's own HTTP/1.1 path and hyper behind it, over real sockets: one
//! connection moves from the one to the other at the first request the own path
//! does not take, and the requests before and after it are served in order; a
//! response is the same bytes whichever of the two wrote it.

use std::time::Duration;

use e2e::{Backend, Echo, TestRouter, events, raw};

const HA: &str = "ha-myapp-demo.example.com";

async fn router_with_backend() -> (TestRouter, Backend) {
    TestRouter::with_backend("health:\n  checks: false\n").await
}

/// Splits raw HTTP/1.1 responses (each framed by `content-length`) into (head,
/// body) pairs.
fn responses(mut bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end + 4]).to_string();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no content-length in {head}"));
        let body = bytes[end + 4..end + 4 + len].to_vec();
        bytes = &bytes[end + 4 + len..];
        out.push((head, body));
    }
    assert!(
        bytes.is_empty(),
        "left over: {:?}",
        String::from_utf8_lossy(bytes)
    );
    out
}

#[tokio::test]
async fn one_connection_moves_to_hyper_mid_pipeline_and_keeps_its_order() {
    let (r, b) = router_with_backend().await;
    // Pipelined in one write: two requests the own path takes (one with a body),
    // a chunked one (hyper's from here on), then two more.
    let request = format!(
        "GET /one HTTP/1.1\r\nHost: {HA}\r\n\r\n\
         POST /two HTTP/1.1\r\nHost: {HA}\r\nContent-Length: 5\r\n\r\nhello\
         POST /three HTTP/1.1\r\nHost: {HA}\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n\
         GET /four HTTP/1.1\r\nHost: {HA}\r\n\r\n\
         GET /five HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n"
    );
    let before = b.proxied();
    let got = raw::exchange(r.http, request.as_bytes(), Duration::from_secs(10)).await;
    let got = responses(&got);
    let seen: Vec<(String, String, u64)> = got
        .iter()
        .map(|(head, body)| {
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            let e = Echo::parse(body);
            (e.method, e.target, e.body_len)
        })
        .collect();
    let want = [
        ("GET", "/one", 0),
        ("POST", "/two", 5),
        ("POST", "/three", 3),
        ("GET", "/four", 0),
        ("GET", "/five", 0),
    ];
    let want: Vec<(String, String, u64)> = want
        .iter()
        .map(|(m, t, n)| (m.to_string(), t.to_string(), *n))
        .collect();
    assert_eq!(seen, want);
    assert_eq!(b.proxied() - before, 5);
    assert!(
        got.last()
            .is_some_and(|(h, _)| h.contains("connection: close")),
        "the last response says the connection closes"
    );
}

#[tokio::test]
async fn a_response_is_the_same_bytes_from_the_own_path_and_from_hyper() {
    let (r, _b) = router_with_backend().await;
    let last = format!("GET /end HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n");
    // The own path: a plain keep-alive request.
    // The same request ID on both (a trusted client's is kept), so that the
    // responses can be compared byte for byte.
    let own = format!(
        "GET /same?x=1 HTTP/1.1\r\nHost: {HA}\r\nUser-Agent: t\r\nX-Request-Id: same-1\r\n\r\n{last}"
    );
    // hyper: the same request, but its `Connection` names a header (hop-by-hop,
    // dropped before the member), which the own path leaves to hyper.
    let by_hyper = format!(
        "GET /same?x=1 HTTP/1.1\r\nHost: {HA}\r\nUser-Agent: t\r\nX-Request-Id: same-1\r\nConnection: keep-alive, x-gone\r\nX-Gone: 1\r\n\r\n{last}"
    );
    let a = responses(&raw::exchange(r.http, own.as_bytes(), Duration::from_secs(10)).await);
    let b = responses(&raw::exchange(r.http, by_hyper.as_bytes(), Duration::from_secs(10)).await);
    assert_eq!(a.len(), 2);
    assert_eq!(b.len(), 2);
    let without_date = |head: &str| {
        head.lines()
            .filter(|l| !l.starts_with("date: "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(without_date(&a[0].0), without_date(&b[0].0));
    let (ea, eb) = (Echo::parse(&a[0].1), Echo::parse(&b[0].1));
    assert_eq!(ea.target, "/same?x=1");
    // The same but for `traceparent`, a new trace each time.
    let traced = |e: &Echo| -> Vec<(String, String)> {
        e.headers
            .iter()
            .filter(|(n, _)| n != "traceparent")
            .cloned()
            .collect()
    };
    assert_eq!(traced(&ea), traced(&eb), "the member saw the same request");
    assert_eq!(ea.all("traceparent").len(), 1);
    assert!(eb.header("x-gone").is_none());
    // And an error page the router writes itself.
    let unknown = "GET / HTTP/1.1\r\nHost: nobody.example.com\r\nX-Request-Id: same-2\r\n\r\n";
    let own = format!("{unknown}{last}");
    let by_hyper = format!(
        "GET / HTTP/1.1\r\nHost: nobody.example.com\r\nX-Request-Id: same-2\r\nConnection: keep-alive, x-gone\r\n\r\n{last}"
    );
    let a = responses(&raw::exchange(r.http, own.as_bytes(), Duration::from_secs(10)).await);
    let b = responses(&raw::exchange(r.http, by_hyper.as_bytes(), Duration::from_secs(10)).await);
    assert!(a[0].0.starts_with("HTTP/1.1 404"), "{}", a[0].0);
    assert_eq!(without_date(&a[0].0), without_date(&b[0].0));
    assert_eq!(a[0].1, b[0].1);
}

/// A head that starts and never ends is closed at `limits.header_read_timeout`,
/// also after a request the own path served on the same connection.
#[tokio::test]
async fn a_head_begun_and_never_finished_is_closed_at_the_head_deadline() {
    let b = Backend::start().await;
    let r = TestRouter::start("limits:\n  header_read_timeout: 300ms\n  idle_timeout: 60s\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let request = format!("GET /one HTTP/1.1\r\nHost: {HA}\r\n\r\nGET /two HTTP/1.1\r\nHost: ");
    // Closed by the router well before the 60 s idle deadline could.
    let got = raw::exchange_to_close(r.http, request.as_bytes(), Duration::from_secs(20))
        .await
        .expect("closed at the head deadline, not the idle one");
    assert_eq!(responses(&got).len(), 1, "the first is answered");
}

/// A client that leaves while its request waits on the member cancels it, as hyper
/// cancels it: the member's slot is free at once, not when the member answers.
#[tokio::test]
async fn a_client_that_leaves_mid_request_frees_its_member_slot_at_once() {
    let (r, _b) = router_with_backend().await;
    let in_flight = async || {
        let (_, doc) = r.admin_get("/backends").await;
        let doc: serde_json::Value = serde_json::from_str(&doc).expect("json");
        doc["backends"][0]["in_flight"].as_u64()
    };
    let mut s = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    tokio::io::AsyncWriteExt::write_all(
        &mut s,
        format!("GET /slow?ms=8000 HTTP/1.1\r\nHost: {HA}\r\n\r\n").as_bytes(),
    )
    .await
    .expect("write");
    e2e::eventually(
        "the request holds a slot on the member",
        Duration::from_secs(5),
        async || in_flight().await == Some(1),
    )
    .await;
    drop(s);
    // The member answers after 8 s; the slot must be free well before.
    e2e::eventually(
        "the slot is free once the client left",
        Duration::from_secs(3),
        async || in_flight().await == Some(0),
    )
    .await;
}
