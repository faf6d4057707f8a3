//! `h3_frames`: what a client sends on HTTP/3 streams, as the router's codec
//! reads it (`h3_codec`).
//!
//! Input: the first byte picks what the rest is: a request's field section
//! (QPACK, decoded into a request head), trailers, a client's SETTINGS payload,
//! or a run of frame heads. Properties: no panic; a request the codec takes
//! stays within the decoded-size bound, and its regular fields, encoded by the
//! server's own encoder, decode back to the same fields in the same order; a
//! frame head read is read the same from exactly its own bytes.

use bytes::Bytes;
use h3_codec::{frame, head, qpack};

const MAX: usize = 4096;

pub fn h3_frames(data: &[u8]) {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let bytes = Bytes::copy_from_slice(rest);
    match first % 4 {
        0 => request(&bytes),
        1 => {
            let _ = head::trailers(&bytes, MAX);
        }
        2 => {
            let _ = frame::check_settings(rest);
        }
        _ => heads(rest),
    }
}

fn request(section: &Bytes) {
    let Ok(req) = head::request(section, MAX) else {
        return;
    };
    let size: usize = req
        .headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 32)
        .sum();
    assert!(size <= MAX, "decoded {size} bytes past the bound");
    let frame = qpack::headers_frame(None, req.headers());
    let h = frame::head(&frame).expect("our own frame head");
    let section = frame.slice(h.size..);
    let mut again = Vec::new();
    qpack::decode(&section, |n, v| {
        again.push((n.as_bytes().to_vec(), v.as_bytes().to_vec()));
        Ok(())
    })
    .expect("our own section decodes");
    let before: Vec<_> = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
    assert_eq!(before, again, "re-encoded fields differ");
}

fn heads(mut rest: &[u8]) {
    while let Some(h) = frame::head(rest) {
        assert!(h.size <= frame::MAX_HEAD);
        assert_eq!(frame::head(&rest[..h.size]), Some(h));
        rest = &rest[h.size..];
    }
}
