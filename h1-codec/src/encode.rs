//! The heads, chunks and trailers the router writes towards members (the client
//! role's encoder), and the one way a parsed head becomes a `HeaderMap`.

use bytes::Bytes;
use http::Method;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::BodyFraming;
use crate::length::content_length;

/// Writes a request head into `out` and says how its body is framed.
///
/// `body_len`: `None` when the request has no body to send; otherwise its exact
/// length if known. The framing follows what the headers say (the client's framing
/// was checked on the way in: a single `chunked`, or a `Content-Length`); a body
/// of unknown length without either is sent chunked (h2 clients).
pub fn encode_request_head(
    method: &Method,
    target: &str,
    headers: &mut HeaderMap,
    body_len: Option<Option<u64>>,
    out: &mut Vec<u8>,
) -> BodyFraming {
    let framing = match body_len {
        None => {
            headers.remove(header::TRANSFER_ENCODING);
            BodyFraming::Empty
        }
        Some(len) => {
            if headers.contains_key(header::TRANSFER_ENCODING) {
                headers.remove(header::CONTENT_LENGTH);
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
                BodyFraming::Chunked
            } else if let Some(n) = content_length(
                headers
                    .get_all(header::CONTENT_LENGTH)
                    .iter()
                    .map(HeaderValue::as_bytes),
            )
            .ok()
            .flatten()
            {
                BodyFraming::Length(n)
            } else if let Some(n) = len {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                BodyFraming::Length(n)
            } else {
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
                BodyFraming::Chunked
            }
        }
    };
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers.iter() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

/// Appends one data chunk in chunked coding (nothing for an empty one: a zero-size
/// chunk would end the body).
pub fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:X}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk and the trailers, if any.
pub fn encode_last_chunk(trailers: Option<&HeaderMap>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        encode_field(name, value, out);
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends one header field line.
pub fn encode_field(name: &HeaderName, value: &HeaderValue, out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_str().as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The fields httparse found in the head that is the first `len` bytes of `buf`, as
/// a map (with room for `room` more) whose values are slices of one copy of the
/// head, returned with it. Names are mostly standard (no allocation); values are
/// not copied one by one. The copy (a few hundred bytes) leaves `buf` unshared, so
/// its next reserve does not allocate. `None`: a name or value `http` refuses.
pub fn header_map(
    buf: &[u8],
    len: usize,
    fields: &[httparse::Header<'_>],
    room: usize,
) -> Option<(Bytes, HeaderMap)> {
    let head = Bytes::copy_from_slice(buf.get(..len)?);
    let base = buf.as_ptr() as usize;
    let mut headers = HeaderMap::with_capacity(fields.len() + room);
    for h in fields {
        let at = (h.value.as_ptr() as usize).checked_sub(base)?;
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_maybe_shared(head.slice(at..at + h.value.len())).ok()?;
        headers.append(name, value);
    }
    Some((head, headers))
}
