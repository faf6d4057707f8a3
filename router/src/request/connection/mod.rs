//! A client connection's life, from its accept to its close: the HTTP and
//! HTTPS listeners' steps of the one accept loop ([`serve`], on the `accept`
//! crate), what every listener shares ([`listener`], [`limits`], the open
//! connections in [`registry`]), the watch every connection has over it
//! ([`lifecycle`]: drain, quiet, idle, stall; [`drain`], [`activity`]), the
//! bytes a client sends and is sent ([`client_io`], with h1-codec's framing
//! reader), what every request on it sees ([`client_conn`], [`proxied`]), the
//! router's own HTTP/1.1 and h2 servers ([`h1`], [`h2`]; hyper serves what
//! `h1` hands it), and what a connection becomes when it stops carrying requests: an
//! upgraded tunnel ([`tunnel`]) or TLS relayed by SNI ([`passthrough`]).
//!
//! Each request on a connection goes to [`crate::request::Proxy::answer`],
//! and from there through the phases of [`crate::request::phases`].

pub mod activity;
pub mod client_conn;
pub mod client_io;
pub mod drain;
pub mod h1;
pub mod h2;
pub mod lifecycle;
pub mod limits;
pub mod listener;
pub mod own_waker;
pub mod passthrough;
pub mod proxied;
mod registry;
pub mod serve;
pub mod tunnel;
