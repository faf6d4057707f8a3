//! The request heads the router's own HTTP/1.1 path serves, parsed in place.
//!
//! [`parse`] says one of three things about the bytes at the start of a connection's
//! buffer: more are needed; here is a request this path serves (with how many bytes
//! its head and body take); or this is something else, and hyper is to serve the
//! connection from here (see the parent module for what that covers). It never
//! answers an error itself: every request it does not take reaches hyper byte for
//! byte, so errors (400, 431, 414) stay hyper's.
//!
//! Where the request ends is not decided here: the framing reader
//! ([`h1_codec::framing`], on every read of the connection) reports each head it saw
//! complete with its end and its body's framing, and this path takes a request only
//! when httparse ends the head at the same byte. So one reader owns the answer to
//! where a message ends, and a disagreement hands the connection to hyper.

use bytes::{Bytes, BytesMut};
use h1_codec::fields::{FieldIndex, Fields};
use h1_codec::framing::Head;
use h1_codec::{BodyFraming, MAX_HEADERS};
use http::{Method, Request, Uri, Version};

/// hyper answers 414 to a longer request target.
const MAX_URI: usize = u16::MAX as usize - 1;

/// What the limits say about a head this path takes.
#[derive(Clone, Copy, Debug)]
pub struct HeadLimits {
    /// `limits.max_header_bytes`.
    pub max_bytes: usize,
    /// `limits.max_headers`.
    pub max_headers: usize,
    /// `limits.body_buffer_bytes`: a longer body is streamed, which hyper does.
    pub max_body: usize,
}

/// What [`parse`] found.
#[derive(Debug)]
pub enum Parsed {
    /// No complete head yet (and not over the size limit).
    Partial,
    /// A request this path serves, taken out of the buffer: its head was
    /// `head` bytes long and its `Content-Length` body is `body`. Its fields
    /// are in `fields` as they came, not in `parts` (whose map is empty).
    Request {
        head: usize,
        body: Bytes,
        parts: Box<http::request::Parts>,
        fields: Fields,
    },
    /// Anything else: hyper takes the connection with these bytes.
    Other,
}

/// Reads the request head at the start of `buf` (see the module doc); `framed` is
/// what the framing reader said of the head starting there, if it saw one complete.
/// A request this path serves (its body whole in `buf` too) is taken out of
/// `buf`, without a copy; otherwise `buf` is left as it was.
pub fn parse(buf: &mut BytesMut, limits: &HeadLimits, framed: Option<Head>) -> Parsed {
    let mut slots =
        [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    // More fields than this (or than a lower `limits.max_headers`): hyper takes
    // the connection and applies the limit (431).
    let slots = &mut slots[..limits.max_headers.min(MAX_HEADERS)];
    let mut req = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut req, buf, slots)
    {
        Ok(httparse::Status::Complete(n)) if n <= limits.max_bytes => n,
        Ok(httparse::Status::Partial) if buf.len() <= limits.max_bytes => return Parsed::Partial,
        _ => return Parsed::Other,
    };
    let (Some(method), Some(path), Some(1)) = (req.method, req.path, req.version) else {
        return Parsed::Other;
    };
    if !path.starts_with('/') || path.len() >= MAX_URI {
        return Parsed::Other;
    }
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Other;
    };
    let Some(body) = whole_body(framed, len, limits) else {
        return Parsed::Other;
    };
    if req.headers.iter().any(hypers) {
        return Parsed::Other;
    }
    // A body still on its way is hyper's to read, with its deadlines and 408.
    if buf.len() < len + body {
        return Parsed::Other;
    }
    // The fields as they came (no map: the member gets them as they are, see
    // `request::headers::encode_for_member`).
    let Some(index) = FieldIndex::new(buf, len, req.headers) else {
        return Parsed::Other;
    };
    let path = (path.as_ptr() as usize - buf.as_ptr() as usize, path.len());
    let head = buf.split_to(len).freeze();
    let uri = head
        .get(path.0..path.0 + path.1)
        .map(|_| Uri::from_maybe_shared(head.slice(path.0..path.0 + path.1)));
    let (Some(Ok(uri)), Some(fields)) = (uri, Fields::with_head(head.clone(), index)) else {
        // A target the `http` crate refuses (rare): hyper gets every byte.
        return give_back(buf, &head);
    };
    let body = buf.split_to(body).freeze();
    let (mut parts, ()) = Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    Parsed::Request {
        head: len,
        body,
        parts: Box::new(parts),
        fields,
    }
}

/// The length of a body this path reads whole, from the framing reader's head
/// (which must end where httparse's does): none, or a `Content-Length` within
/// `max_body`; `None` for chunked, an upgrade, or a body past `max_body`
/// (hyper's).
#[inline]
fn whole_body(framed: Option<Head>, len: usize, limits: &HeadLimits) -> Option<usize> {
    match framed {
        Some(h) if h.end - h.start == len as u64 => match h.body {
            BodyFraming::Empty => Some(0),
            BodyFraming::Length(n) => usize::try_from(n).ok().filter(|n| *n <= limits.max_body),
            BodyFraming::Chunked | BodyFraming::Close => None,
        },
        _ => None,
    }
}

/// A field that makes the request hyper's: `Expect`, or a `Connection` other
/// than `keep-alive` (the default; a close, an upgrade or another token is
/// hyper's to handle).
#[inline]
fn hypers(h: &httparse::Header<'_>) -> bool {
    let name = h.name.as_bytes();
    (name.eq_ignore_ascii_case(b"connection") && !h.value.eq_ignore_ascii_case(b"keep-alive"))
        || name.eq_ignore_ascii_case(b"expect")
}

/// The head taken out of `buf` put back before what follows it: hyper reads
/// the connection from its first byte.
#[cold]
fn give_back(buf: &mut BytesMut, head: &[u8]) -> Parsed {
    let mut whole = BytesMut::with_capacity(head.len() + buf.len());
    whole.extend_from_slice(head);
    whole.extend_from_slice(buf);
    *buf = whole;
    Parsed::Other
}
