//! A small STOMP 1.2 client for ActiveMQ, written here because no crate covers TLS
//! with a private CA, a broker failover list and reconnects with a permissive licence
//! (`reference/crates.md` §2).
//!
//! - [`frame`]: frames and the wire codec (bytes in, frames out; nothing else).
//!
//! The session (connect, subscribe, acknowledgements, heart-beats, failover) builds on
//! the codec and never touches bytes itself.

pub mod frame;

pub use frame::{Codec, Command, Frame, FrameError, Item, Limits};
