//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte head, each payload a server
//! reads checked against its frame's rules, and the frames a server writes.
//! A check that fails says how far the error reaches (§5.4): a frame that
//! breaks a connection rule is a connection error, one that breaks only its
//! stream's a stream error.

use bytes::{BufMut, BytesMut};

use crate::error::{Code, Error};

/// What a client's connection starts with (§3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types (§6).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

/// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

/// The length of a frame's head.
pub const HEAD_LEN: usize = 9;
/// The largest frame payload before SETTINGS_MAX_FRAME_SIZE raises it (§4.2).
pub const DEFAULT_MAX_FRAME: u32 = 16_384;
/// The largest a flow-control window may be (§6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// A frame's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// Its stream (0: the connection), the reserved bit dropped.
    pub stream: u32,
}

/// The head at the start of `buf`, when all 9 bytes have come.
pub fn head(buf: &[u8]) -> Option<Head> {
    let b: &[u8; HEAD_LEN] = buf.first_chunk()?;
    Some(Head {
        len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
        kind: b[3],
        flags: b[4],
        stream: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & MAX_WINDOW,
    })
}

/// Writes a frame's head.
pub fn put_head(len: usize, kind: u8, flags: u8, stream: u32, out: &mut BytesMut) {
    let len = (len as u32).to_be_bytes();
    out.put_slice(&[len[1], len[2], len[3], kind, flags]);
    out.put_u32(stream & MAX_WINDOW);
}

const fn conn(code: Code, what: &'static str) -> Error {
    Error::connection(code, what)
}

/// Where a DATA or HEADERS payload's content is: its padding and
/// (HEADERS) its priority fields left out, which this server does not use
/// (§6.1, §6.2).
pub fn content_range(head: &Head, payload: &[u8]) -> Result<std::ops::Range<usize>, Error> {
    let mut start = 0;
    let mut end = payload.len();
    if head.flags & PADDED != 0 {
        let pad = usize::from(*payload.first().ok_or(conn(
            Code::FRAME_SIZE_ERROR,
            "a padded frame without its pad length",
        ))?);
        start = 1;
        end = end
            .checked_sub(pad)
            .filter(|end| *end >= start)
            .ok_or(conn(Code::PROTOCOL_ERROR, "padding longer than the frame"))?;
    }
    if head.kind == HEADERS && head.flags & PRIORITY_FLAG != 0 {
        start += 5;
        if start > end {
            return Err(conn(
                Code::FRAME_SIZE_ERROR,
                "a HEADERS frame too short for its priority",
            ));
        }
    }
    Ok(start..end)
}

/// A setting a client sent (§6.5.2); the unknown ones are left out (§6.5.2:
/// ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    HeaderTableSize(u32),
    EnablePush(bool),
    MaxConcurrentStreams(u32),
    InitialWindowSize(u32),
    MaxFrameSize(u32),
    MaxHeaderListSize(u32),
    EnableConnectProtocol(bool),
}

/// A SETTINGS payload's settings, each checked (§6.5).
pub fn settings(head: &Head, payload: &[u8]) -> Result<Vec<Setting>, Error> {
    if head.stream != 0 {
        return Err(conn(Code::PROTOCOL_ERROR, "SETTINGS on a stream"));
    }
    if head.flags & ACK != 0 {
        return match payload.len() {
            0 => Ok(Vec::new()),
            _ => Err(conn(
                Code::FRAME_SIZE_ERROR,
                "a SETTINGS ack with a payload",
            )),
        };
    }
    if !payload.len().is_multiple_of(6) {
        return Err(conn(
            Code::FRAME_SIZE_ERROR,
            "SETTINGS not a multiple of 6 bytes",
        ));
    }
    let mut out = Vec::with_capacity(payload.len() / 6);
    for pair in payload.chunks_exact(6) {
        let id = u16::from_be_bytes([pair[0], pair[1]]);
        let v = u32::from_be_bytes([pair[2], pair[3], pair[4], pair[5]]);
        let flag = |what| match v {
            0 | 1 => Ok(v == 1),
            _ => Err(conn(Code::PROTOCOL_ERROR, what)),
        };
        out.push(match id {
            0x1 => Setting::HeaderTableSize(v),
            0x2 => Setting::EnablePush(flag("SETTINGS_ENABLE_PUSH not 0 or 1")?),
            0x3 => Setting::MaxConcurrentStreams(v),
            0x4 if v > MAX_WINDOW => {
                return Err(conn(
                    Code::FLOW_CONTROL_ERROR,
                    "SETTINGS_INITIAL_WINDOW_SIZE past 2^31-1",
                ));
            }
            0x4 => Setting::InitialWindowSize(v),
            0x5 if !(DEFAULT_MAX_FRAME..=0xff_ffff).contains(&v) => {
                return Err(conn(
                    Code::PROTOCOL_ERROR,
                    "SETTINGS_MAX_FRAME_SIZE out of 2^14 to 2^24-1",
                ));
            }
            0x5 => Setting::MaxFrameSize(v),
            0x6 => Setting::MaxHeaderListSize(v),
            0x8 => {
                Setting::EnableConnectProtocol(flag("SETTINGS_ENABLE_CONNECT_PROTOCOL not 0 or 1")?)
            }
            _ => continue,
        });
    }
    Ok(out)
}

/// A WINDOW_UPDATE's increment (§6.9): 0 is an error of the frame's stream
/// (of the connection on stream 0).
pub fn window_update(head: &Head, payload: &[u8]) -> Result<u32, Error> {
    let b: &[u8; 4] = exactly(payload, "WINDOW_UPDATE not 4 bytes")?;
    match u32::from_be_bytes(*b) & MAX_WINDOW {
        0 if head.stream == 0 => Err(conn(Code::PROTOCOL_ERROR, "a window update of 0")),
        0 => Err(Error::stream(Code::PROTOCOL_ERROR, "a window update of 0")),
        n => Ok(n),
    }
}

/// A RST_STREAM's error code (§6.4).
pub fn rst_stream(head: &Head, payload: &[u8]) -> Result<Code, Error> {
    if head.stream == 0 {
        return Err(conn(Code::PROTOCOL_ERROR, "RST_STREAM on stream 0"));
    }
    exactly(payload, "RST_STREAM not 4 bytes").map(|b| Code(u32::from_be_bytes(*b)))
}

/// A PING's opaque data (§6.7).
pub fn ping(head: &Head, payload: &[u8]) -> Result<[u8; 8], Error> {
    if head.stream != 0 {
        return Err(conn(Code::PROTOCOL_ERROR, "PING on a stream"));
    }
    exactly(payload, "PING not 8 bytes").copied()
}

/// A GOAWAY's last stream and error code (§6.8); its debug data is not read.
pub fn goaway(head: &Head, payload: &[u8]) -> Result<(u32, Code), Error> {
    if head.stream != 0 {
        return Err(conn(Code::PROTOCOL_ERROR, "GOAWAY on a stream"));
    }
    match payload.first_chunk::<8>() {
        Some(b) => Ok((
            u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & MAX_WINDOW,
            Code(u32::from_be_bytes([b[4], b[5], b[6], b[7]])),
        )),
        None => Err(conn(Code::FRAME_SIZE_ERROR, "GOAWAY shorter than 8 bytes")),
    }
}

/// A PRIORITY frame is read and dropped (§6.3, deprecated by RFC 9113 §5.3.2),
/// but its size is still checked: a stream error.
pub fn priority(head: &Head, payload: &[u8]) -> Result<(), Error> {
    if head.stream == 0 {
        return Err(conn(Code::PROTOCOL_ERROR, "PRIORITY on stream 0"));
    }
    match payload.len() {
        5 => Ok(()),
        _ => Err(Error::stream(
            Code::FRAME_SIZE_ERROR,
            "PRIORITY not 5 bytes",
        )),
    }
}

/// `payload` as exactly `N` bytes, else a connection FRAME_SIZE_ERROR.
fn exactly<'a, const N: usize>(
    payload: &'a [u8],
    what: &'static str,
) -> Result<&'a [u8; N], Error> {
    <&[u8; N]>::try_from(payload).map_err(|_| conn(Code::FRAME_SIZE_ERROR, what))
}

/// Writes a SETTINGS frame of `(id, value)` pairs.
pub fn put_settings(pairs: &[(u16, u32)], out: &mut BytesMut) {
    put_head(pairs.len() * 6, SETTINGS, 0, 0, out);
    for (id, value) in pairs {
        out.put_u16(*id);
        out.put_u32(*value);
    }
}

/// Writes the acknowledgement of a client's SETTINGS.
pub fn put_settings_ack(out: &mut BytesMut) {
    put_head(0, SETTINGS, ACK, 0, out);
}

/// Writes the answer to a client's PING.
pub fn put_ping_ack(data: &[u8; 8], out: &mut BytesMut) {
    put_head(8, PING, ACK, 0, out);
    out.put_slice(data);
}

/// Writes a PING of the server's (a keep-alive), `data` its opaque bytes.
pub fn put_ping(data: &[u8; 8], out: &mut BytesMut) {
    put_head(8, PING, 0, 0, out);
    out.put_slice(data);
}

/// Writes a WINDOW_UPDATE of `increment` (1 to 2^31-1) for `stream`.
pub fn put_window_update(stream: u32, increment: u32, out: &mut BytesMut) {
    put_head(4, WINDOW_UPDATE, 0, stream, out);
    out.put_u32(increment & MAX_WINDOW);
}

/// Writes a RST_STREAM.
pub fn put_rst_stream(stream: u32, code: Code, out: &mut BytesMut) {
    put_head(4, RST_STREAM, 0, stream, out);
    out.put_u32(code.0);
}

/// Writes a GOAWAY naming the last stream this server took.
pub fn put_goaway(last: u32, code: Code, out: &mut BytesMut) {
    put_head(8, GOAWAY, 0, 0, out);
    out.put_u32(last & MAX_WINDOW);
    out.put_u32(code.0);
}

/// Writes a header block as a HEADERS frame and, past `max_frame` bytes,
/// CONTINUATION frames (§6.10).
pub fn put_headers(
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
    out: &mut BytesMut,
) {
    let max_frame = max_frame.max(1);
    let mut chunks = block.chunks(max_frame).peekable();
    let mut kind = HEADERS;
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        put_head(0, HEADERS, flags | END_HEADERS, stream, out);
        return;
    }
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        put_head(chunk.len(), kind, flags, stream, out);
        out.put_slice(chunk);
        (kind, flags) = (CONTINUATION, 0);
    }
}

#[cfg(test)]
mod tests;
