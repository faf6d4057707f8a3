//! HTTP/3's own framing (RFC 9114) and QPACK (RFC 9204) as the router's
//! HTTP/3 listener needs them, without I/O: frame heads and SETTINGS
//! ([`frame`]), field sections with the static table and literals only
//! ([`qpack`]), a request head from its fields ([`head`]). QUIC itself stays
//! `quinn`'s; the streams are read and written by the router.
//!
//! **Why hand-written.** The router served HTTP/3 through the `h3` crate
//! (0.0.8). Counted with callgrind (`bench/instructions.py`-style, 10
//! connections × 10 streams, 2026-11-28), a request cost 63 300 user-space
//! instructions against 46 100 for the same request over h2: `h3` and
//! `h3-quinn` were 18 800 of them, 9 400 in Huffman-coding every response
//! string bit by bit (it cannot be turned off), the rest in per-stream
//! buffering, `Unfold` streams and frame copies. What a server needs of
//! HTTP/3 is small: no server push, no dynamic QPACK table (the server says
//! capacity 0, so a client's sections name only the static table or carry
//! literals), a few frame types. This crate is that, fuzzed
//! (`fuzz/fuzz_targets/h3_frames.rs`) and checked against curl and aioquic
//! clients in the end-to-end tests; bench/RESULTS.md has the figures after.

pub mod error;
pub mod frame;
pub mod head;
pub mod qpack;
pub mod table;
pub mod varint;

pub use error::{Code, Error};
