use super::*;
use crate::encode::{encode_chunk, encode_last_chunk};
use proptest::prelude::*;

/// Feeds `bytes` to the head parser and then the body decoder in pieces cut at
/// `cuts`, as reads would deliver them; returns the head, the body's data and its
/// trailers, or the first error.
fn read_split(
    bytes: &[u8],
    cuts: &[usize],
    head: bool,
) -> Result<(ResponseHead, Vec<u8>, Option<HeaderMap>), ParseError> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.push(bytes.len());
    points.sort_unstable();
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut parsed: Option<ResponseHead> = None;
    let mut chunked = Chunked::default();
    let mut left = 0u64;
    let (mut data, mut trailers) = (Vec::new(), None);
    for p in points {
        buf.extend_from_slice(&bytes[fed..p]);
        fed = p;
        if parsed.is_none() {
            match parse_response_head(&mut buf, head)? {
                Some(h) => {
                    if let BodyFraming::Length(n) = h.framing {
                        left = n;
                    }
                    parsed = Some(h);
                }
                None => continue,
            }
        }
        let Some(h) = &parsed else { continue };
        match h.framing {
            BodyFraming::Chunked => loop {
                match chunked.decode(&mut buf)? {
                    Decoded::Data(d) => data.extend_from_slice(&d),
                    Decoded::Trailers(t) => trailers = Some(t),
                    Decoded::End | Decoded::More => break,
                }
            },
            BodyFraming::Length(_) => {
                let take = (left as usize).min(buf.len());
                data.extend_from_slice(&buf.split_to(take));
                left -= take as u64;
            }
            BodyFraming::Close => data.extend_from_slice(&buf.split()),
            BodyFraming::Empty => {}
        }
    }
    let h = parsed.ok_or(ParseError::Head("incomplete"))?;
    Ok((h, data, trailers))
}

fn chunked_body(data: &[u8], sizes: &[usize], trailers: Option<&HeaderMap>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = data;
    for s in sizes.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let n = (*s).clamp(1, rest.len());
        encode_chunk(&rest[..n], &mut out);
        rest = &rest[n..];
    }
    encode_last_chunk(trailers, &mut out);
    out
}

proptest! {
    /// A chunked response decodes to the same data and trailers however the bytes
    /// are split across reads.
    #[test]
    fn chunked_decodes_the_same_over_any_split(
        data in proptest::collection::vec(any::<u8>(), 0..600),
        sizes in proptest::collection::vec(1usize..80, 1..6),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
        with_trailers in any::<bool>(),
    ) {
        let mut t = HeaderMap::new();
        t.insert("x-checksum", HeaderValue::from_static("abc"));
        let mut msg = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        msg.extend(chunked_body(&data, &sizes, with_trailers.then_some(&t)));
        let (head, got, trailers) = read_split(&msg, &cuts, false).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(head.framing, BodyFraming::Chunked);
        prop_assert!(head.keep_alive);
        prop_assert_eq!(got, data);
        prop_assert_eq!(trailers.is_some(), with_trailers);
    }

    /// A length-delimited response, with 1xx heads before it, over any split.
    #[test]
    fn length_and_informational_heads_over_any_split(
        data in proptest::collection::vec(any::<u8>(), 1..300),
        informational in 0usize..3,
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut msg = Vec::new();
        for _ in 0..informational {
            msg.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n");
        }
        msg.extend_from_slice(format!("HTTP/1.1 201 Created\r\nContent-Length: {}\r\nX-A: b\r\n\r\n", data.len()).as_bytes());
        msg.extend_from_slice(&data);
        let (head, got, _) = read_split(&msg, &cuts, false).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(head.status, StatusCode::CREATED);
        prop_assert_eq!(head.framing, BodyFraming::Length(data.len() as u64));
        prop_assert_eq!(head.fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(b"x-a")).map(|(_, v)| v), Some(&b"b"[..]));
        prop_assert_eq!(got, data);
    }

    /// Arbitrary bytes never panic the parser or the decoder.
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut msg = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        msg.extend_from_slice(&bytes);
        let _ = read_split(&msg, &cuts, false);
        let _ = read_split(&bytes, &cuts, false);
    }
}

fn parse(s: &str) -> Result<Option<ResponseHead>, ParseError> {
    parse_response_head(&mut BytesMut::from(s.as_bytes()), false)
}

#[test]
fn framing_follows_what_hypers_client_did() {
    let h = |s: &str| parse(s).ok().flatten().map(|h| (h.framing, h.keep_alive));
    assert_eq!(
        h("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
        Some((BodyFraming::Length(5), true))
    );
    assert_eq!(
        h("HTTP/1.1 200 OK\r\n\r\n"),
        Some((BodyFraming::Close, false))
    );
    assert_eq!(
        h("HTTP/1.1 204 No Content\r\n\r\n"),
        Some((BodyFraming::Empty, true))
    );
    assert_eq!(
        h("HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n"),
        Some((BodyFraming::Empty, true))
    );
    assert_eq!(
        h("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"),
        Some((BodyFraming::Length(3), false))
    );
    assert_eq!(
        h("HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n"),
        Some((BodyFraming::Length(3), false))
    );
    assert_eq!(
        h("HTTP/1.0 200 OK\r\nContent-Length: 3\r\nConnection: keep-alive\r\n\r\n"),
        Some((BodyFraming::Length(3), true))
    );
    // TE wins over CL, and such a connection is not reused.
    assert_eq!(
        h("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"),
        Some((BodyFraming::Chunked, false))
    );
    assert_eq!(
        h("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n"),
        Some((BodyFraming::Close, false))
    );
    assert_eq!(
        h("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n"),
        Some((BodyFraming::Length(3), true))
    );
    let head = parse_response_head(
        &mut BytesMut::from(&b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"[..]),
        true,
    );
    assert_eq!(
        head.ok().flatten().map(|h| h.framing),
        Some(BodyFraming::Empty)
    );
}

#[test]
fn only_an_unusual_reason_phrase_is_kept() {
    let reason = |s: &str| parse(s).ok().flatten().and_then(|h| h.reason);
    assert!(reason("HTTP/1.1 200 OK\r\n\r\n").is_none());
    assert_eq!(
        reason("HTTP/1.1 200 Fine Thanks\r\n\r\n").map(|r| r.to_vec()),
        Some(b"Fine Thanks".to_vec())
    );
}

#[test]
fn bad_heads_and_chunks_are_errors() {
    assert!(parse("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n").is_err());
    assert!(parse("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").is_err());
    assert!(parse("HTTP/1.1 101 Switching Protocols\r\n\r\n").is_err());
    // Found by fuzz/member_response (against hyper's client): RFC 9112 §6.1.
    assert!(parse("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").is_err());
    let mut te =
        BytesMut::from(&b"HTTP/1.1 200 OK\r\nTransfer-Encoding: x\xc6, chunked\r\n\r\n"[..]);
    assert!(
        parse_response_head(&mut te, false).is_err(),
        "a coding outside ASCII"
    );
    let mut chunked = Chunked::default();
    let mut body = BytesMut::from(&b"0\r\nX: 1\n\nY: 2\r\n\r\n"[..]);
    assert!(
        chunked.decode(&mut body).is_err(),
        "a bare LF in the trailers"
    );
    for line in [
        &b"5;x\r y\r\nhello\r\n"[..],
        b"5;x\0\r\nhello\r\n",
        b"5\r\r\nhello\r\n",
    ] {
        let mut body = BytesMut::from(line);
        let got = Chunked::default().decode(&mut body);
        assert!(got.is_err(), "a control byte in an extension: {got:?}");
    }
    assert!(parse("garbage\r\n\r\n").is_err());
    assert_eq!(
        parse("HTTP/1.1 200 OK\r\nX: y\r\n")
            .ok()
            .map(|h| h.is_none()),
        Some(true)
    );
    let big = format!("HTTP/1.1 200 OK\r\nX-Filler: {}\r\n", "a".repeat(MAX_HEAD));
    assert_eq!(parse(&big).err(), Some(ParseError::HeadTooLarge));
    for body in [
        "g\r\n",
        "5\nhello\r\n",
        "5\r\nhelloXX",
        "fffffffffffffffff\r\n",
        "-1\r\n",
        "5 junk\r\n",
    ] {
        let mut buf = BytesMut::from(body.as_bytes());
        let mut c = Chunked::default();
        let mut result = Ok(Decoded::More);
        for _ in 0..4 {
            result = c.decode(&mut buf);
            if !matches!(result, Ok(Decoded::Data(_))) {
                break;
            }
        }
        assert!(result.is_err(), "{body:?} gave {result:?}");
    }
}

#[test]
fn a_whole_response_reads_by_its_framing() {
    let (h, body) =
        read_whole(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabcdef", false).expect("length");
    assert_eq!((h.status.as_u16(), &body[..]), (200, &b"abc"[..]));
    let chunked =
        b"HTTP/1.1 401 No\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n1;x\r\nc\r\n0\r\n\r\n";
    let (h, body) = read_whole(chunked, false).expect("chunked");
    assert_eq!((h.status.as_u16(), &body[..]), (401, &b"abc"[..]));
    let (_, body) = read_whole(b"HTTP/1.0 200 OK\r\n\r\nto the end", false).expect("close");
    assert_eq!(&body[..], b"to the end");
    assert!(read_whole(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nab", false).is_err());
    assert!(read_whole(b"HTTP/1.1 200 OK\r\n", false).is_err());
    assert!(read_whole(b"HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\nab", false).is_err());
}
