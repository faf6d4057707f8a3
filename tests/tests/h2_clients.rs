//! h2 clients of the router (its own h2 server, `request/connection/h2/`)
//! through real clients and raw frames: request bodies with and without a
//! declared length, the keep-alive PING (`limits.h2_keepalive_*`: answered,
//! the connection stays; not answered, it is closed), a client's resets
//! mid-response leaving the router serving, and `100 Continue`.

use std::time::Duration;

use bytes::Bytes;
use e2e::backend::{Backend, Echo};
use e2e::{TestRouter, events};
use http::Request;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HA: &str = "ha-myapp-demo.example.com";

async fn router_with_backend(extra: &str) -> (TestRouter, Backend) {
    let backend = Backend::start().await;
    let r = TestRouter::start(extra).await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", backend.addr));
    r.wait_route(HA).await;
    (r, backend)
}

/// An h2 client (prior knowledge; hyper's client answers PINGs).
async fn h2_client(
    r: &TestRouter,
) -> hyper::client::conn::http2::SendRequest<
    http_body_util::combinators::BoxBody<Bytes, std::io::Error>,
> {
    let tcp = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    send
}

#[tokio::test]
async fn h2_request_bodies_reach_the_member_with_and_without_a_declared_length() {
    let (r, _b) = router_with_backend("").await;
    let mut send = h2_client(&r).await;
    let body = vec![b'x'; 300 * 1024];
    // Declared: the member gets the client's Content-Length.
    let req = Request::post(format!("http://{HA}/declared"))
        .header("content-length", body.len())
        .body(
            Full::new(Bytes::from(body.clone()))
                .map_err(|e| match e {})
                .boxed(),
        )
        .expect("req");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let echo = Echo::parse(&resp.into_body().collect().await.expect("body").to_bytes());
    assert_eq!(echo.body_len, body.len() as u64);
    assert_eq!(echo.all("content-length"), [body.len().to_string()]);
    // Not declared, in pieces larger than the initial window's share: the
    // router gives the window back as it reads, and frames the body itself.
    let pieces: Vec<Result<hyper::body::Frame<Bytes>, std::io::Error>> = (0..10)
        .map(|_| {
            Ok(hyper::body::Frame::data(Bytes::from(vec![
                b'y';
                200 * 1024
            ])))
        })
        .collect();
    let req = Request::post(format!("http://{HA}/streamed"))
        .body(StreamBody::new(futures_util::stream::iter(pieces)).boxed())
        .expect("req");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let echo = Echo::parse(&resp.into_body().collect().await.expect("body").to_bytes());
    assert_eq!(echo.body_len, 10 * 200 * 1024);
}

/// One h2 frame: (type, flags, stream, payload).
type H2Frame = (u8, u8, u32, Vec<u8>);

/// The next frame on `s`, or `None` once the router closed it.
async fn read_frame(s: &mut tokio::net::TcpStream) -> Option<H2Frame> {
    let mut head = [0u8; 9];
    s.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).await.ok()?;
    Some((head[3], head[4], stream, payload))
}

const SETTINGS: u8 = 4;
const PING: u8 = 6;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const ACK: u8 = 1;
/// The client preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// A router that PINGs every second (1 s to answer), and a raw connection to
/// it that has sent the preface and an empty SETTINGS.
async fn pinged_connection() -> (TestRouter, Backend, tokio::net::TcpStream) {
    let (r, b) = router_with_backend(
        "limits:\n  h2_keepalive_interval: 1s\n  h2_keepalive_timeout: 1s\n  idle_timeout: 60s\n",
    )
    .await;
    let mut s = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    s.write_all(PREFACE).await.expect("write");
    (r, b, s)
}

#[tokio::test]
async fn an_h2_client_that_answers_pings_keeps_its_connection() {
    let (_r, _b, mut s) = pinged_connection().await;
    // Three PINGs, each answered (and the router's SETTINGS acknowledged).
    let three = async {
        let mut pings = 0;
        while pings < 3 {
            let (kind, flags, _, payload) = read_frame(&mut s)
                .await
                .expect("the connection stays open while PINGs are answered");
            if kind == SETTINGS && flags & ACK == 0 {
                s.write_all(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
                    .await
                    .expect("settings ack");
            }
            if kind == PING && flags & ACK == 0 {
                pings += 1;
                let mut pong = vec![0, 0, 8, PING, ACK, 0, 0, 0, 0];
                pong.extend_from_slice(&payload);
                s.write_all(&pong).await.expect("pong");
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), three)
        .await
        .expect("a PING every limits.h2_keepalive_interval");
    // Then a request on it: GET / for the app (HPACK: :method GET, :scheme
    // http, :path /, :authority as a literal), END_STREAM | END_HEADERS.
    let mut block = b"\x82\x86\x84\x01".to_vec();
    block.push(HA.len() as u8);
    block.extend_from_slice(HA.as_bytes());
    let mut frame = vec![0, 0, block.len() as u8, HEADERS, 0x05, 0, 0, 0, 1];
    frame.extend_from_slice(&block);
    s.write_all(&frame).await.expect("request");
    loop {
        let (kind, _, stream, payload) = read_frame(&mut s).await.expect("an answer");
        if kind == HEADERS && stream == 1 {
            // `:status 200` is entry 8 of HPACK's static table.
            assert_eq!(payload.first(), Some(&0x88), "200 after the PINGs");
            break;
        }
    }
}

#[tokio::test]
async fn an_h2_client_that_never_answers_a_ping_is_closed() {
    // Then silence (no SETTINGS ACK, no PONG).
    let (_r, _b, mut s) = pinged_connection().await;
    let types = tokio::time::timeout(Duration::from_secs(30), async {
        let mut types = Vec::new();
        while let Some((kind, ..)) = read_frame(&mut s).await {
            types.push(kind);
        }
        types
    })
    .await
    .expect("the router closes a connection whose PING is not answered");
    assert!(types.contains(&PING), "a PING came first: {types:?}");
}

#[tokio::test]
async fn a_client_reset_mid_response_leaves_the_router_serving() {
    let (r, _b) = router_with_backend("").await;
    let mut send = h2_client(&r).await;
    for i in 0..20 {
        let req = Request::get(format!("http://{HA}/stream?chunks=32&n={i}"))
            .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
            .expect("req");
        let resp = send.send_request(req).await.expect("response");
        // Dropped unread: hyper's client resets the stream.
        drop(resp);
    }
    let req = Request::get(format!("http://{HA}/after"))
        .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
        .expect("req");
    let resp = send
        .send_request(req)
        .await
        .expect("response after the resets");
    assert_eq!(resp.status(), 200);
    assert_eq!(r.get(HA, "/plain").await.0, 200);
}

/// The status of the next HEADERS on stream 1 (`None`: the connection ended
/// first): `:status 200` indexed, any other as the literal the router
/// writes (name 8, three digits).
async fn head_status(s: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    loop {
        let (kind, _, stream, payload) = read_frame(s).await?;
        if kind == HEADERS && stream == 1 {
            return Some(match payload.first() {
                Some(&0x88) => b"200".to_vec(),
                Some(&0x08) => payload.get(2..5).unwrap_or_default().to_vec(),
                _ => payload,
            });
        }
    }
}

/// The preface, then stream 1's HEADERS (END_HEADERS only, its body to
/// come): `:method POST`, `:scheme http`, `:path /`, `:authority` (literal),
/// then `fields`, an HPACK block of the caller's.
async fn post_head(s: &mut tokio::net::TcpStream, fields: &[u8]) {
    s.write_all(PREFACE).await.expect("write");
    let mut block = b"\x83\x86\x84\x01".to_vec();
    block.push(HA.len() as u8);
    block.extend_from_slice(HA.as_bytes());
    block.extend_from_slice(fields);
    let mut frame = vec![0, 0, block.len() as u8, HEADERS, 0x04, 0, 0, 0, 1];
    frame.extend_from_slice(&block);
    s.write_all(&frame).await.expect("request head");
}

/// A client that asks for `100 Continue` gets it at once (the router reads a
/// body ahead of the member), then the answer once its body came.
#[tokio::test]
async fn an_h2_client_expecting_100_continue_gets_it_before_sending_its_body() {
    let (r, _b) = router_with_backend("").await;
    let mut s = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    // `expect: 100-continue` and `content-length: 3` on the static table's
    // names (35, 28): the body is to come.
    post_head(&mut s, b"\x0f\x14\x0c100-continue\x0f\x0d\x013").await;
    let continued = tokio::time::timeout(Duration::from_secs(10), head_status(&mut s))
        .await
        .expect("an answer before the body, within 10 s");
    assert_eq!(
        continued.as_deref(),
        Some(&b"100"[..]),
        "100 Continue first"
    );
    // DATA "abc" with END_STREAM: the member's answer follows.
    s.write_all(b"\x00\x00\x03\x00\x01\x00\x00\x00\x01abc")
        .await
        .expect("body");
    let answer = tokio::time::timeout(Duration::from_secs(10), head_status(&mut s))
        .await
        .expect("the member's answer within 10 s");
    assert_eq!(answer.as_deref(), Some(&b"200"[..]));
}

/// Responses larger than the client's windows (eight streams of 2 MiB at
/// once, 16 MiB through hyper's client windows) arrive whole: the router
/// sends what the windows let and goes on as the client opens them. No
/// keep-alive PING in the test's time: a send that stalls stays stalled
/// (one did, until the PING 30 s later woke the connection).
#[tokio::test]
async fn large_responses_at_once_come_whole_through_the_clients_windows() {
    let (r, _b) = router_with_backend("limits:\n  h2_keepalive_interval: 1h\n").await;
    let send = h2_client(&r).await;
    let mut all = Vec::new();
    for i in 0..8 {
        let mut send = send.clone();
        all.push(tokio::spawn(async move {
            let req = Request::get(format!("http://{HA}/stream?chunks=32&n={i}"))
                .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
                .expect("req");
            let resp = send.send_request(req).await.expect("response");
            assert_eq!(resp.status(), 200);
            resp.into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes()
                .len()
        }));
    }
    for task in all {
        // 0.1 s here on the debug build; a stalled send waits for whatever
        // wakes the connection next (10 s and 30 s were seen).
        let got = tokio::time::timeout(Duration::from_secs(8), task)
            .await
            .expect("every response within 8 s (else the router's sending stalled)")
            .expect("join");
        assert_eq!(got, 32 * 64 * 1024, "a whole 2 MiB body");
    }
}

/// A `Content-Length` the one rule refuses (a sign) makes the request
/// malformed: its stream is reset with PROTOCOL_ERROR (RFC 9113 §8.1.1),
/// and the connection serves on.
#[tokio::test]
async fn a_signed_content_length_resets_the_stream() {
    let (r, b) = router_with_backend("").await;
    let hits = b.hits();
    let mut s = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    // `content-length: +3` (static name 28).
    post_head(&mut s, b"\x0f\x0d\x02+3").await;
    let reset = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (kind, _, stream, payload) = read_frame(&mut s).await?;
            if kind == RST_STREAM && stream == 1 {
                return Some(payload);
            }
            assert_ne!(kind, HEADERS, "no answer to a malformed request");
        }
    })
    .await
    .expect("a reset within 10 s");
    assert_eq!(reset.as_deref(), Some(&[0, 0, 0, 1][..]), "PROTOCOL_ERROR");
    assert_eq!(b.hits(), hits, "the member saw nothing");
}
