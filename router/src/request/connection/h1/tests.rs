//! The router's own HTTP/1.1 path against hyper's server: heads it takes are read
//! whole at any split, heads it does not take are left to hyper, and its response
//! heads are byte for byte what hyper writes for the same response.

use std::convert::Infallible;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::BodyExt as _;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::head::{self, HeadLimits, Parsed};
use crate::request::phases::headers::head_by_name;
use h1_codec::encode::response::{BodyLength, DateCache, Encoder, ToWrite, encode_head};
use h1_codec::framing::{Framing, POISON};

/// [`encode_head`] for `parts` as the router calls it (the member's reason
/// phrase from hyper's extension).
fn written(
    parts: &http::response::Parts,
    (member, request_id): (Option<&h1_codec::fields::Fields>, Option<&[u8]>),
    method: &http::Method,
    body: BodyLength,
    out: &mut Vec<u8>,
) -> h1_codec::encode::response::Head {
    let reason = parts.extensions.get::<hyper::ext::ReasonPhrase>();
    let to_write = ToWrite {
        parts,
        reason: reason.map(|r| r.as_bytes()),
        member,
        added: b"",
        request_id,
        method,
        body,
    };
    encode_head(&to_write, &mut DateCache::default(), out)
}

const LIMITS: HeadLimits = HeadLimits {
    max_bytes: 8192,
    max_headers: 100,
    max_body: 16384,
};

fn parse(bytes: &[u8]) -> Parsed {
    parse_with(bytes, &LIMITS)
}

/// What the own path sees of `bytes`: the framing reader's report and, after a cut,
/// the poison in place of the rest.
fn parse_with(bytes: &[u8], limits: &HeadLimits) -> Parsed {
    parse_seen(bytes, limits).0
}

/// [`parse_with`], and what it left in the buffer.
fn parse_seen(bytes: &[u8], limits: &HeadLimits) -> (Parsed, BytesMut) {
    let mut framing = Framing::new();
    let seen = match framing.feed(bytes) {
        Some((at, _)) => [&bytes[..at], POISON].concat(),
        None => bytes.to_vec(),
    };
    let mut buf = BytesMut::from(&seen[..]);
    let parsed = head::parse(&mut buf, limits, framing.head_at(0));
    (parsed, buf)
}

fn is_other(bytes: &[u8]) -> bool {
    matches!(parse(bytes), Parsed::Other)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// A request this path takes is `Partial` at every prefix short of its head and
    /// read whole, with its body's length, once the head is there, whatever
    /// follows it.
    #[test]
    fn a_simple_request_is_partial_then_whole_at_any_split(
        path in "/[a-z0-9/?=&.-]{0,40}",
        names in proptest::collection::vec("x-[a-z]{1,12}", 0..8),
        body in proptest::collection::vec(any::<u8>(), 0..64),
        next in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let mut bytes = format!("POST {path} HTTP/1.1\r\nHost: app.example.com\r\n");
        for (i, n) in names.iter().enumerate() {
            bytes.push_str(&format!("{n}: value {i}\r\n"));
        }
        if !body.is_empty() {
            bytes.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        bytes.push_str("\r\n");
        let head_len = bytes.len();
        let mut all = bytes.into_bytes();
        all.extend_from_slice(&body);
        all.extend_from_slice(&next);
        for cut in 0..head_len {
            prop_assert!(matches!(parse(&all[..cut]), Parsed::Partial), "prefix of {cut} bytes");
        }
        match parse(&all) {
            Parsed::Request { head, body: taken, parts, fields } => {
                prop_assert_eq!(head, head_len);
                prop_assert_eq!(&taken[..], &body[..]);
                prop_assert_eq!(&parts.method, &Method::POST);
                prop_assert_eq!(parts.uri.path_and_query().map(|p| p.as_str()), Some(path.as_str()));
                prop_assert!(parts.headers.is_empty(), "the fields are not in a map");
                let got: Vec<&[u8]> = fields.iter().map(|(n, _)| n).collect();
                prop_assert!(got.first().is_some_and(|n| n.eq_ignore_ascii_case(b"host")));
                for (i, n) in names.iter().enumerate() {
                    let want = format!("value {i}");
                    let found = fields.iter().any(|(name, v)| name.eq_ignore_ascii_case(n.as_bytes()) && v == want.as_bytes());
                    prop_assert!(found, "{} missing", n);
                }
                // What follows the request stays in the buffer, as the
                // framing reader passed it on.
                let (_, rest) = parse_seen(&all, &LIMITS);
                let mut framing = Framing::new();
                if framing.feed(&all).is_none() {
                    prop_assert_eq!(&rest[..], &next[..]);
                } else {
                    prop_assert!(rest.ends_with(POISON));
                }
            }
            other => prop_assert!(false, "not taken: {:?}", other),
        }
    }

    /// Arbitrary bytes never panic the head reader, and whatever it takes is a
    /// head httparse reads the same way.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&bytes);
    }
}

#[test]
fn every_other_shape_is_left_to_hyper() {
    let shapes: &[&[u8]] = &[
        b"GET / HTTP/1.0\r\nHost: a\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999\r\n\r\n",
        b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
    ];
    for shape in shapes {
        assert!(is_other(shape), "{:?}", String::from_utf8_lossy(shape));
    }
    // Over the limits: hyper answers 431 by its own limits.
    let many: String = (0..10).map(|i| format!("x-{i}: v\r\n")).collect();
    let req = format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n");
    let few = HeadLimits {
        max_headers: 5,
        ..LIMITS
    };
    assert!(matches!(parse_with(req.as_bytes(), &few), Parsed::Other));
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nx-big: {}\r\n\r\n",
        "v".repeat(9000)
    );
    assert!(is_other(big.as_bytes()));
    // Still partial but already too large.
    assert!(is_other(&big.as_bytes()[..8500]));
}

#[test]
fn a_repeated_or_listed_length_of_equal_values_is_taken_as_framed() {
    // The framing reader's one rule: equal values are one length (RFC 9110 §8.6).
    for req in [
        &b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc"[..],
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc",
    ] {
        assert!(matches!(parse(req), Parsed::Request { ref body, .. } if body.len() == 3));
    }
}

#[test]
fn a_head_the_framing_reader_did_not_report_is_left_to_hyper() {
    let req = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
    assert!(matches!(parse(req), Parsed::Request { .. }));
    assert!(matches!(
        head::parse(&mut BytesMut::from(&req[..]), &LIMITS, None),
        Parsed::Other
    ));
    // A report of another head (a shorter one) is a disagreement too.
    let mut framing = Framing::new();
    assert_eq!(framing.feed(b"GET / HTTP/1.1\r\n\r\n"), None);
    assert!(matches!(
        head::parse(&mut BytesMut::from(&req[..]), &LIMITS, framing.head_at(0)),
        Parsed::Other
    ));
}

#[test]
fn a_kept_alive_request_is_taken() {
    let req = b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive\r\n\r\n";
    assert!(matches!(parse(req), Parsed::Request { ref body, .. } if body.is_empty()));
}

/// What hyper's HTTP/1.1 server writes as the head of `response` to a `method`
/// request (up to the empty line).
async fn hyper_head(method: &Method, response: Response<TestBody>) -> Vec<u8> {
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let cell = std::sync::Mutex::new(Some(response));
    let service = hyper::service::service_fn(move |_req| {
        let r = cell.lock().ok().and_then(|mut c| c.take());
        async move { r.ok_or(std::io::Error::other("once")) }
    });
    let conn = tokio::spawn(
        hyper::server::conn::http1::Builder::new()
            .serve_connection(hyper_util::rt::TokioIo::new(server), service),
    );
    client
        .write_all(format!("{method} / HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client.read(&mut chunk).await.expect("read");
        assert!(n > 0, "hyper closed before a head");
        got.extend_from_slice(&chunk[..n]);
    }
    conn.abort();
    let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(0) + 4;
    got.truncate(end);
    got
}

type TestBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn body(kind: BodyLength) -> TestBody {
    match kind {
        BodyLength::None => http_body_util::Empty::new().boxed(),
        BodyLength::Known(_) => http_body_util::Full::new(Bytes::from_static(b"hello")).boxed(),
        BodyLength::Unknown => {
            http_body_util::StreamBody::new(futures_util::stream::iter([Ok::<_, Infallible>(
                hyper::body::Frame::data(Bytes::from_static(b"hello")),
            )]))
            .boxed()
        }
    }
}

/// Drops the `date` line (its value is the second it was written).
fn without_date(head: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    text.split("\r\n")
        .filter(|l| !l.starts_with("date: "))
        .collect::<Vec<_>>()
        .join("\r\n")
        .into_bytes()
}

#[tokio::test]
async fn response_heads_are_what_hyper_writes() {
    let statuses = [200u16, 201, 204, 301, 304, 404, 503, 299];
    let methods = [Method::GET, Method::HEAD, Method::POST];
    let kinds = [BodyLength::None, BodyLength::Known(5), BodyLength::Unknown];
    type Headers = &'static [(&'static str, &'static str)];
    let header_sets: &[Headers] = &[
        &[],
        &[
            ("x-custom", "1"),
            ("set-cookie", "a=1"),
            ("set-cookie", "b=2"),
        ],
        &[("connection", "close")],
        &[("connection", "keep-alive"), ("x-after", "z")],
        &[("trailer", "x-check"), ("content-type", "text/plain")],
        &[("date", "Tue, 24 Nov 2026 10:00:00 GMT")],
        &[("content-length", "5")],
        &[("transfer-encoding", "gzip")],
        // Repeated names apart from each other: one pass over the map writes them
        // as hyper does (a list field joined, others one line per value).
        &[
            ("set-cookie", "a=1"),
            ("x-mid", "m"),
            ("set-cookie", "b=2"),
            ("transfer-encoding", "gzip"),
            ("connection", "keep-alive"),
            ("transfer-encoding", "chunked"),
            ("connection", "close"),
            ("trailer", "x-a"),
            ("x-last", "l"),
            ("trailer", "x-b"),
        ],
    ];
    let mut checked = 0;
    for status in statuses {
        for method in &methods {
            for kind in kinds {
                for headers in header_sets {
                    let has_len = headers.iter().any(|(n, _)| *n == "content-length");
                    // hyper asserts (debug builds) that a length header matches
                    // the body it was given; members' lengths always do.
                    if has_len && kind != BodyLength::Known(5) {
                        continue;
                    }
                    for reason in [None, Some("Fine")] {
                        let mut r = Response::new(());
                        *r.status_mut() = StatusCode::from_u16(status).expect("status");
                        for (n, v) in headers.iter() {
                            r.headers_mut().append(*n, HeaderValue::from_static(v));
                        }
                        if let Some(reason) = reason {
                            r.extensions_mut()
                                .insert(hyper::ext::ReasonPhrase::from_static(reason.as_bytes()));
                        }
                        let (parts, ()) = r.into_parts();
                        let mut ours = Vec::new();
                        let _ = written(&parts, (None, None), method, kind, &mut ours);
                        let theirs =
                            hyper_head(method, Response::from_parts(parts, body(kind))).await;
                        assert_eq!(
                            String::from_utf8_lossy(&without_date(&ours)),
                            String::from_utf8_lossy(&without_date(&theirs)),
                            "{status} {reason:?} to {method} with {kind:?} and {headers:?}"
                        );
                        assert!(ours.windows(6).any(|w| w == b"date: "), "a date line");
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 300, "{checked} cases");
}

#[test]
fn bodies_are_framed_by_their_encoder() {
    let mut out = Vec::new();
    let mut length = Encoder::Length(5);
    assert_eq!(
        length.data(&Bytes::from_static(b"hel"), &mut out),
        h1_codec::encode::response::Wrote::More
    );
    assert_eq!(
        length.data(&Bytes::from_static(b"lo!!"), &mut out),
        h1_codec::encode::response::Wrote::Done
    );
    assert!(length.end(None, &mut out));
    assert_eq!(out, b"hello");

    let mut out = Vec::new();
    let mut short = Encoder::Length(5);
    short.data(&Bytes::from_static(b"hel"), &mut out);
    assert!(!short.end(None, &mut out), "a body short of its length");

    let mut out = Vec::new();
    let allowed = vec![http::HeaderName::from_static("x-check")];
    let mut chunked = Encoder::Chunked(Some(allowed));
    chunked.data(&Bytes::from_static(b"hello"), &mut out);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-check", HeaderValue::from_static("ok"));
    trailers.insert("x-other", HeaderValue::from_static("dropped"));
    trailers.insert("content-type", HeaderValue::from_static("not a trailer"));
    assert!(chunked.end(Some(&trailers), &mut out));
    assert_eq!(out, b"5\r\nhello\r\n0\r\nx-check: ok\r\n\r\n");

    let mut out = Vec::new();
    let mut unannounced = Encoder::Chunked(None);
    assert!(unannounced.end(Some(&trailers), &mut out));
    assert_eq!(out, b"0\r\n\r\n");
}

/// One field of a member's response: a name (in any case) from those the writer
/// treats apart, and a value.
fn member_field() -> impl Strategy<Value = (String, String)> {
    let names = prop::sample::select(vec![
        "Content-Type",
        "x-a",
        "X-B",
        "Set-Cookie",
        "set-cookie",
        "Connection",
        "Keep-Alive",
        "Transfer-Encoding",
        "Trailer",
        "Date",
        "Alt-Svc",
        "Upgrade",
        "TE",
        "Proxy-Connection",
        "Host",
        "X-Forwarded-For",
    ]);
    let values = prop::sample::select(vec![
        "1",
        "v w",
        "x-a",
        "X-B, close",
        "keep-alive",
        "x-a, host",
        "chunked",
        "gzip",
        "x-b",
    ]);
    (names, values).prop_map(|(n, v)| (n.to_owned(), v.to_owned()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// A member's fields written as they came (the own path) say what the map
    /// of them hyper gets says (`member_map`), written by the same encoder:
    /// the same status line, framing, connection end, and each name's values,
    /// with the router's additions in place.
    #[test]
    fn a_members_fields_written_as_they_came_say_what_their_map_says(
        fields in prop::collection::vec(member_field(), 0..10),
        length in prop::option::of(0u64..20),
        cookie in any::<bool>(),
        close in any::<bool>(),
        alt_svc in any::<bool>(),
        method in prop::sample::select(vec![Method::GET, Method::HEAD]),
        status in prop::sample::select(vec![200u16, 204, 304, 404]),
        kind in prop::sample::select(vec![BodyLength::None, BodyLength::Known(5), BodyLength::Unknown]),
    ) {
        let mut head = format!("HTTP/1.1 {status} X\r\n");
        for (n, v) in &fields {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        if let Some(n) = length {
            head.push_str(&format!("Content-Length: {n}\r\n"));
        }
        head.push_str("\r\n");
        let member = h1_codec::fields::Fields::of_head(head.as_bytes()).expect("a whole head");
        let mut added = http::HeaderMap::new();
        if cookie {
            added.append(http::header::SET_COOKIE, HeaderValue::from_static("route=1"));
        }
        if close {
            added.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        if alt_svc {
            added.insert(http::header::ALT_SVC, HeaderValue::from_static("h3=\":443\""));
        }
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).expect("status");
        let (mut parts, ()) = response.into_parts();
        parts.headers = added.clone();
        let mut raw = Vec::new();
        // The request's ID: written after the fields on the own path, in the
        // map on the other.
        let id = HeaderValue::from_static("0123456789abcdef0123456789abcdef");
        let raw_head = written(&parts, (Some(&member), Some(id.as_bytes())), &method, kind, &mut raw);
        let mut map = added;
        h1_codec::hop::member_map(&member, &mut map);
        map.insert("x-request-id", id);
        parts.headers = map;
        let mut mapped = Vec::new();
        let map_head = written(&parts, (None, None), &method, kind, &mut mapped);
        prop_assert_eq!(head_by_name(&without_date(&raw)), head_by_name(&without_date(&mapped)));
        prop_assert_eq!(raw_head.encoder, map_head.encoder);
        prop_assert_eq!(raw_head.last, map_head.last);
    }
}
