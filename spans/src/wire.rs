//! A batch's `ExportTraceServiceRequest` written straight from its records:
//! the same bytes `prost` writes for the messages of [`crate::otlp`] (the
//! tests compare the two on records of every shape), without building them.
//!
//! Why by hand: the message tree cost about 30 allocations a span and, with
//! `prost`'s length pass over it, about 12,000 of the 19,000 instructions a
//! span at 100 % sampling cost a request (`bench/RESULTS.md`, "Spans written
//! straight from the record"). The protobuf wire format a span needs is five
//! things: a varint, a tag, a length-delimited field, a `fixed64` and a
//! `fixed32`; a nested message's length is worked out before it is written
//! (every nested message here is a span, whose bytes go to a scratch buffer
//! first, or small enough to size in closed form). A span is written by a
//! cursor over room sized for it ([`W`], inlined so that it lives in
//! registers), each attribute's key as a block made at compile time: 7,973
//! instructions a span became 6,804.

use std::net::IpAddr;

use crate::SpanRecord;

/// Wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// Span flags: `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE` and `..._IS_REMOTE`.
pub(crate) const HAS_IS_REMOTE: u32 = 0x100;
pub(crate) const IS_REMOTE: u32 = 0x200;
/// `Span.SpanKind.SPAN_KIND_SERVER`, `Status.StatusCode.STATUS_CODE_ERROR`.
const KIND_SERVER: u64 = 2;
const STATUS_ERROR: u64 = 2;

/// The batch as one request; `resource`: the resource's body, as
/// [`resource`] writes it.
pub fn encode(batch: &[Box<SpanRecord>], resource: &[u8]) -> Vec<u8> {
    let mut spans = Vec::with_capacity(batch.len() * 512);
    for record in batch {
        span_field(record, &mut spans);
    }
    let scope_len = len_field(1, NAME.len()) + len_field(2, VERSION.len());
    let scope_spans_len = len_field(1, scope_len) + spans.len();
    let resource_spans_len = len_field(1, resource.len()) + len_field(2, scope_spans_len);
    let mut out = Vec::with_capacity(len_field(1, resource_spans_len));
    append(&mut out, 64 + resource.len(), |w| {
        w.head(1, resource_spans_len);
        w.head(1, resource.len());
        w.raw(resource);
        w.head(2, scope_spans_len);
        w.head(1, scope_len);
        w.bytes(1, NAME.as_bytes());
        w.bytes(2, VERSION.as_bytes());
    });
    out.extend_from_slice(&spans);
    out
}

/// The instrumentation scope's name and version.
const NAME: &str = "router";
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A `Resource`'s body (its string attributes, field 1), encoded once for
/// every batch.
pub fn resource(attributes: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in attributes {
        let bound = 32 + key.len() + value.len();
        append(&mut out, bound, |w| {
            string_attribute(w, 1, Key::Text(key.as_bytes()), value.as_bytes());
        });
    }
    out
}

/// A span as field 2 of its `ScopeSpans`, written in place: its length is
/// given two bytes (a span of 128 to 16 383 bytes, all but the rarest) and
/// put there once its fields are written; another length moves the span.
fn span_field(s: &SpanRecord, out: &mut Vec<u8>) {
    let at = out.len() + 1;
    append(out, bound(s), |w| {
        w.byte(2 << 3 | LEN);
        w.raw(&[0, 0]);
        span(s, w);
    });
    let len = out.len() - at - 2;
    let mut length = Vec::with_capacity(0);
    if varint_len(len as u64) == 2 {
        out[at] = len as u8 | 0x80;
        out[at + 1] = (len >> 7) as u8;
    } else {
        varint(&mut length, len as u64);
        out.splice(at..at + 2, length);
    }
}

/// More than a span of `s` takes: its texts, and a kilobyte and a half for
/// the rest (its IDs, twelve attributes' keys, six moments, the status: about
/// 800 bytes at most). Were it short, [`append`] gives twice the room.
fn bound(s: &SpanRecord) -> usize {
    let texts = s.method.as_str().len()
        + s.host.len()
        + s.path.len()
        + s.request_id.len()
        + s.app.as_ref().map_or(0, String::len)
        + s.member.as_ref().map_or(0, |m| m.len());
    1536 + texts
}

/// One span's fields, in the order of their numbers (as `prost` writes them).
fn span(s: &SpanRecord, w: &mut W<'_>) {
    let tp = &s.traceparent;
    if let Some(id) = unhex::<16>(&tp[3..35]) {
        w.bytes(1, &id);
    }
    if let Some(id) = unhex::<8>(&tp[36..52]) {
        w.bytes(2, &id);
    }
    if let Some(parent) = s.parent.as_ref().and_then(|p| unhex::<8>(p)) {
        w.bytes(4, &parent);
    }
    w.bytes(5, s.method.as_str().as_bytes());
    w.byte(6 << 3 | VARINT);
    w.varint(KIND_SERVER);
    w.fixed64(7, s.start_unix_nanos);
    w.fixed64(8, s.start_unix_nanos + s.end_nanos);
    attributes(s, w);
    for (moment, at) in &s.moments[..usize::from(s.moment_count)] {
        let name = moment.name().as_bytes();
        let time = s.start_unix_nanos + at;
        let len = if time == 0 { 0 } else { 9 } + len_field(2, name.len());
        w.head(11, len);
        w.fixed64(1, time);
        w.bytes(2, name);
    }
    if s.status >= 500 || s.aborted {
        let message: &[u8] = if s.aborted {
            b"aborted before the response's end"
        } else {
            b""
        };
        let message_len = if message.is_empty() {
            0
        } else {
            len_field(2, message.len())
        };
        w.head(15, message_len + 2);
        w.bytes(2, message);
        w.byte(3 << 3 | VARINT);
        w.varint(STATUS_ERROR);
    }
    let trace_flags = unhex::<1>(&tp[53..55]).map_or(0, |f| f[0]);
    let remote = if s.parent.is_some() { IS_REMOTE } else { 0 };
    let flags = u32::from(trace_flags) | HAS_IS_REMOTE | remote;
    w.varint(u64::from(16u32 << 3 | u32::from(FIXED32)));
    w.raw(&flags.to_le_bytes());
}

/// The span attributes' keys, each with its field's tag and length.
const METHOD: Key = Key::block("http.request.method");
const PATH: Key = Key::block("url.path");
const ADDRESS: Key = Key::block("server.address");
const PROTOCOL: Key = Key::block("network.protocol.version");
const CLIENT: Key = Key::block("client.address");
const STATUS: Key = Key::block("http.response.status_code");
const SIZE: Key = Key::block("http.response.body.size");
const REQUEST_ID: Key = Key::block("router.request_id");
const QUERY: Key = Key::block("url.query");
const APP: Key = Key::block("router.app");
const MEMBER: Key = Key::block("router.member");
const RETRIES: Key = Key::block("router.retries");

/// A span's attributes (field 9), in the order the collector has always
/// received them.
#[inline(always)]
fn attributes(s: &SpanRecord, w: &mut W<'_>) {
    let (path, query) = s.path.split_once('?').unwrap_or((&s.path, ""));
    string_attribute(w, 9, METHOD, s.method.as_str().as_bytes());
    string_attribute(w, 9, PATH, path.as_bytes());
    string_attribute(w, 9, ADDRESS, s.host.as_bytes());
    string_attribute(w, 9, PROTOCOL, version(s.version).as_bytes());
    let mut ip = itoa::Buffer::new();
    let mut text = [0u8; 45];
    let client = ip_text(s.client, &mut ip, &mut text);
    string_attribute(w, 9, CLIENT, client);
    int_attribute(w, STATUS, i64::from(s.status));
    int_attribute(w, SIZE, i64::try_from(s.bytes).unwrap_or(i64::MAX));
    string_attribute(w, 9, REQUEST_ID, s.request_id.as_bytes());
    if !query.is_empty() {
        string_attribute(w, 9, QUERY, query.as_bytes());
    }
    if let Some(app) = &s.app {
        string_attribute(w, 9, APP, app.as_bytes());
    }
    if let Some(member) = &s.member {
        string_attribute(w, 9, MEMBER, member.as_bytes());
    }
    if s.retries > 0 {
        int_attribute(w, RETRIES, i64::from(s.retries));
    }
}

/// `ip` as `Display` writes it (its canonical form), IPv4 without
/// `core::fmt`.
fn ip_text<'a>(ip: IpAddr, n: &mut itoa::Buffer, text: &'a mut [u8; 45]) -> &'a [u8] {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let mut len = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[len] = b'.';
                    len += 1;
                }
                let digits = n.format(octet).as_bytes();
                text[len..len + digits.len()].copy_from_slice(digits);
                len += digits.len();
            }
            &text[..len]
        }
        IpAddr::V6(v6) => {
            use std::io::Write as _;
            let mut cursor = std::io::Cursor::new(&mut text[..]);
            let _ = write!(cursor, "{v6}");
            let len = usize::try_from(cursor.position()).unwrap_or(0);
            &text[..len]
        }
    }
}

/// A `KeyValue`'s key: its field (tag, length, text) made once, or a text.
#[derive(Clone, Copy)]
enum Key<'a> {
    /// The field in a block of [`KEY_BLOCK`] bytes (its first `.1`), copied
    /// whole by one fixed-size store and cut back.
    Block([u8; KEY_BLOCK], usize),
    Text(&'a [u8]),
}

const KEY_BLOCK: usize = 32;

impl Key<'static> {
    /// `text`'s key field (at most 30 bytes: the compiler refuses more).
    const fn block(text: &str) -> Key<'static> {
        let t = text.as_bytes();
        assert!(t.len() + 2 <= KEY_BLOCK);
        let mut block = [0u8; KEY_BLOCK];
        block[0] = 1 << 3 | LEN;
        block[1] = t.len() as u8;
        let mut i = 0;
        while i < t.len() {
            block[2 + i] = t[i];
            i += 1;
        }
        Key::Block(block, t.len() + 2)
    }
}

impl Key<'_> {
    /// The bytes its field takes (none for an empty text: proto3's default).
    fn len(&self) -> usize {
        match self {
            Key::Block(_, len) => *len,
            Key::Text([]) => 0,
            Key::Text(t) => len_field(1, t.len()),
        }
    }
}

/// A `KeyValue` whose value is a string, as field `field`.
#[inline(always)]
fn string_attribute(w: &mut W<'_>, field: u32, key: Key<'_>, value: &[u8]) {
    // `AnyValue { string_value = 1 }`: a oneof's field is written even empty.
    let any = 1 + varint_len(value.len() as u64) + value.len();
    w.head(field, key.len() + len_field(2, any));
    w.key(key);
    w.head(2, any);
    w.byte(1 << 3 | LEN);
    w.varint(value.len() as u64);
    w.raw(value);
}

/// A `KeyValue` whose value is an integer (field 9).
#[inline(always)]
fn int_attribute(w: &mut W<'_>, key: Key<'_>, value: i64) {
    // `AnyValue { int_value = 3 }`, an int64 as the varint of its bits.
    let bits = value as u64;
    let any = 1 + varint_len(bits);
    w.head(9, key.len() + len_field(2, any));
    w.key(key);
    w.head(2, any);
    w.byte(3 << 3 | VARINT);
    w.varint(bits);
}

/// Appends what `write` writes, given `bound` bytes of room; again with
/// twice the room if that was short (the bounds are generous: a safeguard,
/// never the path taken).
fn append(out: &mut Vec<u8>, mut bound: usize, write: impl Fn(&mut W<'_>)) {
    let start = out.len();
    loop {
        out.resize(start + bound, 0);
        let mut w = W {
            rest: &mut out[start..],
            short: false,
        };
        write(&mut w);
        if !w.short {
            let left = w.rest.len();
            out.truncate(start + bound - left);
            return;
        }
        bound = bound.saturating_mul(2);
    }
}

/// A message being written: the room left in its buffer (what is before it
/// is written). Why not a vector: a push checks the capacity and stores the
/// length back; a span is some seventy small writes (see `bench/RESULTS.md`,
/// "Spans written by a cursor").
struct W<'a> {
    rest: &'a mut [u8],
    /// A write found too little room: the message is to be written again.
    short: bool,
}

impl W<'_> {
    /// Takes `n` written bytes off the front of the room.
    #[inline(always)]
    fn advance(&mut self, n: usize) {
        let rest = std::mem::take(&mut self.rest);
        self.rest = rest.get_mut(n..).unwrap_or_default();
    }

    #[inline(always)]
    fn raw(&mut self, bytes: &[u8]) {
        match self.rest.get_mut(..bytes.len()) {
            Some(to) => {
                to.copy_from_slice(bytes);
                self.advance(bytes.len());
            }
            None => self.short = true,
        }
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        match self.rest.first_mut() {
            Some(slot) => {
                *slot = b;
                self.advance(1);
            }
            None => self.short = true,
        }
    }

    #[inline(always)]
    fn varint(&mut self, v: u64) {
        if v < 0x80 {
            return self.byte(v as u8);
        }
        let mut buf = [0u8; 10];
        let mut n = 0;
        let mut v = v;
        while v >= 0x80 {
            buf[n] = v as u8 | 0x80;
            v >>= 7;
            n += 1;
        }
        buf[n] = v as u8;
        self.raw(&buf[..=n]);
    }

    /// A length-delimited field's tag and length.
    #[inline(always)]
    fn head(&mut self, field: u32, len: usize) {
        self.varint(u64::from(field << 3 | u32::from(LEN)));
        self.varint(len as u64);
    }

    /// A bytes or string field, left out when empty (proto3's default).
    #[inline(always)]
    fn bytes(&mut self, field: u32, value: &[u8]) {
        if !value.is_empty() {
            self.head(field, value.len());
            self.raw(value);
        }
    }

    /// A `fixed64` field, left out when 0.
    #[inline(always)]
    fn fixed64(&mut self, field: u32, value: u64) {
        if value != 0 {
            self.varint(u64::from(field << 3 | u32::from(FIXED64)));
            self.raw(&value.to_le_bytes());
        }
    }

    #[inline(always)]
    fn key(&mut self, key: Key<'_>) {
        match key {
            Key::Block(block, len) => match self.rest.first_chunk_mut() {
                Some(to) => {
                    *to = block;
                    self.advance(len);
                }
                None => self.raw(&block[..len]),
            },
            Key::Text(t) => self.bytes(1, t),
        }
    }
}

/// What a length-delimited field of `len` bytes takes with its tag and length.
fn len_field(field: u32, len: usize) -> usize {
    varint_len(u64::from(field) << 3) + varint_len(len as u64) + len
}

/// `v` as a varint, onto a vector (the rare span length of other than two
/// bytes).
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> usize {
    // One byte per seven bits; at least one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// `N` bytes from their `2 N` hex digits; `None` if they are not that.
fn unhex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    hex::decode_to_slice(digits, &mut out).ok()?;
    Some(out)
}

/// `network.protocol.version`'s text for `v`.
pub(crate) fn version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Room too small for what is written: written again with more, the
    /// same bytes as with room enough; keys as blocks and as texts alike.
    #[test]
    fn a_message_short_of_room_is_written_again_whole() {
        let write = |w: &mut W<'_>| {
            string_attribute(w, 9, APP, &[b'a'; 300]);
            string_attribute(w, 1, Key::Text(b"router.app"), &[b'a'; 300]);
            int_attribute(w, RETRIES, 3);
            w.varint(u64::MAX);
        };
        let (mut roomy, mut tight) = (Vec::new(), b"kept".to_vec());
        append(&mut roomy, 4096, write);
        append(&mut tight, 1, write);
        assert_eq!(&tight[..4], b"kept");
        assert_eq!(&tight[4..], &roomy[..]);
        let mut out = Vec::new();
        varint(&mut out, u64::MAX);
        assert!(roomy.ends_with(&out), "a varint of ten bytes");
        let (mut block, mut text) = (Vec::new(), Vec::new());
        append(&mut block, 64, |w| string_attribute(w, 9, APP, b"x"));
        append(&mut text, 64, |w| {
            string_attribute(w, 9, Key::Text(b"router.app"), b"x");
        });
        assert_eq!(block, text, "a key's two forms write the same field");
    }
}
