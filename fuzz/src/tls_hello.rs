//! `tls_hello`: the ClientHello reader behind SNI passthrough
//! (`router::tls::hello`), which decides on the first bytes of a TLS connection
//! whether it is relayed untouched to a member or handshaken here.
//!
//! Properties: the reader keeps every byte it was given, in order; its verdict (the
//! name, or none) is the same for the bytes whole, split in two anywhere, and
//! byte by byte; and a name it finds is the `server_name` a reader of our own
//! (below, from RFC 8446 §4.1.2 and RFC 6066 §3) finds in the first ClientHello.

use router::tls::hello::{Hello, HelloReader};

/// The reader fed `pieces` in order, then the end of the stream.
fn reading(pieces: &[&[u8]]) -> Hello {
    let mut reader = HelloReader::default();
    for piece in pieces {
        if let Some(hello) = reader.push(piece) {
            return hello;
        }
    }
    reader.end()
}

pub fn tls_hello(data: &[u8]) {
    let Some((at, stream)) = crate::split(data) else {
        return;
    };
    let whole = reading(&[stream]);
    assert!(whole.bytes == stream, "bytes lost or changed");
    let (a, b) = stream.split_at(at);
    let split = reading(&[a, b]);
    assert!(
        split.bytes == a || split.bytes == stream,
        "bytes lost or changed (split at {at})"
    );
    assert_eq!(split.sni, whole.sni, "split at {at}");
    if stream.len() <= 512 {
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(reading(&bytes).sni, whole.sni, "byte by byte");
    }
    if let Some(name) = &whole.sni {
        assert_eq!(
            server_name(stream).map(|n| n.to_ascii_lowercase()).as_ref(),
            Some(name),
            "our own reading of the ClientHello's server_name"
        );
    }
}

/// The handshake bytes of the TLS records at the start of `stream` (content type
/// 22), in order, up to the first record of another type.
fn handshake_bytes(mut stream: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while stream.len() >= 5 && stream[0] == 22 {
        let len = usize::from(u16::from_be_bytes([stream[3], stream[4]]));
        let Some(fragment) = stream.get(5..5 + len) else {
            break;
        };
        out.extend_from_slice(fragment);
        stream = &stream[5 + len..];
    }
    out
}

/// Takes `n` bytes off the front of `b`.
fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = (b.get(..n)?, b.get(n..)?);
    *b = rest;
    Some(head)
}

/// A length-prefixed vector (`width` bytes of length, big-endian).
fn vector<'a>(b: &mut &'a [u8], width: usize) -> Option<&'a [u8]> {
    let len = take(b, width)?
        .iter()
        .fold(0usize, |n, &x| (n << 8) | usize::from(x));
    take(b, len)
}

/// The `host_name` of the `server_name` extension of the ClientHello that opens
/// `stream`.
fn server_name(stream: &[u8]) -> Option<String> {
    let handshake = handshake_bytes(stream);
    let mut b = handshake.as_slice();
    if take(&mut b, 1)? != [1] {
        return None;
    }
    let mut body = vector(&mut b, 3)?;
    take(&mut body, 2 + 32)?; // legacy_version, random
    vector(&mut body, 1)?; // legacy_session_id
    vector(&mut body, 2)?; // cipher_suites
    vector(&mut body, 1)?; // legacy_compression_methods
    let mut extensions = vector(&mut body, 2)?;
    while !extensions.is_empty() {
        let kind = take(&mut extensions, 2)?;
        let mut data = vector(&mut extensions, 2)?;
        if kind == [0, 0] {
            let mut list = vector(&mut data, 2)?;
            while !list.is_empty() {
                let name_type = take(&mut list, 1)?;
                let name = vector(&mut list, 2)?;
                if name_type == [0] {
                    return String::from_utf8(name.to_vec()).ok();
                }
            }
        }
    }
    None
}
