//! The client role's decoder: a member's response head and the framing of its
//! body (length, chunked, or up to the close), property-tested over every way a
//! response can be split across reads (`response/tests.rs`). The router's member
//! connections drive it; the health probe and the CLI's admin calls read their
//! answers with it too ([`read_whole`]).
//!
//! What a member may send is read the way hyper's client read it: `Transfer-Encoding`
//! wins over `Content-Length` (and then the connection is not reused); differing
//! `Content-Length`s are an error; a `Transfer-Encoding` that does not end in
//! `chunked` means the body runs to the close; 1xx heads before the final one are
//! skipped; HEAD, 204 and 304 responses have no body.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{StatusCode, Version};

pub use crate::BodyFraming;
use crate::chunk::{ChunkLine, ChunkLineError};
pub use crate::fields::{FieldIndex, Fields, Name};
use crate::length::content_length;
use crate::{MAX_HEAD, MAX_HEADERS};

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

/// A parsed final response head.
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    pub version: Version,
    /// The fields as they came (a proxy passes them on without a map).
    pub fields: Fields,
    pub framing: BodyFraming,
    /// The connection may carry another request once this response has ended.
    pub keep_alive: bool,
    /// The member's reason phrase, when it is not the standard one for the status
    /// (passed on to HTTP/1 clients as hyper's client did).
    pub reason: Option<Bytes>,
}

/// Whether a comma-separated header says `token` (ASCII case-insensitive).
fn has_token(fields: &Fields, name: Name, token: &str) -> bool {
    fields.get_all(name).any(|v| {
        v.split(|b| *b == b',')
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
        // A connection asks before each read, most often of an empty buffer:
        // answered here, not by a parse that finds nothing (61 instructions,
        // three times a proxied request).
        if buf.is_empty() {
            return Ok(None);
        }
        // Uninitialised slots: initialising 100 of them costs more than the parse.
        let mut slots =
            [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut res = httparse::Response::new(&mut []);
        let parsed = httparse::ParserConfig::default()
            .parse_response_with_uninit_headers(&mut res, buf, &mut slots);
        let Some(len) = complete_len(parsed, buf.len())? else {
            return Ok(None);
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
        let reason = reason_at(res.reason, status, buf);
        let Some(index) = FieldIndex::new(buf, len, res.headers) else {
            return Err(ParseError::Head("bad header"));
        };
        // The head leaves the buffer without a copy; the buffer is whole again
        // for the next response once the fields are dropped.
        let Some(fields) = Fields::with_head(buf.split_to(len).freeze(), index) else {
            return Err(ParseError::Head("bad header"));
        };
        let reason = reason.and_then(|(at, n)| fields.head_slice(at, n));
        let (framing, keep_alive) = framing_and_keep_alive(&fields, (status, version), head)?;
        return Ok(Some(ResponseHead {
            status,
            version,
            fields,
            framing,
            keep_alive,
            reason,
        }));
    }
}

/// The length of a complete head from httparse's verdict on `buffered` bytes;
/// `None`: more bytes are needed.
#[inline]
fn complete_len(
    parsed: Result<httparse::Status<usize>, httparse::Error>,
    buffered: usize,
) -> Result<Option<usize>, ParseError> {
    match parsed {
        Ok(httparse::Status::Complete(n)) => Ok(Some(n)),
        Ok(httparse::Status::Partial) if buffered > MAX_HEAD => Err(ParseError::HeadTooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(ParseError::Head("too many header fields")),
        Err(_) => Err(ParseError::Head("malformed")),
    }
}

/// Where the reason lies in `buf`, when it is not the standard one for
/// `status`.
fn reason_at(reason: Option<&str>, status: StatusCode, buf: &[u8]) -> Option<(usize, usize)> {
    let r = reason.filter(|r| status.canonical_reason() != Some(*r))?;
    Some((
        (r.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize),
        r.len(),
    ))
}

/// How a final response's body is framed, and whether its connection may
/// serve another request after it (`head`: the request was HEAD, whose
/// response has no body whatever it says).
#[inline]
fn framing_and_keep_alive(
    fields: &Fields,
    (status, version): (StatusCode, Version),
    head: bool,
) -> Result<(BodyFraming, bool), ParseError> {
    let keep_alive = if version == Version::HTTP_10 {
        has_token(fields, Name::Connection, "keep-alive")
    } else {
        !has_token(fields, Name::Connection, "close")
    };
    let no_body = head || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    let (framing, suspect) = body_framing(fields, version, no_body)?;
    Ok((
        framing,
        keep_alive && !suspect && framing != BodyFraming::Close,
    ))
}

/// How a response's body is framed by its fields (RFC 9112 §6.3), and whether
/// the framing is suspect (a `Content-Length` beside a `Transfer-Encoding`: read
/// by the coding, the connection never reused). `no_body`: a response to HEAD, a
/// 204 or a 304.
fn body_framing(
    fields: &Fields,
    version: Version,
    no_body: bool,
) -> Result<(BodyFraming, bool), ParseError> {
    if no_body {
        return Ok((BodyFraming::Empty, false));
    }
    if !fields.contains(Name::TransferEncoding) {
        let framing = match content_length(fields.get_all(Name::ContentLength))
            .map_err(|_| ParseError::Head("invalid content-length"))?
        {
            Some(0) => BodyFraming::Empty,
            Some(n) => BodyFraming::Length(n),
            None => BodyFraming::Close,
        };
        return Ok((framing, false));
    }
    // RFC 9112 §6.1: an HTTP/1.0 message with a Transfer-Encoding has faulty
    // framing (a coding forwarded by something that did not know it); hyper's
    // client refuses it too (found by the `member_response` fuzz target).
    if version == Version::HTTP_10 {
        return Err(ParseError::Head(
            "Transfer-Encoding in an HTTP/1.0 response",
        ));
    }
    // Codings are tokens: hyper's client reads a value with a byte outside ASCII
    // as no coding at all (to the close) where this reader would find `chunked`
    // at its end (found by the `member_response` fuzz target).
    if fields
        .get_all(Name::TransferEncoding)
        .any(|v| !v.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b)))
    {
        return Err(ParseError::Head("Transfer-Encoding not ASCII"));
    }
    let last_is_chunked = fields
        .get_all(Name::TransferEncoding)
        .last()
        .and_then(|v| v.rsplit(|b| *b == b',').next())
        .is_some_and(|t| t.trim_ascii().eq_ignore_ascii_case(b"chunked"));
    let framing = if last_is_chunked && version == Version::HTTP_11 {
        BodyFraming::Chunked
    } else {
        BodyFraming::Close
    };
    Ok((framing, fields.contains(Name::ContentLength)))
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
                    let size = chunk_size(&buf[..eol + 2])?;
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
                    let decoded = trailers(buf)?;
                    if !matches!(decoded, Decoded::More) {
                        self.state = ChunkState::Done;
                    }
                    return Ok(decoded);
                }
            }
        }
    }
}

/// The size a chunk-size line (with its CRLF) gives.
#[inline]
fn chunk_size(line_bytes: &[u8]) -> Result<u64, ParseError> {
    let mut line = ChunkLine::default();
    let mut size = None;
    for &b in line_bytes {
        size = line.push(b).map_err(|e| match e {
            ChunkLineError::BareLineEnd => ParseError::Chunk("bare CR or LF"),
            ChunkLineError::Bad => ParseError::Chunk("bad chunk size"),
        })?;
    }
    size.ok_or(ParseError::Chunk("bad chunk size"))
}

/// The trailer section at the start of `buf`, removed from it: the end (none
/// at all, the common case), the trailers, or `More` when it is not whole yet.
fn trailers(buf: &mut BytesMut) -> Result<Decoded, ParseError> {
    // The trailer section ends at an empty line.
    if buf.starts_with(b"\r\n") {
        buf.advance(2);
        return Ok(Decoded::End);
    }
    let end = find(buf, b"\r\n\r\n", MAX_HEAD)?;
    // Lines end with CRLF only: httparse would end the section at a bare
    // `\n\n` before the CRLFCRLF looked for here, and hyper's client refuses
    // it (found by the `member_response` fuzz target).
    if bare_line_end(&buf[..end.map_or(buf.len(), |e| e + 4)]) {
        return Err(ParseError::Chunk("bare CR or LF in the trailers"));
    }
    let Some(end) = end else {
        return Ok(Decoded::More);
    };
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let Ok(httparse::Status::Complete((_, fields))) =
        httparse::parse_headers(&buf[..end + 4], &mut slots)
    else {
        return Err(ParseError::Chunk("bad trailer section"));
    };
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
    buf.advance(end + 4);
    Ok(Decoded::Trailers(map))
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

/// A whole response read from `bytes` (the connection closed after it): the
/// head and the body by its framing, chunks joined and trailers dropped. For
/// short exchanges that read to the close (the CLI's admin calls).
pub fn read_whole(bytes: &[u8], head: bool) -> Result<(ResponseHead, Bytes), ParseError> {
    let mut buf = BytesMut::from(bytes);
    let parsed = parse_response_head(&mut buf, head)?.ok_or(ParseError::Head("incomplete"))?;
    let body = match parsed.framing {
        BodyFraming::Empty => Bytes::new(),
        BodyFraming::Close => buf.freeze(),
        BodyFraming::Length(n) => {
            let n = usize::try_from(n).map_err(|_| ParseError::Head("body too long"))?;
            if buf.len() < n {
                return Err(ParseError::Head("body cut short"));
            }
            buf.split_to(n).freeze()
        }
        BodyFraming::Chunked => {
            let mut chunked = Chunked::default();
            let mut body = BytesMut::new();
            loop {
                match chunked.decode(&mut buf)? {
                    Decoded::Data(d) => body.extend_from_slice(&d),
                    Decoded::Trailers(_) => {}
                    Decoded::End => break body.freeze(),
                    Decoded::More => return Err(ParseError::Chunk("body cut short")),
                }
            }
        }
    };
    Ok((parsed, body))
}

#[cfg(test)]
mod tests;
