//! What this codec costs a request, for `bench/RESULTS.md`: `N` times the
//! steady-state request block h2load sends (every field indexed once the
//! first request put them in the table) read into a request, and the echo
//! backend's response head written. Run under callgrind at two counts and
//! take the difference:
//!
//!     cargo build --release -p h2-codec --example count
//!     valgrind --tool=callgrind target/release/examples/count 1000
//!     valgrind --tool=callgrind target/release/examples/count 11000

use bytes::{Bytes, BytesMut};
use h2_codec::{frame, head, hpack::Decoder};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    let mut decoder = Decoder::new(4096);
    // :method GET, :scheme https, :path /, then :authority and user-agent
    // as literals with incremental indexing (the first request).
    let mut first = vec![0x82, 0x87, 0x84, 0x41, 26];
    first.extend_from_slice(b"ha-bench-bench.example.com");
    first.extend_from_slice(&[0x7a, 21]);
    first.extend_from_slice(b"h2load nghttp2/1.52.0");
    let first = Bytes::from(first);
    head::request(&mut decoder, &first, 16_384).expect("the first request");
    // Every later one: five one-byte references.
    let steady = Bytes::from_static(&[0x82, 0x87, 0x84, 0xbf, 0xbe]);
    let fields: [(&str, &[u8]); 5] = [
        ("content-type", b"application/json"),
        ("set-cookie", b"GEAR=local-abc; path=/"),
        ("content-length", b"439"),
        ("date", b"Sun, 29 Nov 2026 18:54:09 GMT"),
        ("x-request-id", b"b8d8a87b706cd5e9bdd6ee45a4df67b7"),
    ];
    let mut written = 0;
    for i in 0..n {
        let req = head::request(&mut decoder, &steady, 16_384).expect("a request");
        assert_eq!(req.headers().len(), 1);
        let mut block = BytesMut::with_capacity(256);
        h2_codec::hpack::encode(Some(200), fields.iter().copied(), &mut block);
        let mut out = BytesMut::with_capacity(block.len() + frame::HEAD_LEN);
        frame::put_headers(1 + 2 * i as u32, &block, false, 16_384, &mut out);
        written += out.len();
    }
    println!("{n} requests, {written} bytes of response heads");
}
