//! The responses the router writes to HTTP/1.1 clients, written as hyper's server writes
//! them (hyper 1.x `proto::h1::role::Server::encode`), so that a client cannot
//! tell which of the two served it: the status line (a member's own reason
//! phrase kept), lower-case names, one line per value except `connection`,
//! `transfer-encoding` and `trailer` (joined), `content-length` or
//! `transfer-encoding: chunked` by the same rules, `date` when the response has
//! none, and trailers only for the fields the response's `Trailer` names. A
//! member's fields come as they were sent (no map: see `h1_codec::fields`) and
//! are written first, in their order, by the same rules (a property test holds
//! them to what their map would give).
//!
//! Pure: bytes out only, no I/O (the connection loop is the router's
//! `request::connection::h1`).

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode};

use super::{encode_chunk, encode_field};
use crate::fields::{Fields, Name};
use crate::hop::end_to_end;
use crate::length::content_length;

/// What the body's framing will be, from the body itself (hyper's `BodyLength`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLength {
    /// The body has ended already.
    None,
    /// The body says how long it is.
    Known(u64),
    /// It does not.
    Unknown,
}

/// How the body is written.
#[derive(Debug, PartialEq, Eq)]
pub enum Encoder {
    /// This many bytes still to write.
    Length(u64),
    /// Chunked, with the trailer fields the response announced (`None`: trailers
    /// are dropped, as hyper drops them).
    Chunked(Option<Vec<HeaderName>>),
    /// Up to the connection's close.
    CloseDelimited,
}

/// The head written and what follows it.
#[derive(Debug)]
pub struct Head {
    pub encoder: Encoder,
    /// The connection closes after this response.
    pub last: bool,
}

/// A `date` value, formatted once per second per connection.
#[derive(Default)]
pub struct DateCache {
    second: u64,
    text: String,
}

impl DateCache {
    /// The `date` value for now, formatted again only when the second turned.
    pub fn value(&mut self) -> &[u8] {
        let now = std::time::SystemTime::now();
        let second = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if second != self.second || self.text.is_empty() {
            self.second = second;
            self.text = httpdate::fmt_http_date(now);
        }
        self.text.as_bytes()
    }
}

fn can_chunked(method: &Method, status: StatusCode) -> bool {
    !(*method == Method::HEAD
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED)
}

fn can_have_content_length(status: StatusCode) -> bool {
    !(status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED)
}

/// A response head to write: the response's status and map, and what comes
/// with it.
pub struct ToWrite<'a> {
    pub parts: &'a http::response::Parts,
    /// A member's own reason phrase (hyper's `ReasonPhrase`), kept.
    pub reason: Option<&'a [u8]>,
    /// A member's fields as they came (the router's `request::Answer`),
    /// written first.
    pub member: Option<&'a Fields>,
    /// Whole field lines (`name: value\r\n`, names in lower case) written
    /// after the member's fields: what the router sets in place of some of
    /// them (an app's response header actions), none of them a framing field
    /// or `date`.
    pub added: &'a [u8],
    /// `X-Request-Id`, written last, in place of a member's.
    pub request_id: Option<&'a [u8]>,
    /// The request's method (a response to `HEAD` has no body).
    pub method: &'a Method,
    pub body: BodyLength,
}

/// Appends the head of `response` to `out`: first the member's fields, then
/// those of its map, then `X-Request-Id`, then the framing and `date` if none
/// came.
pub fn encode_head(response: &ToWrite<'_>, date: &mut DateCache, out: &mut Vec<u8>) -> Head {
    let ToWrite {
        parts,
        reason,
        member,
        added,
        request_id,
        method,
        body,
    } = *response;
    let status = parts.status;
    status_line(status, reason, out);
    let mut w = Written {
        chunkable: can_chunked(method, status),
        method,
        body,
        last: false,
        wrote_len: false,
        wrote_date: false,
        encoder: Encoder::Length(0),
        trailers: None,
    };
    if let Some(fields) = member {
        w.member_fields(fields, &parts.headers, request_id.is_some(), out);
    }
    out.extend_from_slice(added);
    w.map_fields(&parts.headers, out);
    if let Some(id) = request_id {
        out.extend_from_slice(b"x-request-id: ");
        out.extend_from_slice(id);
        out.extend_from_slice(b"\r\n");
    }
    let Written {
        chunkable,
        mut last,
        wrote_len,
        wrote_date,
        mut encoder,
        trailers,
        ..
    } = w;
    if !wrote_len {
        (encoder, last) = unframed(body, chunkable, status, method, last, out);
    }
    if !chunkable {
        encoder = Encoder::Length(0);
    }
    if let (Encoder::Chunked(allowed), Some(names)) = (&mut encoder, trailers) {
        *allowed = Some(names);
    }
    if !wrote_date {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(date.value());
        out.extend_from_slice(b"\r\n\r\n");
    } else {
        out.extend_from_slice(b"\r\n");
    }
    Head { encoder, last }
}

/// What writing a head's fields has found so far.
struct Written<'m> {
    /// The response may have a body (not to HEAD, not 1xx, 204, 304).
    chunkable: bool,
    method: &'m Method,
    body: BodyLength,
    last: bool,
    wrote_len: bool,
    wrote_date: bool,
    encoder: Encoder,
    trailers: Option<Vec<HeaderName>>,
}

impl Written<'_> {
    /// A member's fields, line by line in the order they came (no hop-by-hop one
    /// among them, so no `connection` or `transfer-encoding`); `added`: what the
    /// router puts in place of some of them.
    fn member_fields(
        &mut self,
        fields: &Fields,
        added: &HeaderMap,
        own_id: bool,
        out: &mut Vec<u8>,
    ) {
        let mut member_len = false;
        for (kind, name, value) in end_to_end(fields, added) {
            match kind {
                Name::XRequestId if own_id => {}
                // The first one, as from a map (a member's lengths agree).
                Name::ContentLength if member_len => {}
                Name::ContentLength => {
                    member_len = true;
                    if let Some((e, closes)) = length_field(value, self.body, self.method, out) {
                        (self.encoder, self.wrote_len) = (e, true);
                        self.last |= closes;
                    }
                }
                Name::Trailer if self.chunkable => {
                    let names = self.trailers.get_or_insert_with(Vec::new);
                    trailer_field(std::iter::once(value), names, out);
                }
                Name::Trailer => {}
                _ => {
                    self.wrote_date |= kind == Name::Date;
                    // Lower case, as from a map (and as h2 and haproxy write names).
                    let at = out.len();
                    out.extend_from_slice(name);
                    out[at..].make_ascii_lowercase();
                    out.extend_from_slice(b": ");
                    out.extend_from_slice(value);
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
    }

    /// The fields of a map, in one pass (a map yields a name's values one after
    /// another): no lookup per name, which would hash each name again.
    fn map_fields(&mut self, headers: &HeaderMap, out: &mut Vec<u8>) {
        let mut fields = headers.iter().peekable();
        let mut previous: Option<&HeaderName> = None;
        while let Some((name, first)) = fields.next() {
            // Values of the name just written that its arm did not take.
            if previous == Some(name) {
                continue;
            }
            previous = Some(name);
            let mut values = std::iter::once(first).chain(std::iter::from_fn(|| {
                fields.next_if(|(n, _)| *n == name).map(|(_, v)| v)
            }));
            match *name {
                header::CONTENT_LENGTH => {
                    let Some(first) = values.next() else { continue };
                    let length = length_field(first.as_bytes(), self.body, self.method, out);
                    if let Some((e, closes)) = length {
                        (self.encoder, self.wrote_len) = (e, true);
                        self.last |= closes;
                    }
                }
                header::TRANSFER_ENCODING if self.chunkable => {
                    transfer_encoding_field(values.map(HeaderValue::as_bytes), out);
                    (self.encoder, self.wrote_len) = (Encoder::Chunked(None), true);
                }
                header::CONNECTION => {
                    let last = &mut self.last;
                    list_field(
                        b"connection: ",
                        values.map(HeaderValue::as_bytes),
                        out,
                        |v| {
                            if v.split(|b| *b == b',')
                                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
                            {
                                *last = true;
                            }
                        },
                    );
                    out.extend_from_slice(b"\r\n");
                }
                header::TRAILER if self.chunkable => {
                    let names = self.trailers.get_or_insert_with(Vec::new);
                    trailer_field(values.map(HeaderValue::as_bytes), names, out);
                }
                header::TRANSFER_ENCODING | header::TRAILER => {}
                _ => {
                    self.wrote_date |= *name == header::DATE;
                    for v in values {
                        encode_field(name, v, out);
                    }
                }
            }
        }
    }
}

/// A member's `Content-Length` as the client gets it (the framing and whether
/// the connection then closes), or `None` when it is left out (no body, and not
/// a HEAD response). The one rule reads it; hyper refuses to send a response
/// whose length it cannot read, so that closes instead of guessing.
#[inline]
fn length_field(
    first: &[u8],
    body: BodyLength,
    method: &Method,
    out: &mut Vec<u8>,
) -> Option<(Encoder, bool)> {
    let framing = match body {
        BodyLength::Known(n) => (Encoder::Length(n), false),
        BodyLength::Unknown => match content_length([first]) {
            Ok(Some(n)) => (Encoder::Length(n), false),
            _ => (Encoder::CloseDelimited, true),
        },
        // No body: only a HEAD response keeps its length.
        BodyLength::None if *method != Method::HEAD => return None,
        BodyLength::None => (Encoder::Length(0), false),
    };
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(first);
    out.extend_from_slice(b"\r\n");
    Some(framing)
}

/// `transfer-encoding` joined on one line, ending in `chunked`.
#[inline]
fn transfer_encoding_field<'a>(values: impl Iterator<Item = &'a [u8]>, out: &mut Vec<u8>) {
    let mut chunked_last = false;
    list_field(b"transfer-encoding: ", values, out, |v| {
        chunked_last = v
            .rsplit(|b| *b == b',')
            .next()
            .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
    });
    if !chunked_last {
        out.extend_from_slice(b", chunked");
    }
    out.extend_from_slice(b"\r\n");
}

/// `trailer` joined on one line; the names it announces kept in `names`.
#[inline]
fn trailer_field<'a>(
    values: impl Iterator<Item = &'a [u8]>,
    names: &mut Vec<HeaderName>,
    out: &mut Vec<u8>,
) {
    list_field(b"trailer: ", values, out, |v| {
        // Names only from a value of visible ASCII (what `to_str` takes).
        if v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)) {
            names.extend(
                v.split(|b| *b == b',')
                    .filter_map(|n| HeaderName::from_bytes(n.trim_ascii()).ok()),
            );
        }
    });
    out.extend_from_slice(b"\r\n");
}

/// The status line, with the member's reason phrase if it had its own.
fn status_line(status: StatusCode, reason: Option<&[u8]>, out: &mut Vec<u8>) {
    if status == StatusCode::OK && reason.is_none() {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    match reason {
        Some(r) => out.extend_from_slice(r),
        None => out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
}

/// A field line's start: `prefix` and the values joined by ", " (as hyper folds
/// them), each value shown to `seen`; the caller ends the line.
fn list_field<'a>(
    prefix: &[u8],
    values: impl Iterator<Item = &'a [u8]>,
    out: &mut Vec<u8>,
    mut seen: impl FnMut(&[u8]),
) {
    out.extend_from_slice(prefix);
    for (i, v) in values.enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(v);
        seen(v);
    }
}

/// The framing of a response whose member named none: chunked, to the close, or
/// a length; returns the encoder and whether the connection ends after it.
fn unframed(
    body: BodyLength,
    chunkable: bool,
    status: StatusCode,
    method: &Method,
    mut last: bool,
    out: &mut Vec<u8>,
) -> (Encoder, bool) {
    let encoder = match body {
        BodyLength::Unknown if chunkable => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
            Encoder::Chunked(None)
        }
        BodyLength::Unknown => {
            last = true;
            Encoder::CloseDelimited
        }
        BodyLength::None | BodyLength::Known(0) => {
            if can_have_content_length(status) && *method != Method::HEAD {
                out.extend_from_slice(b"content-length: 0\r\n");
            }
            Encoder::Length(0)
        }
        BodyLength::Known(n) if can_have_content_length(status) => {
            out.extend_from_slice(b"content-length: ");
            out.extend_from_slice(n.to_string().as_bytes());
            out.extend_from_slice(b"\r\n");
            Encoder::Length(n)
        }
        BodyLength::Known(_) => Encoder::Length(0),
    };
    (encoder, last)
}

/// What writing a body frame found.
#[derive(Debug, PartialEq, Eq)]
pub enum Wrote {
    /// More may follow.
    More,
    /// The body is complete as framed (what went past its length was dropped,
    /// as hyper drops it).
    Done,
}

impl Encoder {
    /// Appends one data frame.
    pub fn data(&mut self, data: &Bytes, out: &mut Vec<u8>) -> Wrote {
        match self {
            Encoder::Length(left) => {
                let n = usize::try_from(*left).map_or(data.len(), |l| l.min(data.len()));
                out.extend_from_slice(&data[..n]);
                *left -= n as u64;
                if *left == 0 { Wrote::Done } else { Wrote::More }
            }
            Encoder::Chunked(_) => {
                encode_chunk(data, out);
                Wrote::More
            }
            Encoder::CloseDelimited => {
                out.extend_from_slice(data);
                Wrote::More
            }
        }
    }

    /// Appends the end of the body (with the announced trailers, if any); false if
    /// the body ended short of its length.
    pub fn end(&mut self, trailers: Option<&HeaderMap>, out: &mut Vec<u8>) -> bool {
        match self {
            Encoder::Length(left) => *left == 0,
            Encoder::Chunked(allowed) => {
                out.extend_from_slice(b"0\r\n");
                if let (Some(trailers), Some(allowed)) = (trailers, allowed.as_ref()) {
                    for (name, value) in trailers {
                        if allowed.contains(name) && valid_trailer(name) {
                            encode_field(name, value, out);
                        }
                    }
                }
                out.extend_from_slice(b"\r\n");
                true
            }
            Encoder::CloseDelimited => true,
        }
    }
}

/// RFC 9110 §6.5.1: fields that must not be trailers (hyper's list).
fn valid_trailer(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::AUTHORIZATION
            | header::CACHE_CONTROL
            | header::CONTENT_ENCODING
            | header::CONTENT_LENGTH
            | header::CONTENT_RANGE
            | header::CONTENT_TYPE
            | header::HOST
            | header::MAX_FORWARDS
            | header::SET_COOKIE
            | header::TRAILER
            | header::TRANSFER_ENCODING
            | header::TE
    )
}
