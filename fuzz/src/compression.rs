//! `compression`: the `Accept-Encoding` reader (`router::request::phases::compress`)
//! and the streaming encoder behind response compression.
//!
//! Input: its first byte picks a coding and a split; up to the first newline
//! is an `Accept-Encoding` value, the rest a response body. Properties: the
//! value's choice is the same read as one field line or as two, cut at any
//! comma; the coding chosen is one the value names (or `*` covers); and the
//! body, compressed as the router streams it, decodes to the same bytes.

use std::io::Read;
use std::task::{Context, Poll, Waker};

use compress::encode::{Compressing, Compressor, Levels, StreamSlot};
use compress::{Coding, negotiate};
use router::request::phases::body::ProxyBody;

pub fn compression(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let (value, body) = match rest.iter().position(|b| *b == b'\n') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let chosen = negotiate(std::iter::once(value));
    for (i, _) in value.iter().enumerate().filter(|(_, b)| **b == b',') {
        let two = [&value[..i], &value[i + 1..]];
        assert_eq!(negotiate(two.into_iter()), chosen, "split at {i}");
    }
    if let Some(c) = chosen {
        let lower = value.to_ascii_lowercase();
        let named = |t: &[u8]| lower.windows(t.len()).any(|w| w == t);
        assert!(
            named(c.token().as_bytes()) || named(b"*"),
            "{c:?} not asked"
        );
    }
    let coding = [Coding::Gzip, Coding::Brotli, Coding::Zstd][usize::from(first % 3)];
    assert!(roundtrip(coding, body) == body, "{coding:?}: bytes changed");
}

/// `body` through the router's compressing body, then decoded.
fn roundtrip(coding: Coding, body: &[u8]) -> Vec<u8> {
    let levels = Levels {
        gzip: 1,
        brotli: 4,
        zstd: 3,
    };
    let encoder = Compressor::new(coding, levels).expect("an encoder");
    let client = per_source::KeyRule::default().key(std::net::Ipv4Addr::LOCALHOST.into());
    let share = per_source::PerSource::new(1).slot(client).expect("a share");
    let slot = StreamSlot::take(&Default::default(), 1, share).expect("a slot");
    let mut c = Compressing::new(ProxyBody::full(body.to_vec()), encoder, slot);
    let mut cx = Context::from_waker(Waker::noop());
    let mut sent = Vec::new();
    loop {
        match c.poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => sent.extend_from_slice(frame.data_ref().expect("data")),
            Poll::Ready(None) => break,
            Poll::Ready(Some(Err(e))) => panic!("{e}"),
            Poll::Pending => {} // the budget yielded: poll again
        }
    }
    assert!(c.is_end_stream() && c.size_hint().exact().is_none());
    let mut out = Vec::new();
    match coding {
        Coding::Gzip => flate2::read::GzDecoder::new(&sent[..]).read_to_end(&mut out),
        Coding::Brotli => brotli::Decompressor::new(&sent[..], 4096).read_to_end(&mut out),
        Coding::Zstd => {
            zstd::stream::read::Decoder::new(&sent[..]).and_then(|mut d| d.read_to_end(&mut out))
        }
    }
    .expect("decodes");
    out
}
