//! A response head as the client's HPACK block, written straight from what
//! the request path answered ([`Answer`]): an HTTP/1.1 member's fields as
//! they came (no map built of them), then the router's own in the
//! response's map, then `x-request-id`, then `date` if none came. The same
//! fields in the same order as the own HTTP/1.1 path writes
//! (`h1_codec::encode::response`), with HTTP/2's rules: names in lower
//! case, none of the connection-specific fields (RFC 9113 §8.2.2).
//!
//! Why not the map [`Proxy::response`](crate::request::Proxy::response)
//! builds: building it and reading it again cost about 1,800 instructions
//! of an h2 request (`bench/instructions.py --h2`, `HeaderMap` inserts,
//! `HeaderName` parsing and hashing).

use bytes::BytesMut;
use h1_codec::encode::response::DateCache;
use h1_codec::fields::{Fields, Name};
use h1_codec::hop::end_to_end;
use h2_codec::hpack;
use http::header;

use crate::request::phases::trace::RequestId;

/// Appends the HPACK block of a response head to `out`.
pub fn block(
    parts: &http::response::Parts,
    member: Option<&Fields>,
    request_id: &RequestId,
    date: &mut DateCache,
    out: &mut BytesMut,
) {
    hpack::put_status(parts.status.as_u16(), out);
    let mut dated = false;
    if let Some(fields) = member {
        let mut length = false;
        for (kind, name, value) in end_to_end(fields, &parts.headers) {
            match kind {
                // The router's, below.
                Name::XRequestId => {}
                // The first one, as from a map (a member's lengths agree).
                Name::ContentLength if length => {}
                _ => {
                    length |= kind == Name::ContentLength;
                    dated |= kind == Name::Date;
                    hpack::put_field_any_case(name, value, out);
                }
            }
        }
    }
    for (name, value) in &parts.headers {
        if h3_codec::head::CONNECTION_SPECIFIC.contains(name) || name == X_REQUEST_ID {
            continue;
        }
        dated |= name == header::DATE;
        hpack::put_field(name.as_str(), value.as_bytes(), out);
    }
    hpack::put_field("x-request-id", request_id.as_bytes(), out);
    if !dated {
        hpack::put_field("date", date.value(), out);
    }
}

const X_REQUEST_ID: header::HeaderName = header::HeaderName::from_static("x-request-id");

#[cfg(test)]
mod tests {
    use super::*;

    /// The block decoded again by the codec's own reader, as pairs.
    fn decoded(block: BytesMut) -> Vec<(String, String)> {
        let mut d = hpack::Decoder::new(4096);
        let mut got = Vec::new();
        d.decode(&block.freeze(), |n, v| {
            got.push((
                String::from_utf8_lossy(n.as_bytes()).into_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            ));
            Ok(())
        })
        .expect("decodes");
        got
    }

    #[test]
    fn a_members_fields_then_the_routers_then_the_id_and_a_date() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nContent-Length: 2\r\ncontent-length: 2\r\nX-Request-Id: member\r\nSet-Cookie: a=1\r\nServer: gear\r\n\r\n";
        let fields = Fields::of_head(head).expect("a head");
        let mut response = http::Response::new(());
        let headers = response.headers_mut();
        headers.insert("server", header::HeaderValue::from_static("router"));
        headers.insert("set-cookie", header::HeaderValue::from_static("b=2"));
        headers.insert("keep-alive", header::HeaderValue::from_static("timeout=5"));
        let (parts, ()) = response.into_parts();
        let id = RequestId::kept(header::HeaderValue::from_static("abc"));
        let mut out = BytesMut::new();
        block(
            &parts,
            Some(&fields),
            &id,
            &mut DateCache::default(),
            &mut out,
        );
        let got = decoded(out);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                ":status",
                "content-type",
                "content-length",
                "set-cookie",
                "server",
                "set-cookie",
                "x-request-id",
                "date"
            ],
            "{got:?}"
        );
        assert_eq!(got[4].1, "router", "the router's in place of the member's");
        assert_eq!(got[6].1, "abc");
    }
}
