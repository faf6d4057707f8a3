//! Request smuggling: every shape in the table of `docs/routing.md` gets 400 from the router, and
//! the member never sees a request hidden in the body (so a proxy in front of the
//! router and the member behind it cannot disagree on where a request ends).

use std::time::Duration;

use e2e::{Backend, TestRouter, events, raw};

const HA: &str = "ha-myapp-demo.example.com";

async fn router_with_backend() -> (TestRouter, Backend) {
    TestRouter::with_backend("health:\n  checks: false\n").await
}

/// A request with `headers` (CRLF-terminated lines) and `body`, whose body carries a
/// second, smuggled request.
fn shape(headers: &str, body: &str) -> String {
    format!("POST / HTTP/1.1\r\nHost: {HA}\r\n{headers}\r\n{body}")
}

const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: ha-myapp-demo.example.com\r\n\r\n";

/// (name, request) for every shape of that table.
fn shapes() -> Vec<(&'static str, String)> {
    let chunked_then = |size_line: &str| format!("{size_line}\r\nhello\r\n0\r\n\r\n{SMUGGLED}");
    vec![
        (
            "CL and TE together",
            shape(
                "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                &format!("0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "TE and CL together",
            shape(
                "Transfer-Encoding: chunked\r\nContent-Length: 40\r\n",
                &format!("0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "two Content-Length values",
            shape("Content-Length: 0\r\nContent-Length: 57\r\n", SMUGGLED),
        ),
        (
            "two values in one Content-Length",
            shape("Content-Length: 0, 57\r\n", SMUGGLED),
        ),
        (
            "Content-Length with a sign",
            shape("Content-Length: +0\r\n", SMUGGLED),
        ),
        (
            "obfuscated TE: xchunked",
            shape(
                "Transfer-Encoding: xchunked\r\n",
                &format!("0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "obfuscated TE: chunked not last",
            shape(
                "Transfer-Encoding: chunked, identity\r\n",
                &format!("0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "obfuscated TE: identity",
            shape("Transfer-Encoding: identity\r\n", SMUGGLED),
        ),
        (
            "obfuscated TE: space before the colon",
            shape(
                "Transfer-Encoding : chunked\r\nContent-Length: 5\r\n",
                &format!("0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "obfuscated TE: vertical tab",
            shape(
                "Transfer-Encoding:\x0bchunked\r\nContent-Length: 5\r\n",
                &format!("0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "obfuscated TE: two headers, chunked twice",
            shape(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                &format!("0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "obfuscated TE: folded line",
            shape(
                "Transfer-Encoding:\r\n chunked\r\nContent-Length: 5\r\n",
                &format!("0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "bare LF in the head",
            format!("POST / HTTP/1.1\nHost: {HA}\nContent-Length: 0\n\n{SMUGGLED}"),
        ),
        (
            "bare LF after a chunk size",
            shape(
                "Transfer-Encoding: chunked\r\n",
                &format!("5\nhello\r\n0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "bare LF after the last chunk",
            shape(
                "Transfer-Encoding: chunked\r\n",
                &format!("0\n\n{SMUGGLED}"),
            ),
        ),
        (
            "bad chunk size: negative",
            shape("Transfer-Encoding: chunked\r\n", &chunked_then("-5")),
        ),
        (
            "bad chunk size: 0x prefix",
            shape("Transfer-Encoding: chunked\r\n", &chunked_then("0x5")),
        ),
        (
            "bad chunk size: overflow",
            shape(
                "Transfer-Encoding: chunked\r\n",
                &chunked_then("10000000000000005"),
            ),
        ),
        (
            "bad chunk size: underscore",
            shape("Transfer-Encoding: chunked\r\n", &chunked_then("0_5")),
        ),
        (
            "bad chunk size: space inside",
            shape("Transfer-Encoding: chunked\r\n", &chunked_then("0 5")),
        ),
        (
            "a control byte in a chunk extension",
            shape("Transfer-Encoding: chunked\r\n", &chunked_then("5;a=\x01")),
        ),
        (
            // The switch comes after the request: an upgrade request's own body
            // is held to the same framing (found by the `client_stream` fuzz target).
            "a control byte in a chunk extension of an upgrade request",
            shape(
                "Connection: upgrade\r\nUpgrade: websocket\r\nTransfer-Encoding: chunked\r\n",
                &chunked_then("5;a=\x01"),
            ),
        ),
        (
            "chunk data longer than its size",
            shape(
                "Transfer-Encoding: chunked\r\n",
                &format!("3\r\nhello\r\n0\r\n\r\n{SMUGGLED}"),
            ),
        ),
        (
            "a fragment in the request target",
            format!("GET /admin#/public HTTP/1.1\r\nHost: {HA}\r\n\r\n{SMUGGLED}"),
        ),
        (
            "a non-ASCII byte in the request target",
            format!("GET /caf\u{e9} HTTP/1.1\r\nHost: {HA}\r\n\r\n{SMUGGLED}"),
        ),
    ]
}

/// Sends one shape on a fresh connection after a valid request on the same
/// connection: the valid one is answered 200 first, the shape 400, nothing after
/// it, and the member sees only the valid one.
async fn refused(r: &TestRouter, b: &Backend, name: &str) {
    let (_, request) = shapes()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no shape {name}"));
    let before = b.proxied();
    let valid = format!("GET /first HTTP/1.1\r\nHost: {HA}\r\n\r\n");
    let resp = raw::exchange(
        r.http,
        format!("{valid}{request}").as_bytes(),
        Duration::from_secs(10),
    )
    .await;
    let text = String::from_utf8_lossy(&resp);
    let statuses: Vec<&str> = text
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &text[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, ["200", "400"], "{name}: {text}");
    assert_eq!(
        b.proxied() - before,
        1,
        "{name}: only the valid request reached the member"
    );
    assert!(!text.contains("/smuggled"), "{name}: {text}");
}

macro_rules! shape_tests {
    ($($test:ident => $name:literal,)*) => {
        $(
            #[tokio::test]
            async fn $test() {
                let (r, b) = router_with_backend().await;
                refused(&r, &b, $name).await;
            }
        )*

        /// The table above and the tests agree: every shape has its test.
        #[test]
        fn every_shape_has_a_test() {
            let tested = [$($name),*];
            for (name, _) in shapes() {
                assert!(tested.contains(&name), "no test for {name}");
            }
            assert_eq!(tested.len(), shapes().len());
        }
    };
}

shape_tests! {
    cl_and_te => "CL and TE together",
    te_and_cl => "TE and CL together",
    two_content_lengths => "two Content-Length values",
    two_values_in_one_content_length => "two values in one Content-Length",
    content_length_with_a_sign => "Content-Length with a sign",
    te_xchunked => "obfuscated TE: xchunked",
    te_chunked_not_last => "obfuscated TE: chunked not last",
    te_identity => "obfuscated TE: identity",
    te_space_before_colon => "obfuscated TE: space before the colon",
    te_vertical_tab => "obfuscated TE: vertical tab",
    te_chunked_twice => "obfuscated TE: two headers, chunked twice",
    te_folded => "obfuscated TE: folded line",
    bare_lf_in_head => "bare LF in the head",
    bare_lf_after_chunk_size => "bare LF after a chunk size",
    bare_lf_after_last_chunk => "bare LF after the last chunk",
    chunk_size_negative => "bad chunk size: negative",
    chunk_size_0x => "bad chunk size: 0x prefix",
    chunk_size_overflow => "bad chunk size: overflow",
    chunk_size_underscore => "bad chunk size: underscore",
    chunk_size_space => "bad chunk size: space inside",
    chunk_longer_than_size => "chunk data longer than its size",
    chunk_extension_control => "a control byte in a chunk extension",
    upgrade_chunk_extension_control => "a control byte in a chunk extension of an upgrade request",
    fragment_in_target => "a fragment in the request target",
    non_ascii_in_target => "a non-ASCII byte in the request target",
}

/// A request naming an upgrade the member does not make (or `Upgrade` without
/// `Connection: upgrade`, which hyper still treats as one) ends its connection
/// after the answer: the framing reader stops at an upgrade head (what follows may
/// be a tunnel), so a request after it would reach hyper unchecked. Found by the
/// `client_stream` fuzz target (a bare-LF request after a refused upgrade reached
/// the member).
#[tokio::test]
async fn nothing_follows_a_refused_upgrade() {
    let (r, b) = router_with_backend().await;
    for upgrade in [
        "Connection: Upgrade\r\nUpgrade: h2c\r\n",
        "Upgrade: websocket\r\n",
    ] {
        let request = format!(
            "GET /plain HTTP/1.1\r\nHost: {HA}\r\n{upgrade}\r\n\
             GET /smuggled HTTP/1.1\nHost: {HA}\n\n"
        );
        only_the_first_is_served(&r, &b, &request, upgrade).await;
    }
}

/// `request` (two pipelined) is answered once, 200 with `Connection: close`, and
/// only its first request reaches the member.
async fn only_the_first_is_served(r: &TestRouter, b: &Backend, request: &str, label: &str) {
    let before = b.proxied();
    let resp = raw::exchange(r.http, request.as_bytes(), Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 200"), "{label}: {text}");
    assert!(
        text.to_ascii_lowercase().contains("connection: close"),
        "{label}: {text}"
    );
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{label}: {text}");
    assert_eq!(
        b.proxied() - before,
        1,
        "{label}: only the first reached the member"
    );
}

/// A `close` beside a token with a byte outside ASCII still ends the connection
/// after its response: the request pipelined behind it never reaches the member
/// (hyper skips such a `Connection` value; found by the `client_stream` fuzz
/// target).
#[tokio::test]
async fn a_close_beside_a_non_ascii_token_ends_the_connection() {
    let (r, b) = router_with_backend().await;
    for connection in ["x-drop, cl\u{e9}se, close", "caf\u{e9}, close"] {
        let request = format!(
            "GET /plain HTTP/1.1\r\nHost: {HA}\r\nConnection: {connection}\r\n\r\n\
             GET /next HTTP/1.1\r\nHost: {HA}\r\n\r\n"
        );
        only_the_first_is_served(&r, &b, &request, connection).await;
    }
}

/// The same over TLS (HTTP/1.1 by ALPN): the HTTPS listener reads through the same
/// framing. And a WebSocket tunnel, whose bytes are not HTTP, is left alone.
#[tokio::test]
async fn over_tls_too_and_never_inside_a_tunnel() {
    use e2e::pki::{Ca, write_leaf};
    use e2e::tlsclient::{client_config, connect};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = e2e::tempdir("smuggling-tls");
    let ca = Ca::new("Smuggling CA");
    let (cert, key) = write_leaf(&dir, "wildcard", &ca.leaf(&["*.example.com"]));
    let backend = Backend::start().await;
    let r = TestRouter::start_https(
        dir.clone(),
        &format!(
            "tls:\n  default_cert: {}\n  default_key: {}\nhealth:\n  checks: false\n",
            cert.display(),
            key.display()
        ),
    )
    .await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", backend.addr));
    r.wait_route(HA).await;
    let https = r.https.expect("https listener");
    let config = client_config(&ca.pem, &[b"http/1.1"]);
    let before = backend.proxied();
    let mut s = connect(https, HA, &config).await.expect("handshake");
    let (_, bare_lf) = shapes()
        .into_iter()
        .find(|(n, _)| *n == "bare LF in the head")
        .expect("shape");
    s.write_all(bare_lf.as_bytes()).await.expect("write");
    let mut resp = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut resp)).await;
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
    assert_eq!(backend.proxied(), before, "nothing reached the member");

    // A WebSocket tunnel carries bare LFs and lookalike heads untouched (the
    // client's frames are masked: their bytes on the wire are anything at all).
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let tcp = tokio::net::TcpStream::connect(r.http)
        .await
        .expect("connect");
    let req = format!("ws://{HA}/chat")
        .into_client_request()
        .expect("request");
    let (mut ws, _) = tokio_tungstenite::client_async(req, tcp)
        .await
        .expect("upgrade");
    let payload: Vec<u8> =
        b"\n\nGET / HTTP/1.1\nHost: x\nContent-Length: 5\r\nTransfer-Encoding: chunked\n\n"
            .iter()
            .copied()
            .cycle()
            .take(8192)
            .collect();
    for _ in 0..4 {
        ws.send(Message::Binary(payload.clone().into()))
            .await
            .expect("send");
        match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
            Ok(Some(Ok(Message::Binary(echo)))) => assert_eq!(&echo[..], &payload[..]),
            other => panic!("no echo: {other:?}"),
        }
    }
}

/// A field name with `_` never reaches the member (`h1_codec::request`): CGI-style
/// apps read `Transfer_Encoding` as `Transfer-Encoding` and `X_Forwarded_For` as
/// `X-Forwarded-For`. The `underjoin1` shape of an external smuggling scanner,
/// `Transfer_Encoding: chunked` beside `Content-Length: 5`, reaches the member as
/// a request with five body bytes and no such field; the request pipelined behind
/// it is served on its own. Over HTTP/1.1 (the router's own path and hyper's) and h2.
#[tokio::test]
async fn field_names_with_an_underscore_never_reach_the_member() {
    let (r, b) = router_with_backend().await;
    let request = format!(
        "POST /first HTTP/1.1\r\nHost: {HA}\r\nTransfer_Encoding: chunked\r\nContent-Length: 5\r\n\
         X_Forwarded_For: 6.6.6.6\r\nX-Kept: yes\r\n\r\nhello\
         GET /second HTTP/1.1\r\nHost: {HA}\r\nConnection: close\r\n\r\n"
    );
    let before = b.proxied();
    let resp = raw::exchange(r.http, request.as_bytes(), Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&resp);
    let bodies: Vec<e2e::Echo> = text
        .split("HTTP/1.1 ")
        .skip(1)
        .map(|r| {
            assert!(r.starts_with("200"), "{text}");
            let body = r.split_once("\r\n\r\n").expect("head").1;
            let body = body.rsplit_once('}').map_or(body, |(b, _)| b).to_string() + "}";
            e2e::Echo::parse(body.as_bytes())
        })
        .collect();
    assert_eq!(bodies.len(), 2, "two answers: {text}");
    assert_eq!(b.proxied() - before, 2, "two requests reached the member");
    let first = &bodies[0];
    assert_eq!(first.target, "/first");
    assert_eq!(first.body_len, 5, "framed by its Content-Length: {first:?}");
    for name in ["transfer_encoding", "x_forwarded_for", "transfer-encoding"] {
        assert!(
            first.header(name).is_none(),
            "{name} reached the member: {first:?}"
        );
    }
    assert_eq!(first.header("x-kept"), Some("yes"), "other fields go on");
    assert_ne!(first.header("x-forwarded-for"), Some("6.6.6.6"));
    assert_eq!(bodies[1].target, "/second");

    for flag in ["--http1.1", "--http2-prior-knowledge"] {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", flag, "-H", &format!("Host: {HA}")])
            .args([
                "-H",
                "X_Forwarded_For: 6.6.6.6",
                "-H",
                "x_custom: 1",
                "-H",
                "X-Kept: yes",
            ])
            .arg(format!("http://{}/curl", r.http))
            .output()
            .await
            .expect("curl runs (apt-get install curl)");
        let echo = e2e::Echo::parse(&out.stdout);
        assert!(
            echo.header("x_forwarded_for").is_none() && echo.header("x_custom").is_none(),
            "{flag}: {echo:?}"
        );
        assert_eq!(echo.header("x-kept"), Some("yes"), "{flag}: {echo:?}");
    }
}
