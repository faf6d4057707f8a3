//! `h1_encode`: what h1-codec writes reads back the same through its own
//! readers. From the input: a status, a method, a body's length (none, known,
//! unknown) and a map of fields (those that frame a body left to the encoder).
//!
//! - A response head (`encode::response::encode_head`, what clients get from
//!   the own HTTP/1.1 path) reads through the member-side reader
//!   (`parse_response_head`) with the same status, every end-to-end field with
//!   its values in order, and the framing the encoder chose.
//! - A request head (request line, fields, `RequestFraming`: what members get)
//!   reads through the client-side framing reader as one head ending where it
//!   was written, its body framed as the encoder said.

use bytes::BytesMut;
use h1_codec::BodyFraming;
use h1_codec::encode::field_line;
use h1_codec::encode::request::{RequestFraming, RequestLine};
use h1_codec::encode::response::{BodyLength, DateCache, Encoder, ToWrite, encode_head};
use h1_codec::fields::Name;
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

/// Names the encoders decide themselves (framing, `date`, `trailer`) or that
/// are for one hop only: not taken from the input.
fn left_to_the_encoder(name: &HeaderName) -> bool {
    let kind = Name::of(name.as_str().as_bytes());
    kind.is_hop_by_hop()
        || matches!(kind, Name::ContentLength | Name::TransferEncoding)
        || *name == http::header::DATE
        || *name == http::header::TRAILER
}

/// The fields of `text`: one `name:value` a line, those `http` refuses or
/// that are [`left_to_the_encoder`] dropped.
fn fields_of(text: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in text.split(|b| *b == b'\n').take(40) {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        if !left_to_the_encoder(&name) {
            map.append(name, value);
        }
    }
    map
}

/// `Length(0)` and no body are one thing to a reader.
fn plain(framing: BodyFraming) -> BodyFraming {
    match framing {
        BodyFraming::Length(0) => BodyFraming::Empty,
        other => other,
    }
}

pub fn h1_encode(data: &[u8]) {
    let [a, b, flags, len, rest @ ..] = data else {
        return;
    };
    let status =
        StatusCode::from_u16(200 + u16::from_le_bytes([*a, *b]) % 400).unwrap_or(StatusCode::OK);
    let method = if flags & 1 == 1 {
        Method::HEAD
    } else {
        Method::POST
    };
    let n = u64::from(*len);
    let body = match (flags >> 1) % 3 {
        0 => BodyLength::None,
        1 => BodyLength::Known(n),
        _ => BodyLength::Unknown,
    };
    let map = fields_of(rest);
    response_reads_back(status, &method, body, &map);
    let body_len = match body {
        BodyLength::None => None,
        BodyLength::Known(n) => Some(Some(n)),
        BodyLength::Unknown => Some(None),
    };
    request_reads_back(&method, body_len, &map);
}

fn response_reads_back(status: StatusCode, method: &Method, body: BodyLength, map: &HeaderMap) {
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = status;
    parts.headers = map.clone();
    let to_write = ToWrite {
        parts: &parts,
        reason: None,
        member: None,
        added: b"",
        request_id: None,
        method,
        body,
    };
    let mut out = Vec::new();
    let head = encode_head(&to_write, &mut DateCache::default(), &mut out);
    let mut buf = BytesMut::from(&out[..]);
    let read = h1_codec::response::parse_response_head(&mut buf, *method == Method::HEAD);
    let read = match read {
        Ok(Some(read)) => read,
        other => panic!("a written head does not read back: {other:?}\n{out:?}"),
    };
    assert!(buf.is_empty(), "the head read is the head written");
    assert_eq!(read.status, status);
    for name in map.keys() {
        let want: Vec<&[u8]> = map
            .get_all(name)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect();
        let got: Vec<&[u8]> = read
            .fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_str().as_bytes()))
            .map(|(_, v)| v)
            .collect();
        assert_eq!(got, want, "{name}");
    }
    if *method != Method::HEAD && !matches!(status.as_u16(), 204 | 304) {
        let framed = match head.encoder {
            Encoder::Length(n) => BodyFraming::Length(n),
            Encoder::Chunked(_) => BodyFraming::Chunked,
            Encoder::CloseDelimited => BodyFraming::Close,
        };
        assert_eq!(plain(read.framing), plain(framed), "{out:?}");
    }
}

fn request_reads_back(method: &Method, body_len: Option<Option<u64>>, map: &HeaderMap) {
    let mut out = Vec::new();
    let line = RequestLine {
        method,
        target: "/p?q=1",
    };
    line.write(&mut out);
    for (name, value) in map {
        field_line(name.as_str().as_bytes(), value.as_bytes(), &mut out);
    }
    let framing = RequestFraming::of(map, body_len).write(&mut out);
    out.extend_from_slice(b"\r\n");
    let mut reader = h1_codec::framing::Framing::new();
    assert_eq!(reader.feed(&out), None, "a written head is cut: {out:?}");
    let head = reader.head_at(0).expect("the written head is reported");
    assert_eq!(head.end, out.len() as u64, "{out:?}");
    assert_eq!(plain(head.body), plain(framing), "{out:?}");
}
