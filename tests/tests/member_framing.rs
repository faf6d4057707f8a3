//! How the router reads what members send (its own HTTP/1.1 client framing,
//! `h1-codec/src/response.rs`), through real sockets: a scripted member answers each
//! path with exact bytes, and real clients (hyper over HTTP/1.1 and h2) check what
//! arrives.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use e2e::{TestRouter, events, raw};
use http::Request;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HA: &str = "ha-myapp-demo.example.com";

/// The answer to each path, as raw bytes; `None`: close without a byte.
fn answer(path: &str) -> Option<Vec<u8>> {
    let a: &[u8] = match path {
        "/chunked" => {
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\nX-Checksum: 42\r\n\r\n"
        }
        "/hints" => {
            b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        }
        "/close" => b"HTTP/1.1 200 OK\r\n\r\nuntil the close",
        "/reason" => b"HTTP/1.1 200 Fine Thanks\r\nContent-Length: 2\r\n\r\nok",
        "/garbage" => b"SPDY/9 what\r\n\r\n",
        "/cut" => b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b",
        "/bad-chunk" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "/too-large" => b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 3\r\n\r\nno!",
        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    };
    Some(a.to_vec())
}

/// A member that reads each request head (and a `Content-Length` body, except on
/// `/too-large`, which it answers at once and then drains), answers by path, and
/// closes after `/close`, `/cut`, `/garbage` and `/bad-chunk`. Counts connections.
async fn scripted_member() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    let opened = Arc::new(AtomicUsize::new(0));
    let count = opened.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                continue;
            };
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let end = loop {
                        if let Some(i) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => got.extend_from_slice(&buf[..k]),
                        }
                    };
                    let head = String::from_utf8_lossy(&got[..end]).to_string();
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    let len: usize = head
                        .lines()
                        .find_map(|l| {
                            let (n, v) = l.split_once(':')?;
                            n.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    got.drain(..end);
                    if path == "/too-large" {
                        // Answer before reading the body, then drain it.
                        let _ = s.write_all(&answer(&path).unwrap_or_default()).await;
                        let mut left = len.saturating_sub(got.len());
                        while left > 0 {
                            match s.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => left = left.saturating_sub(k),
                            }
                        }
                        return;
                    }
                    while got.len() < len {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(k) => got.extend_from_slice(&buf[..k]),
                        }
                    }
                    got.drain(..len);
                    match answer(&path) {
                        Some(a) => {
                            if s.write_all(&a).await.is_err() {
                                return;
                            }
                        }
                        None => return,
                    }
                    if ["/close", "/cut", "/garbage", "/bad-chunk"].contains(&path.as_str()) {
                        return;
                    }
                }
            });
        }
    });
    (addr, opened)
}

async fn router_with_scripted_member() -> (TestRouter, Arc<AtomicUsize>) {
    let (addr, opened) = scripted_member().await;
    // No health checks: the member counts connections, and a check is one.
    let r = TestRouter::start("health:\n  checks: false\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", addr));
    r.wait_member(addr).await;
    (r, opened)
}

#[tokio::test]
async fn chunked_responses_with_extensions_and_trailers_reach_h1_and_h2_clients() {
    let (r, opened) = router_with_scripted_member().await;
    assert_eq!(
        r.get(HA, "/chunked").await,
        (200, Bytes::from_static(b"hello world"))
    );
    // h2 carries trailers to any client.
    let tcp = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .expect("h2 handshake");
    tokio::spawn(conn);
    let req = Request::get(format!("http://{HA}/chunked"))
        .body(Empty::<Bytes>::new())
        .expect("req");
    let resp = h2.send_request(req).await.expect("h2 response");
    assert_eq!(resp.status(), 200);
    let collected = resp.into_body().collect().await.expect("body");
    let trailers = collected.trailers().cloned();
    assert_eq!(collected.to_bytes(), Bytes::from_static(b"hello world"));
    assert_eq!(
        trailers.and_then(|t| t.get("x-checksum").cloned()),
        Some(http::HeaderValue::from_static("42"))
    );
    // Read to its end, a chunked response leaves the connection reusable.
    assert_eq!(r.get(HA, "/").await.0, 200);
    assert_eq!(opened.load(Ordering::SeqCst), 1, "one member connection");
}

#[tokio::test]
async fn informational_heads_are_skipped_reasons_kept_and_close_delimited_bodies_read_to_the_close()
{
    let (r, opened) = router_with_scripted_member().await;
    assert_eq!(r.get(HA, "/hints").await, (200, Bytes::from_static(b"ok")));
    // An unusual reason phrase reaches HTTP/1 clients as the member wrote it.
    let req = format!("GET /reason HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n");
    let resp = raw::exchange(r.http, req.as_bytes(), Duration::from_secs(10)).await;
    assert!(
        resp.starts_with(b"HTTP/1.1 200 Fine Thanks\r\n"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    assert_eq!(
        r.get(HA, "/close").await,
        (200, Bytes::from_static(b"until the close"))
    );
    assert_eq!(opened.load(Ordering::SeqCst), 1);
    // That connection ended with its body: the next request opens another.
    assert_eq!(r.get(HA, "/").await.0, 200);
    assert_eq!(opened.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_garbled_response_is_502_and_a_cut_body_aborts_the_client() {
    let (r, _) = router_with_scripted_member().await;
    assert_eq!(r.get(HA, "/garbage").await.0, 502);
    assert_eq!(
        r.metric("router_upstream_errors_total{kind=\"protocol\"}")
            .await,
        Some(1.0)
    );
    // Head sent, body cut short or malformed: the client must never get a complete
    // message (a short body passed off as whole, or a clean chunked end).
    for path in ["/cut", "/bad-chunk"] {
        let req = format!("GET {path} HTTP/1.1\r\nHost: {HA}\r\n\r\n");
        let resp = raw::exchange(r.http, req.as_bytes(), Duration::from_secs(10)).await;
        let text = String::from_utf8_lossy(&resp).to_string();
        let Some(end) = text.find("\r\n\r\n") else {
            continue; // closed before the head: broken, as it must be
        };
        let (head, body) = (text[..end].to_ascii_lowercase(), &text[end + 4..]);
        assert!(head.starts_with("http/1.1 200"), "{path}: {text}");
        if head.contains("content-length") {
            assert!(head.contains("content-length: 100"), "{path}: {head}");
            assert!(body.len() < 100, "{path}: {text:?}");
        } else {
            assert!(
                !body.ends_with("0\r\n\r\n"),
                "{path}: a clean end: {text:?}"
            );
        }
    }
    // The router is fine afterwards.
    assert_eq!(r.get(HA, "/").await.0, 200);
}

#[tokio::test]
async fn a_member_that_answers_before_reading_the_body_is_heard() {
    let (r, _) = router_with_scripted_member().await;
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let req = Request::post(format!("http://{}/too-large", r.http))
        .header("host", HA)
        .body(Full::new(Bytes::from(vec![b'x'; 4 * 1024 * 1024])))
        .expect("req");
    let resp = tokio::time::timeout(Duration::from_secs(20), client.request(req))
        .await
        .expect("no hang")
        .expect("response");
    assert_eq!(resp.status(), 413);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body, Bytes::from_static(b"no!"));
}

/// A streamed member body whose end comes on its own, after its last bytes
/// (chunked, a pause before each chunk and before the end): the client's
/// keep-alive connection carries the next response intact. The own HTTP/1.1
/// path once ended such a body twice, a second `0\r\n\r\n` in front of the
/// next response (found by `bench/compression.py`'s h2load runs).
#[tokio::test]
async fn a_body_that_ends_after_a_pause_is_ended_once() {
    let b = e2e::Backend::start().await;
    let r = TestRouter::start("health:\n  checks: false\n").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_member(b.addr).await;
    let tcp = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    for (i, path) in [
        "/stream?chunks=2&gap_ms=30",
        "/stream?chunks=1&gap_ms=30",
        "/",
    ]
    .into_iter()
    .enumerate()
    {
        send.ready().await.expect("the connection is still usable");
        let req = Request::get(path)
            .header("host", HA)
            .body(Empty::<Bytes>::new())
            .expect("request");
        let resp = send
            .send_request(req)
            .await
            .unwrap_or_else(|e| panic!("response {i} ({path}) on the same connection: {e}"));
        assert_eq!(resp.status(), 200, "{path}");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        let want = [2 * 65536, 65536, 0][i];
        assert!(
            want == 0 || body.len() == want,
            "{path}: {} bytes",
            body.len()
        );
    }
}
