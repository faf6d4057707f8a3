//! HTTP/1.1 framing towards members: the request head we write, the response head
//! we parse, and the body framing between them (length, chunked, or up to close).
//!
//! Hand-written on `httparse` instead of hyper's client because the client's
//! dispatch (a request channel and a response oneshot per request, a body channel
//! per response) was the largest piece of library machinery left on the request
//! path (bench/RESULTS.md, issue 12). The part here is small and pure: no I/O, only
//! bytes in and out, so that it can be property-tested over every way a response
//! can be split across reads (`h1/tests.rs`). The connection that drives it is
//! [`super::conn`].
//!
//! What a member may send is read the way hyper's client read it: `Transfer-Encoding`
//! wins over `Content-Length` (and then the connection is not reused); differing
//! `Content-Length`s are an error; a `Transfer-Encoding` that does not end in
//! `chunked` means the body runs to the close; 1xx heads before the final one are
//! skipped; HEAD, 204 and 304 responses have no body.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

/// At most this many header fields in a response head (hyper's client default).
const MAX_HEADERS: usize = 100;
/// A response head (or a trailer block) larger than this is refused.
pub const MAX_HEAD: usize = 64 * 1024;
/// A chunk-size line (with extensions) longer than this is refused.
const MAX_CHUNK_LINE: usize = 1024;

/// A member's bytes that are not HTTP/1.1 as we read it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("response head: {0}")]
    Head(&'static str),
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("chunked body: {0}")]
    Chunk(&'static str),
}

/// How a message's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body at all.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the member closes the connection (responses only).
    Close,
}

/// A parsed final response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub framing: BodyFraming,
    /// The connection may carry another request once this response has ended.
    pub keep_alive: bool,
    /// The member's reason phrase, when it is not the standard one for the status
    /// (passed on to HTTP/1 clients as hyper's client did).
    pub reason: Option<hyper::ext::ReasonPhrase>,
}

/// Writes a request head into `out` and says how its body is framed.
///
/// `body_len`: `None` when the request has no body to send; otherwise its exact
/// length if known. The framing follows what the headers say (the client's framing
/// was checked on the way in: a single `chunked`, or a `Content-Length`); a body
/// of unknown length without either is sent chunked (h2 clients).
pub fn encode_request_head(
    method: &Method,
    target: &str,
    headers: &mut HeaderMap,
    body_len: Option<Option<u64>>,
    out: &mut Vec<u8>,
) -> BodyFraming {
    let framing = match body_len {
        None => {
            headers.remove(header::TRANSFER_ENCODING);
            BodyFraming::Empty
        }
        Some(len) => {
            if headers.contains_key(header::TRANSFER_ENCODING) {
                headers.remove(header::CONTENT_LENGTH);
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
                BodyFraming::Chunked
            } else if let Some(n) = content_length(headers).ok().flatten() {
                BodyFraming::Length(n)
            } else if let Some(n) = len {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                BodyFraming::Length(n)
            } else {
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
                BodyFraming::Chunked
            }
        }
    };
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers.iter() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

/// Appends one data chunk in chunked coding (nothing for an empty one: a zero-size
/// chunk would end the body).
pub fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:X}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// Appends the last chunk and the trailers, if any.
pub fn encode_last_chunk(trailers: Option<&HeaderMap>, out: &mut Vec<u8>) {
    out.extend_from_slice(b"0\r\n");
    for (name, value) in trailers.into_iter().flatten() {
        encode_field(name, value, out);
    }
    out.extend_from_slice(b"\r\n");
}

/// Appends one header field line.
pub fn encode_field(name: &HeaderName, value: &HeaderValue, out: &mut Vec<u8>) {
    out.extend_from_slice(name.as_str().as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The value of `Content-Length`: `Ok(None)` if absent, an error if invalid or if
/// several values differ.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ParseError> {
    let mut found = None;
    for v in headers.get_all(header::CONTENT_LENGTH) {
        for part in v.as_bytes().split(|b| *b == b',') {
            let part = part.trim_ascii();
            if part.is_empty() || part.len() > 19 || !part.iter().all(u8::is_ascii_digit) {
                return Err(ParseError::Head("invalid content-length"));
            }
            let n = std::str::from_utf8(part)
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or(ParseError::Head("invalid content-length"))?;
            match found {
                Some(m) if m != n => return Err(ParseError::Head("differing content-lengths")),
                _ => found = Some(n),
            }
        }
    }
    Ok(found)
}

/// The fields httparse found in the head that is the first `len` bytes of `buf`, as
/// a map (with room for `room` more) whose values are slices of one copy of the
/// head, returned with it. Names are mostly standard (no allocation); values are
/// not copied one by one. The copy (a few hundred bytes) leaves `buf` unshared, so
/// its next reserve does not allocate. `None`: a name or value `http` refuses.
pub fn header_map(
    buf: &[u8],
    len: usize,
    fields: &[httparse::Header<'_>],
    room: usize,
) -> Option<(Bytes, HeaderMap)> {
    let head = Bytes::copy_from_slice(buf.get(..len)?);
    let base = buf.as_ptr() as usize;
    let mut headers = HeaderMap::with_capacity(fields.len() + room);
    for h in fields {
        let at = (h.value.as_ptr() as usize).checked_sub(base)?;
        let name = HeaderName::from_bytes(h.name.as_bytes()).ok()?;
        let value = HeaderValue::from_maybe_shared(head.slice(at..at + h.value.len())).ok()?;
        headers.append(name, value);
    }
    Some((head, headers))
}

/// Whether a comma-separated header says `token` (ASCII case-insensitive).
fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.as_bytes()
            .split(|b| *b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// Parses the final response head at the start of `buf` and removes it (and any
/// 1xx heads before it) from `buf`. `Ok(None)`: more bytes are needed. `head`:
/// the request was HEAD (its response has no body whatever it says).
pub fn parse_response_head(
    buf: &mut BytesMut,
    head: bool,
) -> Result<Option<ResponseHead>, ParseError> {
    loop {
        // Uninitialised slots: initialising 100 of them costs more than the parse.
        let mut slots =
            [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default()
            .parse_response_with_uninit_headers(&mut res, buf, &mut slots);
        let len = match parsed {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
                return Err(ParseError::HeadTooLarge);
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => {
                return Err(ParseError::Head("too many header fields"));
            }
            Err(_) => return Err(ParseError::Head("malformed")),
        };
        let code = res.code.ok_or(ParseError::Head("no status"))?;
        let status = StatusCode::from_u16(code).map_err(|_| ParseError::Head("bad status"))?;
        let version = match res.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        if status.is_informational() {
            if status == StatusCode::SWITCHING_PROTOCOLS {
                // Upgrades take their own path (hyper's, see `Upstream::send_upgrade`).
                return Err(ParseError::Head(
                    "101 to a request that asked for no upgrade",
                ));
            }
            buf.advance(len);
            continue;
        }
        let reason = res
            .reason
            .filter(|r| status.canonical_reason() != Some(*r))
            .and_then(|r| hyper::ext::ReasonPhrase::try_from(r.as_bytes().to_vec()).ok());
        let Some((_, headers)) = header_map(buf, len, res.headers, 0) else {
            return Err(ParseError::Head("bad header"));
        };
        buf.advance(len);
        let mut keep_alive = if version == Version::HTTP_10 {
            has_token(&headers, &header::CONNECTION, "keep-alive")
        } else {
            !has_token(&headers, &header::CONNECTION, "close")
        };
        let framing =
            if head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
                BodyFraming::Empty
            } else if headers.contains_key(header::TRANSFER_ENCODING) {
                // RFC 9112 §6.1: an HTTP/1.0 message with a Transfer-Encoding has
                // faulty framing (a coding forwarded by something that did not
                // know it); hyper's client refuses it too (found by the
                // `member_response` fuzz target).
                if version == Version::HTTP_10 {
                    return Err(ParseError::Head(
                        "Transfer-Encoding in an HTTP/1.0 response",
                    ));
                }
                // Codings are tokens: hyper's client reads a value with a byte
                // outside ASCII as no coding at all (to the close) where this
                // reader would find `chunked` at its end (found by the
                // `member_response` fuzz target).
                if headers
                    .get_all(header::TRANSFER_ENCODING)
                    .iter()
                    .any(|v| v.to_str().is_err())
                {
                    return Err(ParseError::Head("Transfer-Encoding not ASCII"));
                }
                // With a Content-Length beside it, the message is suspect: read it
                // by its Transfer-Encoding, never reuse the connection.
                if headers.contains_key(header::CONTENT_LENGTH) {
                    keep_alive = false;
                }
                let last_is_chunked = headers
                    .get_all(header::TRANSFER_ENCODING)
                    .iter()
                    .next_back()
                    .and_then(|v| v.as_bytes().rsplit(|b| *b == b',').next())
                    .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
                if last_is_chunked && version == Version::HTTP_11 {
                    BodyFraming::Chunked
                } else {
                    BodyFraming::Close
                }
            } else {
                match content_length(&headers)? {
                    Some(0) => BodyFraming::Empty,
                    Some(n) => BodyFraming::Length(n),
                    None => BodyFraming::Close,
                }
            };
        if framing == BodyFraming::Close {
            keep_alive = false;
        }
        return Ok(Some(ResponseHead {
            status,
            version,
            headers,
            framing,
            keep_alive,
            reason,
        }));
    }
}

/// What [`Chunked::decode`] found next.
#[derive(Debug, PartialEq)]
pub enum Decoded {
    Data(Bytes),
    /// The trailer fields after the last chunk (only when there were some).
    Trailers(HeaderMap),
    /// The body has ended (after its trailers, if any).
    End,
    /// The buffer holds nothing more to decode: read more.
    More,
}

/// A chunked body being read (RFC 9112 §7.1).
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// At a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk's data, this much left.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: trailer fields up to the empty line.
    Trailers,
    Done,
}

impl Chunked {
    /// Decodes from the start of `buf`, removing what it consumed; data is handed
    /// out without copying (split from `buf`).
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Decoded, ParseError> {
        loop {
            match self.state {
                ChunkState::Done => return Ok(Decoded::End),
                ChunkState::Size => {
                    let Some(eol) = line_end(buf, MAX_CHUNK_LINE)? else {
                        return Ok(Decoded::More);
                    };
                    let line = &buf[..eol];
                    let digits = line
                        .iter()
                        .position(|b| !b.is_ascii_hexdigit())
                        .unwrap_or(line.len());
                    let rest = line[digits..].trim_ascii_start();
                    // Only chunk extensions may follow the size (`;name=value`),
                    // and never a control byte: a bare CR would end the line for
                    // hyper's client (found by the `member_response` fuzz target).
                    if digits == 0
                        || digits > 16
                        || !(rest.is_empty() || rest.first().is_some_and(|b| *b == b';'))
                        || line[digits..]
                            .iter()
                            .any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
                    {
                        return Err(ParseError::Chunk("bad chunk size"));
                    }
                    let mut size: u64 = 0;
                    for &b in &line[..digits] {
                        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
                        size = size
                            .checked_mul(16)
                            .and_then(|s| s.checked_add(d))
                            .ok_or(ParseError::Chunk("chunk size overflows"))?;
                    }
                    buf.advance(eol + 2);
                    self.state = if size == 0 {
                        ChunkState::Trailers
                    } else {
                        ChunkState::Data(size)
                    };
                }
                ChunkState::Data(left) => {
                    if buf.is_empty() {
                        return Ok(Decoded::More);
                    }
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
                    let data = buf.split_to(take).freeze();
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd
                    } else {
                        ChunkState::Data(left)
                    };
                    return Ok(Decoded::Data(data));
                }
                ChunkState::DataEnd => {
                    if buf.len() < 2 {
                        return Ok(Decoded::More);
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(ParseError::Chunk("no CRLF after chunk data"));
                    }
                    buf.advance(2);
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    // The trailer section ends at an empty line; none at all is the
                    // common case.
                    if buf.starts_with(b"\r\n") {
                        buf.advance(2);
                        self.state = ChunkState::Done;
                        return Ok(Decoded::End);
                    }
                    let end = find(buf, b"\r\n\r\n", MAX_HEAD)?;
                    // Lines end with CRLF only: httparse would end the section at
                    // a bare `\n\n` before the CRLFCRLF looked for here, and hyper's
                    // client refuses it (found by the `member_response` fuzz target).
                    if bare_line_end(&buf[..end.map_or(buf.len(), |e| e + 4)]) {
                        return Err(ParseError::Chunk("bare CR or LF in the trailers"));
                    }
                    let Some(end) = end else {
                        return Ok(Decoded::More);
                    };
                    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    let trailers = match httparse::parse_headers(&buf[..end + 4], &mut slots) {
                        Ok(httparse::Status::Complete((_, fields))) => {
                            let mut map = HeaderMap::with_capacity(fields.len());
                            for h in fields {
                                let (Ok(name), Ok(value)) = (
                                    HeaderName::from_bytes(h.name.as_bytes()),
                                    HeaderValue::from_bytes(h.value),
                                ) else {
                                    return Err(ParseError::Chunk("bad trailer field"));
                                };
                                map.append(name, value);
                            }
                            map
                        }
                        _ => return Err(ParseError::Chunk("bad trailer section")),
                    };
                    buf.advance(end + 4);
                    self.state = ChunkState::Done;
                    return Ok(Decoded::Trailers(trailers));
                }
            }
        }
    }
}

/// Whether `bytes` has an LF not after a CR, or a CR before anything but an LF (a
/// CR at the very end may still be followed by its LF).
fn bare_line_end(bytes: &[u8]) -> bool {
    bytes.iter().enumerate().any(|(i, &b)| match b {
        b'\n' => i == 0 || bytes[i - 1] != b'\r',
        b'\r' => bytes.get(i + 1).is_some_and(|&n| n != b'\n'),
        _ => false,
    })
}

/// Where the CRLF ending the first line of `buf` is; an error past `limit` bytes or
/// on a bare LF.
fn line_end(buf: &[u8], limit: usize) -> Result<Option<usize>, ParseError> {
    match buf.iter().take(limit + 2).position(|b| *b == b'\n') {
        Some(0) => Err(ParseError::Chunk("bare LF")),
        Some(i) if buf[i - 1] == b'\r' => Ok(Some(i - 1)),
        Some(_) => Err(ParseError::Chunk("bare LF")),
        None if buf.len() > limit => Err(ParseError::Chunk("chunk-size line too long")),
        None => Ok(None),
    }
}

/// Where `needle` starts in `buf`; an error if it is not within `limit` bytes.
fn find(buf: &[u8], needle: &[u8], limit: usize) -> Result<Option<usize>, ParseError> {
    match buf.windows(needle.len()).position(|w| w == needle) {
        Some(i) => Ok(Some(i)),
        None if buf.len() > limit => Err(ParseError::HeadTooLarge),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests;
