//! HTTP/2's framing (RFC 9113) and HPACK (RFC 7541) as the router's own h2
//! server needs them, without I/O: frame heads and each frame's payload
//! checked ([`frame`]), header blocks read with the dynamic table and
//! response heads written ([`hpack`]), a request head from its block
//! ([`head`], HTTP/3's rules from `h3-codec`), a server connection's rules
//! ([`conn`]: streams, both flow-control windows, the hostile-client
//! bounds, as events in and frames out), errors as HTTP/2 names them
//! ([`Error`]). The sockets, TLS and the tasks are the router's.
//!
//! **Why hand-written.** h2 over TLS costs the router 37,219 user-space
//! instructions a request against haproxy's 31,502 (`bench/instructions.py
//! --h2 --peers`, shipped build, 2026-11-29); by component the gap is the
//! `h2` crate (6,193: its frames, HPACK with Huffman on every literal it
//! writes, its stream store), the `HeaderMap`s hyper builds and reads each
//! way (5,259) and `memcpy` of their large futures and values (about 3,500).
//! HTTP/1.1 (0.84× nginx) and HTTP/3 (within 1.2× of h2) got there on their
//! own framing (`h1-codec`, `h3-codec`); this is the same step for h2. What
//! a server needs is small: no server push, no priorities (read and
//! dropped), a response head written with the static table's names and raw
//! literals (no Huffman, no dynamic table: the client's decoder keeps
//! nothing of ours). QPACK's integers and string literals are HPACK's, read
//! by `h3-codec`'s. Fuzzed (`fuzz/fuzz_targets/h2_frames.rs`).
//!
//! **Measured serving.** With the router's h2 on it
//! (`router/src/request/connection/h2/`), the same count is 19,937
//! instructions a request against haproxy's 31,042 (0.64×), and the CPU per
//! request 0.93× haproxy's in the median of three 5-round runs
//! (`bench/RESULTS.md`, "h2 on the router's own server").

pub mod conn;
pub mod error;
pub mod frame;
pub mod head;
pub mod hpack;
mod table;

pub use error::{Code, Error};

/// `hex` (digits, spaces between groups) as bytes: the RFCs' examples.
#[cfg(test)]
pub(crate) fn hex(hex: &str) -> bytes::Bytes {
    let digits: String = hex.split_whitespace().collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).expect("hex"))
        .collect::<Vec<u8>>()
        .into()
}
