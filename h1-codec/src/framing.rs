//! HTTP/1 request framing, followed as a client connection's bytes arrive, to refuse
//! the two request-smuggling shapes hyper cannot be told to refuse:
//!
//! - a bare LF as a line end in a head or a chunked body's framing (RFC 9112 §2.2
//!   lets a recipient accept it; httparse does, so a proxy in front that does not
//!   would see other header lines than the router);
//! - `Content-Length` beside `Transfer-Encoding` (hyper lets chunked win and drops
//!   the length before the router's service sees the headers; RFC 9112 §6.1 allows
//!   refusing it, and a proxy in front may have used the length).
//!
//! [`Framing`] finds where each request's head and body end, the way hyper will
//! (a head up to its empty line; then `Transfer-Encoding` means chunked, else
//! `Content-Length`, else no body), and says at which byte the stream must be cut.
//! The router's connection reader (`router::request::connection::client_io`) then hands hyper, instead of that byte and the
//! rest, [`POISON`]: bytes that are invalid wherever hyper is in its parse, so hyper
//! answers 400 (or the body fails with 400) after the responses already due, and
//! closes. Everything hyper refuses anyway (bad chunk sizes, obsolete line folding,
//! a lone CR) is left to it; where this scanner is stricter it cuts, so the two can
//! never disagree on where a message ends.
//!
//! Hand-written because no crate follows framing without owning the connection; it
//! keeps a few bytes of state per connection and never buffers (line ends and
//! colons are found with `memchr`'s vector search: a byte-at-a-time scan was 1 750
//! instructions of a 31 000-instruction keep-alive GET), and it is
//! property-tested over arbitrary read splits (`framing::tests`). A connection whose
//! request asks for an upgrade is not followed past that request (its own body is,
//! like any other: the switch comes after it), nor an h2 prior-knowledge connection
//! past its preface (what follows is not HTTP/1); the answer to an upgrade that did
//! not happen closes the connection (`router::request::Proxy::answer`), so no request
//! follows one unchecked.
//!
//! This reader is the one owner of where a client's HTTP/1 request ends: it reports
//! each head it saw complete ([`Head`]: where it starts and ends, how its body is
//! framed), the router's own path (`router::request::connection::h1`) takes a request only where
//! its parse ends at that byte, and hyper only parses what it lets through. The fuzz targets
//! `client_framing`, `client_head` and `client_stream` (`fuzz/`, the last one
//! through the whole router against a strict reader of its own) hold the seam.

use crate::BodyFraming;
use crate::chunk::{ChunkLine, ChunkLineError};
use crate::length::content_length;

/// A request head the reader saw complete: where it starts and ends in the
/// connection's stream (offsets from the first byte fed) and how its body is framed
/// ([`BodyFraming::Close`]: it asks for an upgrade, and what follows is not
/// followed). The own path asks for it ([`Framing::head_at`]) instead of deciding
/// again where the request ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub start: u64,
    pub end: u64,
    pub body: BodyFraming,
}

/// How many finished heads are remembered: pipelined requests read in one go. An
/// older one is forgotten, and whoever asks for it is told nothing (the own path
/// then hands the connection to hyper, which reads the heads itself).
const HEADS: usize = 4;

/// What the reader hands hyper in place of the cut bytes: a control byte is invalid
/// in a request line, a header name or value, a chunk size and a chunk's line end;
/// the empty lines end any head hyper may be waiting for.
pub const POISON: &[u8] = b"\x01\r\n\r\n";

/// Why a stream was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// A line ended by LF alone, or a CR not followed by LF.
    BareLineEnd,
    /// `Content-Length` and `Transfer-Encoding` in one head.
    LengthAndChunked,
    /// A `Content-Length` that is not one decimal number (repeated or listed
    /// values must be equal).
    BadLength,
    /// A chunk size line or a chunk's end that is not what RFC 9112 §7.1 says.
    BadChunk,
    /// A `#` in the request line: a request target has no fragment (RFC 9112
    /// §3.2). hyper and the own path would drop it and forward the rest, so a
    /// rule matching the path in front of us and the member could disagree on it;
    /// Envoy refuses it too. Found by the `client_head` fuzz target.
    Fragment,
    /// A control byte or one outside ASCII in the request line: a target is
    /// ASCII (RFC 9112 §3.2, RFC 3986); hyper takes bytes above 0x7F and passes
    /// them on, a proxy in front may have read them otherwise (haproxy refuses
    /// them by default too). Found by the `client_stream` fuzz target.
    RequestLineByte,
}

impl Violation {
    pub fn as_str(self) -> &'static str {
        match self {
            Violation::BareLineEnd => "bare line end",
            Violation::LengthAndChunked => "Content-Length with Transfer-Encoding",
            Violation::BadLength => "invalid Content-Length",
            Violation::BadChunk => "invalid chunk framing",
            Violation::Fragment => "a fragment (#) in the request target",
            Violation::RequestLineByte => "a control or non-ASCII byte in the request line",
        }
    }
}

/// Where a connection's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In a head (or before one).
    Head,
    /// This many bytes of a `Content-Length` body still to come.
    Body(u64),
    /// In a chunk-size line ([`crate::chunk`]).
    ChunkSize(ChunkLine),
    /// This many bytes of chunk data, then CRLF.
    ChunkData(u64),
    /// The CR, then the LF, after a chunk's data.
    ChunkEnd { cr: bool },
    /// Trailer lines after the last chunk, until an empty line.
    Trailers,
    /// Not followed any more.
    Off,
}

/// The header lines that decide framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FramingField {
    Unknown,
    ContentLength,
    TransferEncoding,
    Upgrade,
}

impl FramingField {
    /// Which of them a whole name is (any case).
    fn of(name: &[u8]) -> FramingField {
        let (known, kind): (&[u8], FramingField) = match name.len() {
            14 => (b"content-length", FramingField::ContentLength),
            17 => (b"transfer-encoding", FramingField::TransferEncoding),
            7 => (b"upgrade", FramingField::Upgrade),
            _ => return FramingField::Unknown,
        };
        if name.eq_ignore_ascii_case(known) {
            kind
        } else {
            FramingField::Unknown
        }
    }
}

/// How many bytes of a line's start are kept to recognise its name.
const NAME_MAX: usize = 18;
/// How many bytes of a `Content-Length` value are kept (a list of equal values).
const VALUE_MAX: usize = 64;

/// The state of one connection's request framing. See the module doc.
#[derive(Debug, Clone)]
pub struct Framing {
    state: State,
    /// The previous byte was a CR (line ends may span reads).
    cr: bool,
    /// Bytes of the current line so far (saturating).
    line_len: usize,
    /// The current line's first bytes, lower-cased, until its colon.
    name: [u8; NAME_MAX],
    /// The current line's name, once its colon is seen.
    this: Option<FramingField>,
    /// A `Content-Length` value being read.
    value: [u8; VALUE_MAX],
    value_len: usize,
    /// What the head so far has said.
    saw_request_line: bool,
    length: Option<u64>,
    chunked: bool,
    upgrade: bool,
    /// The body being read is an upgrade request's: once it ends, what follows
    /// is not followed (it may be a tunnel).
    upgrading: bool,
    /// No head finished yet: an h2 preface is recognised only here.
    first: bool,
    /// Bytes fed so far: the stream offset of the next byte.
    pos: u64,
    /// Where the head being read (or the next one) starts.
    head_start: u64,
    /// A line end just moved past a message boundary ([`Framing::boundary`]).
    crossed: bool,
    /// The head that just finished, until its end offset is known.
    finished: Option<BodyFraming>,
    /// The last [`HEADS`] finished heads, the newest at `heads_seen % HEADS`.
    heads: [Option<Head>; HEADS],
    heads_seen: usize,
}

impl Default for Framing {
    fn default() -> Self {
        Framing::new()
    }
}

impl Framing {
    pub fn new() -> Framing {
        Framing {
            state: State::Head,
            cr: false,
            line_len: 0,
            name: [0; NAME_MAX],
            this: None,
            value: [0; VALUE_MAX],
            value_len: 0,
            saw_request_line: false,
            length: None,
            chunked: false,
            upgrade: false,
            upgrading: false,
            first: true,
            pos: 0,
            head_start: 0,
            crossed: false,
            finished: None,
            heads: [None; HEADS],
            heads_seen: 0,
        }
    }

    /// A framing resting at stream offset `pos`: what [`Framing::at_rest`] said
    /// of one, between two requests.
    pub fn resume(pos: u64) -> Framing {
        Framing {
            first: false,
            pos,
            head_start: pos,
            ..Framing::new()
        }
    }

    /// `Some(offset)` when nothing of a message is pending (between requests:
    /// a head and its body finished, nothing of the next one read), so that all
    /// this framing knows is where the stream stands: [`Framing::resume`] at
    /// that offset follows what comes next exactly as this one would. (The
    /// heads it remembers are of bytes already handed on; the name and value
    /// kept of a line are scratch, set afresh by the next line's bytes before
    /// they are read.) A connection waiting
    /// for its next request keeps the offset, not the framing (312 bytes).
    pub fn at_rest(&self) -> Option<u64> {
        let pending = self.state != State::Head
            || self.cr
            || self.line_len != 0
            || self.this.is_some()
            || self.saw_request_line
            || self.length.is_some()
            || self.chunked
            || self.upgrade
            || self.upgrading
            || self.first
            || self.head_start != self.pos
            || self.crossed
            || self.finished.is_some();
        (!pending).then_some(self.pos)
    }

    /// Bytes followed so far: the stream offset of the next byte (after a cut, of
    /// the cut byte).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// The finished head that starts at stream offset `start`, if it is one of the
    /// last few (see [`Head`]).
    pub fn head_at(&self, start: u64) -> Option<Head> {
        self.heads
            .iter()
            .flatten()
            .find(|h| h.start == start)
            .copied()
    }

    /// After a line end that crossed a message boundary, at stream offset `at`:
    /// the finished head is remembered, and the next head starts here.
    fn boundary(&mut self, at: u64) {
        self.crossed = false;
        if let Some(body) = self.finished.take() {
            self.heads_seen = self.heads_seen.wrapping_add(1);
            self.heads[self.heads_seen % HEADS] = Some(Head {
                start: self.head_start,
                end: at,
                body,
            });
        }
        if self.state == State::Head {
            self.head_start = at;
        }
    }

    /// Follows the next `bytes` from the client. `Some((i, why))`: `bytes[i]` and
    /// everything after must not reach hyper (and nothing more is followed).
    pub fn feed(&mut self, bytes: &[u8]) -> Option<(usize, Violation)> {
        let base = self.pos;
        self.pos += bytes.len() as u64;
        let mut i = 0;
        while i < bytes.len() {
            let step = match self.state {
                State::Off => return None,
                State::Body(left) => {
                    let take = left.min((bytes.len() - i) as u64);
                    self.state = match left - take {
                        0 => {
                            self.head_start = base + i as u64 + take;
                            self.after_body()
                        }
                        rest => State::Body(rest),
                    };
                    Ok(take as usize)
                }
                State::ChunkData(left) => {
                    let take = left.min((bytes.len() - i) as u64);
                    self.state = match left - take {
                        0 => State::ChunkEnd { cr: false },
                        rest => State::ChunkData(rest),
                    };
                    Ok(take as usize)
                }
                State::ChunkEnd { cr } => match (cr, bytes[i]) {
                    (false, b'\r') => {
                        self.state = State::ChunkEnd { cr: true };
                        Ok(1)
                    }
                    (true, b'\n') => {
                        self.state = State::ChunkSize(ChunkLine::default());
                        Ok(1)
                    }
                    _ => Err(Violation::BadChunk),
                },
                State::ChunkSize(line) => self.chunk_size(line, bytes[i]).map(|()| 1),
                State::Head | State::Trailers => {
                    match self.line_run(&bytes[i..], base + i as u64) {
                        Ok(n) => Ok(n),
                        Err((at, why)) => {
                            self.state = State::Off;
                            self.pos = base + (i + at) as u64;
                            return Some((i + at, why));
                        }
                    }
                }
            };
            match step {
                Ok(n) => i += n,
                Err(why) => {
                    self.state = State::Off;
                    self.pos = base + i as u64;
                    return Some((i, why));
                }
            }
        }
        None
    }

    /// The next byte of a chunk-size line (the one grammar: [`crate::chunk`]).
    fn chunk_size(&mut self, mut line: ChunkLine, b: u8) -> Result<(), Violation> {
        self.state = match line.push(b) {
            Ok(None) => State::ChunkSize(line),
            Ok(Some(0)) => {
                self.line_len = 0;
                State::Trailers
            }
            Ok(Some(size)) => State::ChunkData(size),
            Err(ChunkLineError::BareLineEnd) => return Err(Violation::BareLineEnd),
            Err(ChunkLineError::Bad) => return Err(Violation::BadChunk),
        };
        Ok(())
    }

    /// The next bytes of a head or of the trailers, up to and including the next CR
    /// or LF (a run at a time: most of a head is skipped, not looked at byte by
    /// byte; `rest` starts at stream offset `at`). How many were taken, or where (in
    /// `rest`) and why to cut.
    fn line_run(&mut self, rest: &[u8], at: u64) -> Result<usize, (usize, Violation)> {
        if self.cr {
            self.cr = false;
            if rest[0] != b'\n' {
                return Err((0, Violation::BareLineEnd));
            }
            self.line_end().map_err(|why| (0, why))?;
            if self.crossed {
                self.boundary(at + 1);
            }
            return Ok(1);
        }
        let end = memchr::memchr2(b'\r', b'\n', rest);
        let content = &rest[..end.unwrap_or(rest.len())];
        self.line_content(content)?;
        match end.map(|e| (e, rest[e])) {
            None => Ok(rest.len()),
            Some((e, b'\r')) => {
                self.cr = true;
                Ok(e + 1)
            }
            Some((e, _)) => Err((e, Violation::BareLineEnd)),
        }
    }

    /// Bytes of a line, no CR or LF among them.
    fn line_content(&mut self, mut content: &[u8]) -> Result<(), (usize, Violation)> {
        let start = self.line_len;
        self.line_len = self.line_len.saturating_add(content.len());
        if self.state == State::Trailers {
            return Ok(());
        }
        let keep = |name: &mut [u8; NAME_MAX], from: usize, bytes: &[u8]| {
            let room = name.get_mut(from..).unwrap_or_default();
            for (slot, b) in room.iter_mut().zip(bytes) {
                *slot = b.to_ascii_lowercase();
            }
        };
        if !self.saw_request_line
            && let Some(at) = content
                .iter()
                .position(|&b| b == b'#' || !(0x20..0x7f).contains(&b))
        {
            let why = match content[at] {
                b'#' => Violation::Fragment,
                _ => Violation::RequestLineByte,
            };
            return Err((at, why));
        }
        let mut taken = 0;
        if self.this.is_none() {
            let colon = if self.saw_request_line {
                memchr::memchr(b':', content)
            } else {
                None
            };
            let name = &content[..colon.unwrap_or(content.len())];
            let Some(c) = colon else {
                keep(&mut self.name, start, name);
                return Ok(());
            };
            // A whole name in this run (the common case) is named from the
            // bytes: nothing kept, three names compared by length first.
            self.this = Some(if start == 0 {
                FramingField::of(name)
            } else {
                keep(&mut self.name, start, name);
                self.name_of(start + c)
            });
            self.value_len = 0;
            taken = c + 1;
            content = &content[c + 1..];
        }
        if self.this == Some(FramingField::ContentLength) {
            let room = VALUE_MAX - self.value_len;
            if content.len() > room {
                return Err((taken + room, Violation::BadLength));
            }
            self.value[self.value_len..self.value_len + content.len()].copy_from_slice(content);
            self.value_len += content.len();
        }
        Ok(())
    }

    /// The name a run of a line's first bytes split across reads spells: what
    /// [`FramingField::of`] says of a whole one.
    fn name_of(&self, len: usize) -> FramingField {
        match self.name.get(..len) {
            Some(b"content-length") => FramingField::ContentLength,
            Some(b"transfer-encoding") => FramingField::TransferEncoding,
            Some(b"upgrade") => FramingField::Upgrade,
            _ => FramingField::Unknown,
        }
    }

    /// Where a body's end leads: the next head, or nowhere after an upgrade
    /// request's.
    fn after_body(&mut self) -> State {
        if std::mem::take(&mut self.upgrading) {
            State::Off
        } else {
            State::Head
        }
    }

    /// A CRLF: the end of a line of a head or of the trailers.
    fn line_end(&mut self) -> Result<(), Violation> {
        let empty = self.line_len == 0;
        let this = self.this.take();
        let len = std::mem::take(&mut self.line_len);
        if self.state == State::Trailers {
            if empty {
                self.state = self.after_body();
                self.first = false;
                self.crossed = true;
            }
            return Ok(());
        }
        if !self.saw_request_line {
            // Empty lines before a request line are skipped (RFC 9112 §2.2).
            if !empty {
                self.saw_request_line = true;
                if self.first && len == 14 && self.name[..14] == *b"pri * http/2.0" {
                    self.state = State::Off;
                }
            }
            return Ok(());
        }
        if !empty {
            return self.field_line(this);
        }
        self.head_end()
    }

    /// The end of a field line of a head: what a framing field says is kept.
    fn field_line(&mut self, this: Option<FramingField>) -> Result<(), Violation> {
        match this {
            Some(FramingField::ContentLength) => {
                let value = content_length([&self.value[..self.value_len]])
                    .ok()
                    .flatten()
                    .ok_or(Violation::BadLength)?;
                if self.length.is_some_and(|l| l != value) {
                    return Err(Violation::BadLength);
                }
                self.length = Some(value);
            }
            Some(FramingField::TransferEncoding) => self.chunked = true,
            Some(FramingField::Upgrade) => self.upgrade = true,
            _ => {}
        }
        Ok(())
    }

    /// The empty line that completes a head: where its body ends, and the
    /// head's fields forgotten for the next.
    fn head_end(&mut self) -> Result<(), Violation> {
        if self.chunked && self.length.is_some() {
            return Err(Violation::LengthAndChunked);
        }
        // An upgrade request's own body (RFC 9110 §7.8: the switch comes after
        // the request) is followed like any other; what comes after it is not.
        self.upgrading = self.upgrade;
        let (state, body) = self.body_of_head();
        self.state = state;
        self.finished = Some(body);
        self.crossed = true;
        self.saw_request_line = false;
        self.length = None;
        self.chunked = false;
        self.upgrade = false;
        self.first = false;
        Ok(())
    }

    /// Where the body of the head just read ends, and how a server reading
    /// it sees it (an upgrade's is followed, then the stream is not).
    fn body_of_head(&self) -> (State, BodyFraming) {
        if self.upgrade && !self.chunked && self.length.unwrap_or(0) == 0 {
            (State::Off, BodyFraming::Close)
        } else if self.upgrade && self.chunked {
            (State::ChunkSize(ChunkLine::default()), BodyFraming::Close)
        } else if let (true, Some(n)) = (self.upgrade, self.length) {
            (State::Body(n), BodyFraming::Close)
        } else if self.chunked {
            (State::ChunkSize(ChunkLine::default()), BodyFraming::Chunked)
        } else {
            match self.length {
                Some(0) => (State::Head, BodyFraming::Length(0)),
                Some(n) => (State::Body(n), BodyFraming::Length(n)),
                None => (State::Head, BodyFraming::Empty),
            }
        }
    }
}

#[cfg(test)]
mod tests;
