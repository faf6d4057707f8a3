//! The PROXY protocol (haproxy `doc/proxy-protocol.txt`), v1 and v2.
//!
//! - `header`: the wire format: recognise and bound a header at the start of a byte
//!   stream (parsing is `ppp`'s), and write one.
//! - `expect`: read the leading bytes of a trusted source until they are known to be
//!   a header or not, within a deadline.
//!
//! **Trust rule.** A PROXY header is honoured only from a trusted source: the hosts of
//! `hosts.conf` and the networks of `cluster.trusted_sources` (e.g. the ingress). From
//! any other source a connection whose first bytes are a PROXY header is refused and
//! counted (`portproxy_proxy_protocol_rejects_total{reason="untrusted"}`), so a pod can
//! never forge a client address for a `sendProxy` target. Unlike the JS proxy we never
//! guess on untrusted sockets (the spec's §2 "MUST not try to guess").
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
