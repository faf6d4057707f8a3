//! TLS: client-facing termination with SNI certificate selection, session tickets
//! that both routers of a pair can decrypt, and re-encryption towards members.
//!
//! - [`keys`]: certificates and keys in every format the broker sends;
//! - [`store`]: the live SNI name → certificate map (arc-swapped, like the route
//!   table) and the resolver rustls asks during each handshake;
//! - [`tickets`]: session-ticket keys derived from a shared secret file;
//! - [`ocsp`]: OCSP answers fetched, saved and stapled;
//! - [`server`]: the rustls server configuration and the handshake metrics;
//! - [`hello`]: reading a ClientHello without answering it (SNI passthrough), and
//!   [`rewind`]: the stream with those bytes put back for our own handshake;
//! - [`client`]: TLS towards `ssl_to_gear` members.

pub mod client;
pub mod client_auth;
pub mod groups;
pub mod hello;
pub mod keys;
pub mod ocsp;
pub mod profile;
pub mod rewind;
pub mod server;
pub mod store;
pub mod tickets;
