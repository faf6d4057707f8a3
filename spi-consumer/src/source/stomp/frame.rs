//! STOMP 1.2 frames and their wire format, as a `tokio-util` codec.
//!
//! ```text
//! frame   = command EOL *(header EOL) EOL *OCTET NUL *(EOL)
//! header  = name ":" value          (escaped: \\ \n \r \c; not in CONNECT/CONNECTED)
//! EOL     = [CR] LF                 (a bare EOL between frames is a heart-beat)
//! ```
//!
//! The decoder checks before it parses: it scans for the end of the headers (keeping
//! its scan position, so nothing is rescanned when more bytes arrive), then for the
//! body by `content-length` or the NUL, and only then allocates. Untrusted input is
//! bounded by [`Limits`]; anything malformed is a [`FrameError`] (the connection must
//! then be closed: the byte stream is out of sync). Repeated headers keep the first
//! value, as STOMP 1.2 says.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// Every command of STOMP 1.2, client and server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Connect,
    Stomp,
    Connected,
    Send,
    Subscribe,
    Unsubscribe,
    Ack,
    Nack,
    Begin,
    Commit,
    Abort,
    Disconnect,
    Message,
    Receipt,
    Error,
}

impl Command {
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Connect => "CONNECT",
            Command::Stomp => "STOMP",
            Command::Connected => "CONNECTED",
            Command::Send => "SEND",
            Command::Subscribe => "SUBSCRIBE",
            Command::Unsubscribe => "UNSUBSCRIBE",
            Command::Ack => "ACK",
            Command::Nack => "NACK",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Abort => "ABORT",
            Command::Disconnect => "DISCONNECT",
            Command::Message => "MESSAGE",
            Command::Receipt => "RECEIPT",
            Command::Error => "ERROR",
        }
    }

    fn parse(s: &[u8]) -> Option<Command> {
        Some(match s {
            b"CONNECT" => Command::Connect,
            b"STOMP" => Command::Stomp,
            b"CONNECTED" => Command::Connected,
            b"SEND" => Command::Send,
            b"SUBSCRIBE" => Command::Subscribe,
            b"UNSUBSCRIBE" => Command::Unsubscribe,
            b"ACK" => Command::Ack,
            b"NACK" => Command::Nack,
            b"BEGIN" => Command::Begin,
            b"COMMIT" => Command::Commit,
            b"ABORT" => Command::Abort,
            b"DISCONNECT" => Command::Disconnect,
            b"MESSAGE" => Command::Message,
            b"RECEIPT" => Command::Receipt,
            b"ERROR" => Command::Error,
            _ => return None,
        })
    }

    /// CONNECT and CONNECTED headers are not escaped (STOMP 1.2, "Value Encoding").
    fn escapes(self) -> bool {
        !matches!(self, Command::Connect | Command::Stomp | Command::Connected)
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub command: Command,
    /// In wire order; may repeat a name (the first one counts).
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Frame {
    pub fn new(command: Command) -> Frame {
        Frame {
            command,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Frame {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Frame {
        self.body = body.into();
        self
    }

    /// The value of the first header called `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the decoder yields: a frame, or a heart-beat (a bare EOL).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Frame(Frame),
    HeartBeat,
}

/// Bounds on what a peer may send.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Command line plus headers, in bytes.
    pub max_head: usize,
    pub max_headers: usize,
    pub max_body: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        // Routing events with a certificate chain are a few KiB; leave a wide margin.
        Limits {
            max_head: 64 * 1024,
            max_headers: 128,
            max_body: 8 * 1024 * 1024,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame head over {0} bytes")]
    HeadTooLarge(usize),
    #[error("more than {0} headers")]
    TooManyHeaders(usize),
    #[error("body over {0} bytes")]
    BodyTooLarge(usize),
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    #[error("malformed header line {0:?}")]
    BadHeader(String),
    #[error("invalid escape sequence in header {0:?}")]
    BadEscape(String),
    #[error("header is not UTF-8")]
    NotUtf8,
    #[error("invalid content-length {0:?}")]
    BadContentLength(String),
    #[error("body of content-length is not followed by NUL")]
    MissingNul,
    #[error("connection closed in the middle of a frame")]
    Truncated,
    #[error("I/O: {0}")]
    Io(String),
}

impl From<std::io::Error> for FrameError {
    fn from(e: std::io::Error) -> FrameError {
        FrameError::Io(e.to_string())
    }
}

/// The STOMP codec.
#[derive(Debug, Default)]
pub struct Codec {
    limits: Limits,
    /// How far the current frame's head has been scanned for its end.
    scanned: usize,
}

impl Codec {
    pub fn new(limits: Limits) -> Codec {
        Codec { limits, scanned: 0 }
    }
}

impl Decoder for Codec {
    type Item = Item;
    type Error = FrameError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Item>, FrameError> {
        // Heart-beats: EOLs before a frame.
        if self.scanned == 0 {
            match buf.first() {
                None => return Ok(None),
                Some(b'\n') => {
                    buf.advance(1);
                    return Ok(Some(Item::HeartBeat));
                }
                Some(b'\r') => {
                    return match buf.get(1) {
                        None => Ok(None),
                        Some(b'\n') => {
                            buf.advance(2);
                            Ok(Some(Item::HeartBeat))
                        }
                        Some(_) => Err(FrameError::UnknownCommand("\r".into())),
                    };
                }
                Some(_) => {}
            }
        }
        // The head ends at the first empty line.
        let Some(head_len) = find_head_end(buf, self.scanned) else {
            if buf.len() > self.limits.max_head {
                return Err(FrameError::HeadTooLarge(self.limits.max_head));
            }
            // Resume one byte early: the end marker may straddle reads.
            self.scanned = buf.len().saturating_sub(3);
            return Ok(None);
        };
        if head_len.head > self.limits.max_head {
            return Err(FrameError::HeadTooLarge(self.limits.max_head));
        }
        let (command, headers) = parse_head(&buf[..head_len.head], &self.limits)?;
        let body_start = head_len.total;
        let content_length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .map(|(_, v)| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| FrameError::BadContentLength(v.clone()))
            })
            .transpose()?;
        let body_len = match content_length {
            Some(n) => {
                if n > self.limits.max_body {
                    return Err(FrameError::BodyTooLarge(self.limits.max_body));
                }
                if buf.len() < body_start + n + 1 {
                    buf.reserve(body_start + n + 1 - buf.len());
                    return Ok(None);
                }
                if buf[body_start + n] != 0 {
                    return Err(FrameError::MissingNul);
                }
                n
            }
            None => match buf[body_start..].iter().position(|b| *b == 0) {
                Some(n) => n,
                None => {
                    if buf.len() - body_start > self.limits.max_body {
                        return Err(FrameError::BodyTooLarge(self.limits.max_body));
                    }
                    return Ok(None);
                }
            },
        };
        buf.advance(body_start);
        let body = buf.split_to(body_len).freeze();
        buf.advance(1); // the NUL
        self.scanned = 0;
        Ok(Some(Item::Frame(Frame {
            command,
            headers,
            body,
        })))
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Item>, FrameError> {
        match self.decode(buf)? {
            Some(item) => Ok(Some(item)),
            None if buf.is_empty() => Ok(None),
            None => Err(FrameError::Truncated),
        }
    }
}

struct HeadEnd {
    /// Bytes of the command line and headers, without the empty line.
    head: usize,
    /// Up to the first body byte.
    total: usize,
}

/// Finds the empty line ending the head, scanning from `from`.
fn find_head_end(buf: &[u8], from: usize) -> Option<HeadEnd> {
    let mut i = from;
    while let Some(off) = buf.get(i..)?.iter().position(|b| *b == b'\n') {
        let nl = i + off;
        // The line after this LF is empty if it is "\n" or "\r\n".
        match (buf.get(nl + 1), buf.get(nl + 2)) {
            (Some(b'\n'), _) => {
                return Some(HeadEnd {
                    head: nl,
                    total: nl + 2,
                });
            }
            (Some(b'\r'), Some(b'\n')) => {
                return Some(HeadEnd {
                    head: nl,
                    total: nl + 3,
                });
            }
            (None, _) | (Some(b'\r'), None) => return None,
            _ => i = nl + 1,
        }
    }
    None
}

type Headers = Vec<(String, String)>;

fn parse_head(head: &[u8], limits: &Limits) -> Result<(Command, Headers), FrameError> {
    let mut lines = head
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let first = lines.next().unwrap_or_default();
    let command = Command::parse(first)
        .ok_or_else(|| FrameError::UnknownCommand(String::from_utf8_lossy(first).into_owned()))?;
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == limits.max_headers {
            return Err(FrameError::TooManyHeaders(limits.max_headers));
        }
        let line = std::str::from_utf8(line).map_err(|_| FrameError::NotUtf8)?;
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| FrameError::BadHeader(line.to_string()))?;
        if command.escapes() {
            headers.push((unescape(name)?, unescape(value)?));
        } else {
            headers.push((name.to_string(), value.to_string()));
        }
    }
    Ok((command, headers))
}

fn unescape(s: &str) -> Result<String, FrameError> {
    if !s.contains('\\') {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('\\') => '\\',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('c') => ':',
            _ => return Err(FrameError::BadEscape(s.to_string())),
        });
    }
    Ok(out)
}

fn escape_into(s: &str, escapes: bool, out: &mut BytesMut) {
    if !escapes {
        // CONNECT headers cannot be escaped; strip what would break the frame.
        for b in s.bytes().filter(|b| !matches!(b, b'\n' | b'\r' | b':')) {
            out.put_u8(b);
        }
        return;
    }
    for b in s.bytes() {
        match b {
            b'\\' => out.put_slice(b"\\\\"),
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b':' => out.put_slice(b"\\c"),
            _ => out.put_u8(b),
        }
    }
}

/// Frames to send, or a heart-beat.
impl Encoder<Item> for Codec {
    type Error = FrameError;

    fn encode(&mut self, item: Item, out: &mut BytesMut) -> Result<(), FrameError> {
        let frame = match item {
            Item::HeartBeat => {
                out.put_u8(b'\n');
                return Ok(());
            }
            Item::Frame(f) => f,
        };
        let escapes = frame.command.escapes();
        out.put_slice(frame.command.as_str().as_bytes());
        out.put_u8(b'\n');
        for (name, value) in &frame.headers {
            if name == "content-length" {
                continue; // always written from the body below
            }
            escape_into(name, escapes, out);
            out.put_u8(b':');
            escape_into(value, escapes, out);
            out.put_u8(b'\n');
        }
        // Always send content-length: bodies may contain NUL.
        if !frame.body.is_empty() || frame.command == Command::Send {
            out.put_slice(format!("content-length:{}\n", frame.body.len()).as_bytes());
        }
        out.put_u8(b'\n');
        out.put_slice(&frame.body);
        out.put_u8(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
