use std::io::Read;

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use http_body_util::BodyExt;

use super::*;

/// The router's response body in miniature: whole bytes, or compressed.
enum TestBody {
    Full(Option<Bytes>),
    Compressed(Box<Compressing<TestBody>>),
}

impl TestBody {
    fn full(bytes: Vec<u8>) -> TestBody {
        TestBody::Full(Some(Bytes::from(bytes)))
    }
}

impl Body for TestBody {
    type Data = Bytes;
    type Error = encode::BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, encode::BodyError>>> {
        match self.get_mut() {
            TestBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            TestBody::Compressed(c) => c.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            TestBody::Full(bytes) => bytes.is_none(),
            TestBody::Compressed(c) => c.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            TestBody::Full(Some(b)) => http_body::SizeHint::with_exact(b.len() as u64),
            TestBody::Full(None) => http_body::SizeHint::with_exact(0),
            TestBody::Compressed(c) => c.size_hint(),
        }
    }
}

impl Compressible for TestBody {
    fn empty() -> TestBody {
        TestBody::Full(None)
    }

    fn compressed(compressing: Compressing<TestBody>) -> TestBody {
        TestBody::Compressed(Box::new(compressing))
    }
}

fn coding(v: &str) -> Option<Coding> {
    negotiate(std::iter::once(v.as_bytes()))
}

#[test]
fn the_clients_q_values_choose_and_ties_go_to_the_routers_preference() {
    assert_eq!(coding("gzip, deflate, br, zstd"), Some(Coding::Zstd));
    assert_eq!(coding("gzip, deflate, br"), Some(Coding::Brotli));
    assert_eq!(coding("gzip"), Some(Coding::Gzip));
    assert_eq!(coding("x-gzip"), Some(Coding::Gzip));
    assert_eq!(
        coding("gzip;q=1.0, br;q=0.5, zstd;q=0.8"),
        Some(Coding::Gzip)
    );
    assert_eq!(coding("br;q=0, gzip;q=0.1"), Some(Coding::Gzip));
    assert_eq!(coding("*"), Some(Coding::Zstd));
    assert_eq!(coding("*;q=0.5, zstd;q=0"), Some(Coding::Brotli));
    assert_eq!(coding("gzip;q=0, *;q=0"), None);
    assert_eq!(coding("identity"), None);
    assert_eq!(coding(""), None);
    assert_eq!(coding("deflate, compress"), None);
    assert_eq!(coding("GZIP ; Q=0.3"), Some(Coding::Gzip));
    // An invalid q-value drops its element only.
    assert_eq!(coding("br;q=2, gzip"), Some(Coding::Gzip));
    assert_eq!(coding("br;q=abc"), None);
    // Several field lines count as one list.
    let lines = [&b"gzip;q=0.2"[..], b"br;q=0.9"];
    assert_eq!(negotiate(lines.into_iter()), Some(Coding::Brotli));
}

#[test]
fn head_http10_and_ranges_ask_for_nothing() {
    let req = |method: Method, version: Version, range: bool| {
        let mut b = Request::builder()
            .method(method)
            .version(version)
            .header("accept-encoding", "gzip");
        if range {
            b = b.header("range", "bytes=0-10");
        }
        let req = b.body(()).expect("request");
        Asked::of(&req, FieldsRef::Map(req.headers()))
    };
    assert_eq!(
        req(Method::GET, Version::HTTP_11, false),
        Asked(Some(Coding::Gzip))
    );
    assert_eq!(
        req(Method::GET, Version::HTTP_2, false),
        Asked(Some(Coding::Gzip))
    );
    assert_eq!(req(Method::HEAD, Version::HTTP_11, false), Asked(None));
    assert_eq!(req(Method::GET, Version::HTTP_10, false), Asked(None));
    assert_eq!(req(Method::GET, Version::HTTP_11, true), Asked(None));
}

fn response(fields: &[(&str, &str)], body: Vec<u8>) -> Response<TestBody> {
    let mut b = Response::builder().status(200);
    for (n, v) in fields {
        b = b.header(*n, *v);
    }
    b.body(TestBody::full(body)).expect("response")
}

/// Client number `n`'s key.
fn client(n: u8) -> ClientKey {
    per_source::KeyRule::default().key(std::net::IpAddr::from([192, 0, 2, n]))
}

fn text(n: usize) -> Vec<u8> {
    let line = b"<p>the quick brown fox jumps over the lazy dog</p>\n";
    (0..n).map(|i| line[i % line.len()]).collect()
}

async fn collected(r: Response<TestBody>) -> Vec<u8> {
    r.into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
        .to_vec()
}

fn decoded(coding: Coding, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        Coding::Gzip => flate2::read::GzDecoder::new(bytes).read_to_end(&mut out),
        Coding::Brotli => brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out),
        Coding::Zstd => {
            zstd::stream::read::Decoder::new(bytes).and_then(|mut d| d.read_to_end(&mut out))
        }
    }
    .expect("decodes");
    out
}

#[tokio::test]
async fn each_coding_streams_what_decodes_to_the_members_bytes() {
    let c = Compression::detached(CompressionConfig::default());
    let body = text(200_000);
    for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
        let mut r = response(
            &[
                ("content-type", "text/html; charset=utf-8"),
                ("content-length", "200000"),
                ("etag", "\"v1\""),
                ("vary", "Cookie"),
            ],
            body.clone(),
        );
        c.apply((Asked(Some(coding)), client(1)), &mut r, &mut None);
        let h = r.headers();
        assert_eq!(h["content-encoding"], coding.token());
        assert!(h.get("content-length").is_none());
        assert_eq!(h["vary"], "Cookie, Accept-Encoding");
        assert_eq!(h["etag"], "W/\"v1\"");
        let sent = collected(r).await;
        assert!(
            sent.len() < body.len() / 5,
            "{coding:?}: {} bytes",
            sent.len()
        );
        assert!(
            decoded(coding, &sent) == body,
            "{coding:?}: the member's bytes"
        );
    }
}

#[tokio::test]
async fn what_is_not_worth_it_passes_untouched() {
    let c = Compression::detached(CompressionConfig::default());
    let gzip = (Asked(Some(Coding::Gzip)), client(1));
    /// A response's fields, its length, and whether it is compressed.
    type Case<'a> = (&'a [(&'a str, &'a str)], usize, bool);
    let cases: [Case; 7] = [
        (&[("content-type", "image/png")], 5000, false),
        (
            &[("content-type", "text/html"), ("content-encoding", "br")],
            5000,
            false,
        ),
        (&[("content-type", "text/html")], 100, false),
        (
            &[
                ("content-type", "application/json"),
                ("cache-control", "public, no-transform"),
            ],
            5000,
            false,
        ),
        (
            &[
                ("content-type", "text/css"),
                ("content-range", "bytes 0-4999/9000"),
            ],
            5000,
            false,
        ),
        (&[("content-type", "text/html"), ("vary", "*")], 5000, true),
        (&[("content-type", "application/activity+json")], 5000, true),
    ];
    for (i, (fields, len, compressed)) in cases.into_iter().enumerate() {
        let body = text(len);
        let mut r = response(fields, body.clone());
        c.apply(gzip, &mut r, &mut None);
        let encoded = r
            .headers()
            .get("content-encoding")
            .map(|v| v.as_bytes().to_vec());
        if compressed && len >= 1024 {
            assert_eq!(encoded.as_deref(), Some(&b"gzip"[..]), "case {i}");
            continue;
        }
        let vary = r.headers().get("vary").cloned();
        assert!(collected(r).await == body, "case {i}: untouched");
        if compressed {
            // Too short to compress, but a longer one of its kind would be.
            assert_eq!(
                vary.as_ref().map(|v| v.as_bytes()),
                Some(&b"Accept-Encoding"[..]),
                "case {i}"
            );
        }
    }
    // A client that takes no coding still gets Vary on what could be compressed.
    let mut r = response(&[("content-type", "text/html")], text(5000));
    c.apply((Asked(None), client(1)), &mut r, &mut None);
    assert_eq!(r.headers()["vary"], "Accept-Encoding");
    assert!(r.headers().get("content-encoding").is_none());
}

#[tokio::test]
async fn beyond_max_streams_responses_go_uncompressed() {
    let c = Compression::detached(CompressionConfig {
        max_streams: 1,
        ..CompressionConfig::default()
    });
    let html = [("content-type", "text/html")];
    let mut first = response(&html, text(5000));
    c.apply(
        (Asked(Some(Coding::Gzip)), client(1)),
        &mut first,
        &mut None,
    );
    assert!(first.headers().contains_key("content-encoding"));
    let mut second = response(&html, text(5000));
    c.apply(
        (Asked(Some(Coding::Gzip)), client(1)),
        &mut second,
        &mut None,
    );
    assert!(
        !second.headers().contains_key("content-encoding"),
        "the one stream is busy"
    );
    assert_eq!(c.over_limit.get(), 1);
    drop(first);
    let mut third = response(&html, text(5000));
    c.apply(
        (Asked(Some(Coding::Gzip)), client(1)),
        &mut third,
        &mut None,
    );
    assert!(
        third.headers().contains_key("content-encoding"),
        "freed with its body"
    );
}

#[tokio::test]
async fn one_client_holds_at_most_its_share_of_the_streams() {
    let c = Compression::detached(CompressionConfig {
        max_streams: 4,
        max_streams_per_client: 2,
        ..CompressionConfig::default()
    });
    let html = [("content-type", "text/html")];
    let asked = |n| (Asked(Some(Coding::Gzip)), client(n));
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut r = response(&html, text(5000));
        c.apply(asked(1), &mut r, &mut None);
        held.push(r);
    }
    let compressed = |r: &Response<TestBody>| r.headers().contains_key("content-encoding");
    assert_eq!(
        held.iter().map(compressed).collect::<Vec<_>>(),
        [true, true, false],
        "the third of one client's goes uncompressed"
    );
    assert_eq!(c.over_client_share.get(), 1);
    let mut other = response(&html, text(5000));
    c.apply(asked(2), &mut other, &mut None);
    assert!(compressed(&other), "another client has its own share");
    drop(held.remove(0));
    let mut again = response(&html, text(5000));
    c.apply(asked(1), &mut again, &mut None);
    assert!(
        compressed(&again),
        "a share's place comes back with its body"
    );
}

#[test]
fn types_and_levels_are_checked() {
    assert!(CompressionConfig::default().check().is_ok());
    let bad = |c: CompressionConfig| c.check().expect_err("refused").0;
    let d = CompressionConfig::default;
    assert_eq!(
        bad(CompressionConfig {
            types: vec!["text".into()],
            ..d()
        }),
        "compression.types"
    );
    assert_eq!(
        bad(CompressionConfig {
            gzip_level: 0,
            ..d()
        }),
        "compression.gzip_level"
    );
    assert_eq!(
        bad(CompressionConfig {
            zstd_level: 30,
            ..d()
        }),
        "compression.zstd_level"
    );
    assert_eq!(
        bad(CompressionConfig {
            max_streams: 0,
            ..d()
        }),
        "compression.max_streams"
    );
    assert_eq!(
        bad(CompressionConfig {
            max_streams_per_client: 257,
            ..d()
        }),
        "compression.max_streams_per_client"
    );
}
