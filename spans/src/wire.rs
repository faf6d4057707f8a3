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
//! first, or small enough to size in closed form).

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
    head(&mut out, 1, resource_spans_len);
    message(&mut out, 1, resource);
    head(&mut out, 2, scope_spans_len);
    head(&mut out, 1, scope_len);
    bytes(&mut out, 1, NAME.as_bytes());
    bytes(&mut out, 2, VERSION.as_bytes());
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
        string_attribute(&mut out, 1, key, value.as_bytes());
    }
    out
}

/// A span as field 2 of its `ScopeSpans`, written in place: its length is
/// given two bytes (a span of 128 to 16 383 bytes, all but the rarest) and
/// put there once its fields are written; another length moves the span.
fn span_field(s: &SpanRecord, out: &mut Vec<u8>) {
    tag(out, 2, LEN);
    let at = out.len();
    out.extend_from_slice(&[0, 0]);
    span(s, out);
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

/// One span's fields, in the order of their numbers (as `prost` writes them).
fn span(s: &SpanRecord, out: &mut Vec<u8>) {
    let tp = &s.traceparent;
    if let Some(id) = unhex::<16>(&tp[3..35]) {
        bytes(out, 1, &id);
    }
    if let Some(id) = unhex::<8>(&tp[36..52]) {
        bytes(out, 2, &id);
    }
    if let Some(parent) = s.parent.as_ref().and_then(|p| unhex::<8>(p)) {
        bytes(out, 4, &parent);
    }
    bytes(out, 5, s.method.as_str().as_bytes());
    tag(out, 6, VARINT);
    varint(out, KIND_SERVER);
    fixed64(out, 7, s.start_unix_nanos);
    fixed64(out, 8, s.start_unix_nanos + s.end_nanos);
    attributes(s, out);
    for (moment, at) in &s.moments[..usize::from(s.moment_count)] {
        let name = moment.name().as_bytes();
        let time = s.start_unix_nanos + at;
        let len = if time == 0 { 0 } else { 9 } + len_field(2, name.len());
        head(out, 11, len);
        fixed64(out, 1, time);
        bytes(out, 2, name);
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
        head(out, 15, message_len + 2);
        bytes(out, 2, message);
        tag(out, 3, VARINT);
        varint(out, STATUS_ERROR);
    }
    let trace_flags = unhex::<1>(&tp[53..55]).map_or(0, |f| f[0]);
    let remote = if s.parent.is_some() { IS_REMOTE } else { 0 };
    let flags = u32::from(trace_flags) | HAS_IS_REMOTE | remote;
    tag(out, 16, FIXED32);
    out.extend_from_slice(&flags.to_le_bytes());
}

/// A span's attributes (field 9), in the order the collector has always
/// received them.
fn attributes(s: &SpanRecord, out: &mut Vec<u8>) {
    let (path, query) = s.path.split_once('?').unwrap_or((&s.path, ""));
    string_attribute(out, 9, "http.request.method", s.method.as_str().as_bytes());
    string_attribute(out, 9, "url.path", path.as_bytes());
    string_attribute(out, 9, "server.address", s.host.as_bytes());
    let version = version(s.version).as_bytes();
    string_attribute(out, 9, "network.protocol.version", version);
    let mut ip = itoa::Buffer::new();
    let mut text = [0u8; 45];
    let client = ip_text(s.client, &mut ip, &mut text);
    string_attribute(out, 9, "client.address", client);
    int_attribute(out, "http.response.status_code", i64::from(s.status));
    let size = i64::try_from(s.bytes).unwrap_or(i64::MAX);
    int_attribute(out, "http.response.body.size", size);
    string_attribute(out, 9, "router.request_id", s.request_id.as_bytes());
    if !query.is_empty() {
        string_attribute(out, 9, "url.query", query.as_bytes());
    }
    if let Some(app) = &s.app {
        string_attribute(out, 9, "router.app", app.as_bytes());
    }
    if let Some(member) = &s.member {
        string_attribute(out, 9, "router.member", member.as_bytes());
    }
    if s.retries > 0 {
        int_attribute(out, "router.retries", i64::from(s.retries));
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

/// A `KeyValue` whose value is a string, as field `field`.
fn string_attribute(out: &mut Vec<u8>, field: u32, key: &str, value: &[u8]) {
    // `AnyValue { string_value = 1 }`: a oneof's field is written even empty.
    let any = 1 + varint_len(value.len() as u64) + value.len();
    head(out, field, key_value_len(key, any));
    bytes(out, 1, key.as_bytes());
    head(out, 2, any);
    tag(out, 1, LEN);
    varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// A `KeyValue` whose value is an integer (field 9).
fn int_attribute(out: &mut Vec<u8>, key: &str, value: i64) {
    // `AnyValue { int_value = 3 }`, an int64 as the varint of its bits.
    let bits = value as u64;
    let any = 1 + varint_len(bits);
    head(out, 9, key_value_len(key, any));
    bytes(out, 1, key.as_bytes());
    head(out, 2, any);
    tag(out, 3, VARINT);
    varint(out, bits);
}

/// A `KeyValue`'s length: its key (field 1, left out when empty) and its
/// value (field 2, an `AnyValue` of `any` bytes).
fn key_value_len(key: &str, any: usize) -> usize {
    let key = if key.is_empty() {
        0
    } else {
        len_field(1, key.len())
    };
    key + len_field(2, any)
}

/// A message field: its head, then its bytes.
fn message(out: &mut Vec<u8>, field: u32, body: &[u8]) {
    head(out, field, body.len());
    out.extend_from_slice(body);
}

/// A bytes or string field, left out when empty (proto3's default).
fn bytes(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    if !value.is_empty() {
        message(out, field, value);
    }
}

/// A `fixed64` field, left out when 0.
fn fixed64(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        tag(out, field, FIXED64);
        out.extend_from_slice(&value.to_le_bytes());
    }
}

/// A length-delimited field's tag and length.
fn head(out: &mut Vec<u8>, field: u32, len: usize) {
    tag(out, field, LEN);
    varint(out, len as u64);
}

/// What a length-delimited field of `len` bytes takes with its tag and length.
fn len_field(field: u32, len: usize) -> usize {
    varint_len(u64::from(field) << 3) + varint_len(len as u64) + len
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire));
}

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
