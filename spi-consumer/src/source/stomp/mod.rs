//! A small STOMP 1.2 client for ActiveMQ, written here because no crate covers TLS
//! with a private CA, a broker failover list and reconnects with a permissive licence
//! (the STOMP crates on crates.io in 2026 are unmaintained or lack TLS or failover).
//!
//! - [`frame`]: frames and the wire codec (bytes in, frames out; nothing else);
//! - [`session`]: one connection to a broker: connect, subscribe, heart-beats,
//!   acknowledgements. It speaks in frames and never touches bytes;
//! - [`source`]: the event source: sessions kept up across failures, every message
//!   applied and made durable before it is acknowledged;
//! - [`tls`]: STOMP over TLS with a private CA and an optional client certificate.

pub mod frame;
pub mod session;
pub mod source;
pub mod tls;

pub use frame::{Codec, Command, Frame, FrameError, Item, Limits};
pub use session::{Message, SessionConfig, StompError, StompSession};
