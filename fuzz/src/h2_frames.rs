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
//! as the first's, whether the head is taken or refused. The same frames,
//! after the preface, go through a server connection (`h2_codec::conn`) in
//! pieces of the input's choosing, each request answered and each body
//! read as it comes: no panic, the streams never past their bound, and
//! what the connection writes is whole frames, the last a GOAWAY when it
//! ended in error.

use bytes::{Bytes, BytesMut};
use h2_codec::conn::{Conn, Event, Limits};
use h2_codec::frame::{self, Head};
use h2_codec::head;
use h2_codec::hpack::{self, Decoder};

const TABLE: usize = 4096;

pub fn h2_frames(data: &[u8]) {
    connection(data);
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

/// `data` after the preface through a server connection with small bounds,
/// in pieces whose sizes the input's bytes choose.
fn connection(data: &[u8]) {
    let limits = Limits {
        max_concurrent_streams: 4,
        stream_window: 1_000,
        connection_window: 65_535,
        max_header_list: 2_000,
        max_header_block: 4_000,
        max_resets: 8,
        max_control: 64,
    };
    let mut conn = Conn::new(limits);
    let mut buf = BytesMut::from(&frame::PREFACE[..]);
    let mut written = BytesMut::new();
    let mut rest = data;
    let mut ended = false;
    while !rest.is_empty() && !ended {
        let n = (usize::from(rest[0]) * 7 + 1).min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        let mut events = Vec::new();
        ended = conn.read(&mut buf, &mut events).is_err();
        serve(&mut conn, events);
        assert!(conn.open_streams() <= 4, "streams past their bound");
        written.unsplit(conn.output().split());
    }
    let mut at = 0;
    let mut last = None;
    while let Some(h) = frame::head(&written[at..]) {
        at += frame::HEAD_LEN + h.len as usize;
        last = Some(h.kind);
    }
    assert_eq!(at, written.len(), "the output is whole frames");
    if ended {
        assert_eq!(last, Some(frame::GOAWAY), "an error ends with GOAWAY");
    }
}

/// The server's side: each request answered with a short body (a refused
/// head with 400), each body read.
fn serve(conn: &mut Conn, events: Vec<Event>) {
    for event in events {
        match event {
            Event::Request { stream, head, .. } => {
                let status = if head.is_ok() { 200 } else { 400 };
                let fields = [("content-type", &b"text/plain"[..])];
                conn.respond(stream, Some(status), fields.into_iter(), false);
                let mut body = Bytes::from_static(b"answer");
                conn.send_data(stream, &mut body, true);
            }
            Event::Data { stream, data, .. } => conn.consumed(stream, data.len() as u32),
            _ => {}
        }
    }
}
