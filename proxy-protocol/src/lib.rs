//! The PROXY protocol (haproxy `doc/proxy-protocol.txt`), v1 and v2, for both
//! binaries: the portproxy reads and writes headers, the router writes them in
//! front of `tcp.listen` connections.
//!
//! - `header`: the wire format: recognise and bound a header at the start of a byte
//!   stream (parsing is `ppp`'s), and write one.
//! - `expect`: read the leading bytes of a trusted source until they are known to be
//!   a header or not, within a deadline.
//!
//! Whom to believe is the caller's decision: read a header only from a source
//! that is trusted to send one (the spec's §2: a receiver "MUST not try to guess").
//!
//! Why `ppp`: maintained, Apache-2.0, strict v1 and v2 parsers with an
//! incomplete/invalid distinction for streams, and builders for both versions. It
//! does not bound v2's 16-bit length, so `header` caps it first.

pub mod expect;
pub mod header;

/// Which header a target wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}
