//! How long each compression level holds a thread: 4 MiB of page-like text
//! (the echo backend's `page_bytes`, about 4:1 with gzip) through brotli and
//! zstd at each level, as the router's encoder writes it, the throughput, the
//! ratio and the time per 64 KiB chunk. What `compression.brotli_level` and
//! `compression.zstd_level` are capped by (bench/RESULTS.md, "Compression
//! levels and the poll's time").
//!
//! usage: cargo run --release -p e2e --bin bench-levels

use std::io::Write;
use std::time::Instant;

fn main() {
    let data = e2e::backend::page_bytes(0, 4 << 20);
    let report = |name: &str, level: i64, secs: f64, out: usize| {
        println!(
            "{name} {level:2}: {:6.1} MB/s  ratio {:.2}  {:7.2} ms per 64 KiB",
            4.0 / secs,
            data.len() as f64 / out as f64,
            secs * 1000.0 / 64.0
        );
    };
    for q in [4u32, 6, 8, 9, 10, 11] {
        let t = Instant::now();
        let mut w = brotli::CompressorWriter::new(Vec::new(), 64 * 1024, q, 22);
        w.write_all(&data).expect("write");
        let out = w.into_inner();
        report("brotli", i64::from(q), t.elapsed().as_secs_f64(), out.len());
    }
    for l in [3i32, 6, 9, 12, 15, 19] {
        let t = Instant::now();
        let out = zstd::encode_all(&data[..], l).expect("zstd");
        report("zstd", i64::from(l), t.elapsed().as_secs_f64(), out.len());
    }
}
