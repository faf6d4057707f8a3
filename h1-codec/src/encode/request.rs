//! The request heads a proxy writes towards a member: the request line, each
//! field line, and the body's framing decided from a map's fields and the
//! body's own length (a request whose fields came as they were sent keeps its
//! `Content-Length`, checked on the way in, and needs no decision).

use http::Method;
use http::header::{self, HeaderMap, HeaderValue};

use super::field_line;
use crate::BodyFraming;
use crate::length::content_length;

/// A request's first line: its method and its target (origin form).
#[derive(Clone, Copy, Debug)]
pub struct RequestLine<'a> {
    pub method: &'a Method,
    pub target: &'a str,
}

impl RequestLine<'_> {
    /// Appends `METHOD target HTTP/1.1`.
    #[inline]
    pub fn write(self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
    }
}

/// How a body whose request's fields are in a map is framed towards the member:
/// the client's valid `Content-Length` as it stands, else one the router adds
/// (the length is known), else chunked.
pub enum RequestFraming {
    Empty,
    Kept(u64),
    Add(u64),
    Chunked,
}

impl RequestFraming {
    pub fn of(headers: &HeaderMap, body_len: Option<Option<u64>>) -> RequestFraming {
        let Some(len) = body_len else {
            return RequestFraming::Empty;
        };
        let declared = content_length(
            headers
                .get_all(header::CONTENT_LENGTH)
                .iter()
                .map(HeaderValue::as_bytes),
        );
        match (declared, len) {
            (Ok(Some(n)), _) => RequestFraming::Kept(n),
            (_, Some(n)) => RequestFraming::Add(n),
            (_, None) => RequestFraming::Chunked,
        }
    }

    pub fn write(self, out: &mut Vec<u8>) -> BodyFraming {
        match self {
            RequestFraming::Empty => BodyFraming::Empty,
            RequestFraming::Kept(n) => BodyFraming::Length(n),
            RequestFraming::Add(n) => {
                field_line(b"content-length", n.to_string().as_bytes(), out);
                BodyFraming::Length(n)
            }
            RequestFraming::Chunked => {
                field_line(b"transfer-encoding", b"chunked", out);
                BodyFraming::Chunked
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The framing `headers` and the body's length give, and what it writes.
    fn framed(headers: &[(&str, &str)], body_len: Option<Option<u64>>) -> (BodyFraming, Vec<u8>) {
        let mut map = HeaderMap::new();
        for (n, v) in headers {
            map.append(
                http::header::HeaderName::from_bytes(n.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        let mut out = Vec::new();
        (RequestFraming::of(&map, body_len).write(&mut out), out)
    }

    #[test]
    fn a_request_is_framed_by_its_length_else_by_its_body() {
        assert_eq!(framed(&[("host", "a")], None), (BodyFraming::Empty, vec![]));
        // The client's valid length stands, written with its fields.
        assert_eq!(
            framed(&[("content-length", "4")], Some(None)),
            (BodyFraming::Length(4), vec![])
        );
        // h2 clients: no framing field; a known length is added, else chunked.
        assert_eq!(
            framed(&[], Some(Some(7))),
            (BodyFraming::Length(7), b"content-length: 7\r\n".to_vec())
        );
        assert_eq!(
            framed(&[], Some(None)),
            (
                BodyFraming::Chunked,
                b"transfer-encoding: chunked\r\n".to_vec()
            )
        );
        // A client's chunked body (its field is hop-by-hop, left out) is chunked again.
        assert_eq!(
            framed(&[("transfer-encoding", "chunked")], Some(None)).0,
            BodyFraming::Chunked
        );
    }

    #[test]
    fn the_request_line_is_method_target_version() {
        let mut out = Vec::new();
        let line = RequestLine {
            method: &Method::GET,
            target: "/x?y=1",
        };
        line.write(&mut out);
        assert_eq!(out, b"GET /x?y=1 HTTP/1.1\r\n");
    }
}
