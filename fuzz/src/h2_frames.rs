//! `h2_frames`: what a client sends on an HTTP/2 connection, as the
//! router's codec reads it (`h2_codec`).
//!
//! Input: a run of frames (head and payload, the last one cut where the
//! input ends). Each frame's payload is checked by its type's reader; the
//! content of HEADERS and CONTINUATION frames goes through one HPACK
//! decoder, so that the dynamic table carries over as on a connection.
//! Properties: no panic; the table never holds more than was advertised;
//! every block the decoder takes, written again by the server's own encoder
//! (as trailers: no `:status`), reads back as the same fields in the same
//! order, leaving nothing in a fresh decoder's table; the same blocks read
//! as request heads (`h2_codec::head`) by a second decoder leave its table
//! as the first's, whether the head is taken or refused.

use bytes::{Bytes, BytesMut};
use h2_codec::frame::{self, Head};
use h2_codec::head;
use h2_codec::hpack::{self, Decoder};

const TABLE: usize = 4096;

pub fn h2_frames(data: &[u8]) {
    let mut decoders = (Decoder::new(TABLE), Decoder::new(TABLE));
    let mut rest = data;
    while let Some(h) = frame::head(rest) {
        let body = &rest[frame::HEAD_LEN..];
        let payload = &body[..body.len().min(h.len as usize)];
        check(&h, payload, &mut decoders);
        assert!(decoders.0.size() <= TABLE, "the table past its size");
        rest = &body[payload.len()..];
    }
}

fn check(h: &Head, payload: &[u8], decoders: &mut (Decoder, Decoder)) {
    match h.kind {
        frame::SETTINGS => drop(frame::settings(h, payload)),
        frame::WINDOW_UPDATE => drop(frame::window_update(h, payload)),
        frame::RST_STREAM => drop(frame::rst_stream(h, payload)),
        frame::PING => drop(frame::ping(h, payload)),
        frame::GOAWAY => drop(frame::goaway(h, payload)),
        frame::PRIORITY => drop(frame::priority(h, payload)),
        frame::DATA | frame::HEADERS | frame::CONTINUATION => {
            let range = match h.kind {
                frame::CONTINUATION => Ok(0..payload.len()),
                _ => frame::content_range(h, payload),
            };
            let Ok(range) = range else {
                return;
            };
            assert!(range.start <= range.end && range.end <= payload.len());
            if h.kind != frame::DATA {
                let bytes = Bytes::copy_from_slice(&payload[range]);
                let fields_ok = block(&bytes, &mut decoders.0);
                let head = head::request(&mut decoders.1, &bytes, 8192);
                if head.as_ref().is_err_and(|e| e.connection) {
                    // The block is broken: the connection ends; start over.
                    assert!(!fields_ok, "a head refused whole, its fields read");
                    *decoders = (Decoder::new(TABLE), Decoder::new(TABLE));
                    return;
                }
                assert!(fields_ok, "a head read from a block its fields were not");
                assert_eq!(
                    decoders.0.size(),
                    decoders.1.size(),
                    "the tables out of step"
                );
            }
        }
        _ => {}
    }
}

/// A header block through the connection's decoder, and what it held
/// through the server's encoder and a fresh decoder; whether it decoded.
fn block(block: &Bytes, decoder: &mut Decoder) -> bool {
    let mut fields: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let taken = decoder.decode(block, |n, v| {
        fields.push((n.as_bytes().to_vec(), v.as_bytes().to_vec()));
        Ok(())
    });
    if taken.is_err() {
        return false;
    }
    // The encoder takes names as `http` keeps them: lowercase text.
    let names: Vec<String> = fields
        .iter()
        .map(|(n, _)| String::from_utf8_lossy(n).to_ascii_lowercase())
        .collect();
    let mut out = BytesMut::new();
    let pairs = names
        .iter()
        .zip(&fields)
        .map(|(n, (_, v))| (n.as_str(), &v[..]));
    hpack::encode(None, pairs, &mut out);
    let mut fresh = Decoder::new(TABLE);
    let mut again = Vec::new();
    fresh
        .decode(&out.freeze(), |n, v| {
            again.push((n.as_bytes().to_vec(), v.as_bytes().to_vec()));
            Ok(())
        })
        .expect("our own block decodes");
    let want: Vec<(Vec<u8>, Vec<u8>)> = names
        .iter()
        .zip(&fields)
        .map(|(n, (_, v))| (n.as_bytes().to_vec(), v.clone()))
        .collect();
    assert_eq!(again, want, "written again, read back otherwise");
    assert_eq!(fresh.size(), 0, "our blocks leave nothing in the table");
    true
}
