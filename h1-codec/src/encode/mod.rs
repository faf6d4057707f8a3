//! What the router writes in HTTP/1, both ways: the response heads and bodies
//! towards clients ([`response`], the server role's encoder, written as hyper's
//! server writes them), the request heads towards members ([`request`], the
//! client role's), the chunks and trailers both use, and the one way a parsed
//! head becomes a `HeaderMap`.

pub mod request;
pub mod response;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Appends one field line.
#[inline]
pub fn field_line(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
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
