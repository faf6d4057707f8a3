//! The router's one HTTP/1 codec, in the spirit of hyper's `proto/h1`: pure code,
//! bytes in and bytes out, no I/O, so that every part can be property-tested over
//! every way its input can be split across reads and fuzzed against hyper and
//! httparse (`fuzz/`).
//!
//! - [`length`]: the one `Content-Length` rule;
//! - [`chunk`]: the one chunk-size line grammar;
//! - [`framing`]: where each request of a client's connection ends (the server
//!   role's decoder, the one owner of that answer);
//! - [`response`]: a member's response head and body (the client role's decoder),
//!   also what the health probe and the CLI's admin calls read;
//! - [`fields`]: a parsed head's fields as they came, with an index (what a
//!   proxy passes on without a map);
//! - [`hop`]: which fields are for one hop only (both directions);
//! - [`encode`]: what the router writes, both ways: response heads and bodies
//!   to clients, request heads to members, chunks and trailers.
//!
//! Hand-written on `httparse` rather than hyper's client and server because
//! neither can follow a connection's framing without owning the connection, and
//! hyper's client dispatch (a channel and a oneshot per request) was the largest
//! piece of library machinery on the request path (`bench/RESULTS.md`).

pub mod chunk;
pub mod encode;
pub mod fields;
pub mod framing;
pub mod hop;
pub mod length;
pub mod request;
pub mod response;

/// Header fields at most in one head, requests and responses alike (hyper's
/// default on both sides): more is 431 from a client, an error from a member.
pub const MAX_HEADERS: usize = 100;

/// A response head (or a trailer section) larger than this is refused.
pub const MAX_HEAD: usize = 64 * 1024;

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body at all.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes: a response read to its end, or what follows a
    /// request head that asks for an upgrade (no longer HTTP/1).
    Close,
}

/// A map of `pairs`, in order: the tests' way to write fields.
#[cfg(test)]
pub(crate) fn test_map(pairs: &[(&str, &str)]) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            http::HeaderValue::from_str(v).expect("value"),
        );
    }
    h
}
