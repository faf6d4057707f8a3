//! An HTTP/2 server connection's rules without I/O (RFC 9113 §5, §6.5,
//! §6.9): the client's bytes in ([`Conn::read`]), what they mean out as
//! [`Event`]s (a request, its body, a reset), what the rules make the
//! server write (the SETTINGS acknowledgement, PING answers, window
//! updates, RST_STREAM, GOAWAY) in [`Conn::output`], and the server's
//! responses through the client's flow-control windows
//! ([`Conn::respond`], [`Conn::send_data`]).
//!
//! Streams are client-initiated (odd, increasing); a stream past
//! `max_concurrent_streams` is refused (REFUSED_STREAM), as is every
//! stream once the connection is going away. A header block is assembled
//! from HEADERS and its CONTINUATIONs, none of another stream between
//! (§6.10), its encoded size bounded by `max_header_block` (a CONTINUATION
//! flood ends the connection), and decoded whole even for a stream that is
//! reset (the HPACK table is the connection's). Every DATA byte counts
//! against the connection's and its stream's receive windows; the windows
//! are opened again as the server consumes the body ([`Conn::consumed`]),
//! in updates of at least half a window. A client that resets streams
//! faster than it lets them finish, or floods the connection with
//! PING, SETTINGS or empty frames, is told ENHANCE_YOUR_CALM: the counts
//! are per [`Conn::second`], which the caller calls once a second.

use std::collections::HashMap;

use bytes::{Buf, Bytes, BytesMut};
use http::Request;

use crate::error::{Code, Error};
use crate::frame::{self, Head};
use crate::hpack::Decoder;

mod recv;
mod send;

/// What the server advertises and holds a client to.
#[derive(Clone, Debug)]
pub struct Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: a stream's receive window.
    pub stream_window: u32,
    /// The connection's receive window (65,535 until the first update).
    pub connection_window: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a head's decoded size.
    pub max_header_list: u32,
    /// A header block's encoded size (HEADERS and its CONTINUATIONs).
    pub max_header_block: usize,
    /// Streams the client may reset before their response, a second.
    pub max_resets: u32,
    /// PING, SETTINGS and empty DATA or CONTINUATION frames, a second.
    pub max_control: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_concurrent_streams: 100,
            stream_window: 1 << 20,
            connection_window: 1 << 20,
            max_header_list: 65_536,
            max_header_block: 65_536,
            max_resets: 100,
            max_control: 1_000,
        }
    }
}

/// What the client's bytes meant.
#[derive(Debug)]
pub enum Event {
    /// A request's head, or why it is refused (a stream error: answer
    /// 400, or 431 for `head::TOO_LARGE`); `end`: no body follows.
    Request {
        stream: u32,
        head: Result<Request<()>, Error>,
        end: bool,
    },
    /// Body bytes; give their count back with [`Conn::consumed`] once read.
    Data { stream: u32, data: Bytes, end: bool },
    /// Trailers ended the request's body (read, not kept).
    End { stream: u32 },
    /// The client reset the stream.
    Reset { stream: u32, code: Code },
    /// The client opened send windows: sends that waited may go on.
    Window,
    /// The client is going away.
    GoAway { code: Code },
    /// The client acknowledged the server's PING ([`Conn::ping`]).
    Pong,
}

/// A stream's two sides.
#[derive(Debug)]
struct Stream {
    /// What the client may still send before an update.
    recv_window: i64,
    /// Consumed but not yet given back in an update.
    unacked: u32,
    /// What the server may still send.
    send_window: i64,
    /// The client's side ended (END_STREAM).
    remote_done: bool,
    /// The server's side ended.
    local_done: bool,
}

/// A header block being assembled.
#[derive(Debug)]
struct Pending {
    stream: u32,
    block: BytesMut,
    end: bool,
}

/// A server connection's state.
#[derive(Debug)]
pub struct Conn {
    limits: Limits,
    preface: bool,
    decoder: Decoder,
    /// By stream ID, hashed with foldhash (SipHash was 400 of a request's
    /// 7,250 instructions in `bench/h2_toys.py`; the client picks the IDs,
    /// but only increasing odd ones, at most `max_concurrent_streams` held).
    streams: HashMap<u32, Stream, foldhash::fast::RandomState>,
    /// The highest stream the client opened.
    last: u32,
    pending: Option<Pending>,
    recv_window: i64,
    unacked: u32,
    send_window: i64,
    /// The client's SETTINGS_INITIAL_WINDOW_SIZE and MAX_FRAME_SIZE.
    peer_window: u32,
    peer_frame: u32,
    going_away: bool,
    /// The opaque bytes of the server's PING not acknowledged yet.
    ping: Option<[u8; 8]>,
    /// A connection error was written (its GOAWAY last): nothing more is.
    failed: bool,
    /// What the frames read so far meant, handed over by [`Conn::read`].
    events: Vec<Event>,
    resets: u32,
    control: u32,
    out: BytesMut,
}

/// The default window before SETTINGS and updates (§6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;

const fn conn_error(code: Code, what: &'static str) -> Error {
    Error::connection(code, what)
}

/// One more of what `count` counts this second; past `max`, the client is
/// told to calm down (`what`).
fn counted(count: &mut u32, max: u32, what: &'static str) -> Result<(), Error> {
    *count += 1;
    if *count > max {
        return Err(conn_error(Code::ENHANCE_YOUR_CALM, what));
    }
    Ok(())
}

impl Conn {
    /// A connection whose first output is the server's SETTINGS (and the
    /// update that opens the connection's window to `limits`).
    pub fn new(limits: Limits) -> Conn {
        let mut out = BytesMut::with_capacity(64);
        let settings = [
            (0x3, limits.max_concurrent_streams),
            (0x4, limits.stream_window.min(frame::MAX_WINDOW)),
            (0x6, limits.max_header_list),
        ];
        frame::put_settings(&settings, &mut out);
        let window = limits
            .connection_window
            .clamp(DEFAULT_WINDOW, frame::MAX_WINDOW);
        if window > DEFAULT_WINDOW {
            frame::put_window_update(0, window - DEFAULT_WINDOW, &mut out);
        }
        Conn {
            limits,
            preface: false,
            decoder: Decoder::new(4096),
            streams: HashMap::default(),
            last: 0,
            pending: None,
            recv_window: i64::from(window),
            unacked: 0,
            send_window: i64::from(DEFAULT_WINDOW),
            peer_window: DEFAULT_WINDOW,
            peer_frame: frame::DEFAULT_MAX_FRAME,
            going_away: false,
            ping: None,
            failed: false,
            events: Vec::new(),
            resets: 0,
            control: 0,
            out,
        }
    }

    /// What the server is to write next (take it, and write it out).
    pub fn output(&mut self) -> &mut BytesMut {
        &mut self.out
    }

    /// Streams open (their request or their response not over).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Reads every whole frame in `buf` (the preface first), leaving a
    /// partial one there, what they meant added to `events`; a connection
    /// error stops it, its GOAWAY written last: the connection writes
    /// nothing after it (close it once written).
    pub fn read(&mut self, buf: &mut BytesMut, events: &mut Vec<Event>) -> Result<(), Error> {
        if self.failed {
            return Err(conn_error(Code::PROTOCOL_ERROR, "the connection ended"));
        }
        let read = self.frames(buf);
        events.append(&mut self.events);
        if let Err(e) = read {
            frame::put_goaway(self.last, e.code, &mut self.out);
            (self.going_away, self.failed) = (true, true);
        }
        read
    }

    /// A new second: the flood counts start again.
    pub fn second(&mut self) {
        (self.resets, self.control) = (0, 0);
    }

    /// A keep-alive PING with `data`, unless one is unacknowledged still;
    /// its ACK comes as [`Event::Pong`]. True when one is outstanding.
    pub fn ping(&mut self, data: [u8; 8]) -> bool {
        if self.ping.is_none() && !self.failed {
            frame::put_ping(&data, &mut self.out);
            self.ping = Some(data);
        }
        self.ping.is_some()
    }

    /// Whether a PING of the server's waits for its ACK.
    pub fn pinging(&self) -> bool {
        self.ping.is_some()
    }

    /// Whether either side said GOAWAY: no stream is taken any more.
    pub fn going_away(&self) -> bool {
        self.going_away
    }

    /// No new stream from now on (a drain): GOAWAY with the last stream taken.
    pub fn go_away(&mut self) {
        if !self.going_away && !self.failed {
            frame::put_goaway(self.last, Code::NO_ERROR, &mut self.out);
            self.going_away = true;
        }
    }

    fn frames(&mut self, buf: &mut BytesMut) -> Result<(), Error> {
        if !self.preface {
            let n = buf.len().min(frame::PREFACE.len());
            if buf[..n] != frame::PREFACE[..n] {
                return Err(conn_error(Code::PROTOCOL_ERROR, "not the HTTP/2 preface"));
            }
            if n < frame::PREFACE.len() {
                return Ok(());
            }
            buf.advance(n);
            self.preface = true;
        }
        while let Some(head) = frame::head(buf) {
            if head.len > frame::DEFAULT_MAX_FRAME {
                return Err(conn_error(Code::FRAME_SIZE_ERROR, "a frame past 16 KiB"));
            }
            let total = frame::HEAD_LEN + head.len as usize;
            if buf.len() < total {
                break;
            }
            let payload = buf.split_to(total).freeze().slice(frame::HEAD_LEN..);
            self.frame(&head, payload)?;
        }
        Ok(())
    }

    fn frame(&mut self, head: &Head, payload: Bytes) -> Result<(), Error> {
        if let Some(p) = &self.pending
            && (head.kind != frame::CONTINUATION || head.stream != p.stream)
        {
            return Err(conn_error(
                Code::PROTOCOL_ERROR,
                "a frame inside a header block",
            ));
        }
        match head.kind {
            frame::DATA => self.data(head, payload),
            frame::HEADERS => self.headers(head, payload),
            frame::CONTINUATION => self.continuation(head, &payload),
            frame::SETTINGS => self.settings(head, &payload),
            frame::PING => self.ping_frame(head, &payload),
            frame::WINDOW_UPDATE => self.window_update(head, &payload),
            frame::RST_STREAM => self.rst_stream(head, &payload),
            frame::PRIORITY => match frame::priority(head, &payload) {
                Err(e) if !e.connection => {
                    self.refuse(head.stream, e.code);
                    Ok(())
                }
                other => other,
            },
            frame::GOAWAY => {
                let (_, code) = frame::goaway(head, &payload)?;
                self.going_away = true;
                self.events.push(Event::GoAway { code });
                Ok(())
            }
            frame::PUSH_PROMISE => Err(conn_error(
                Code::PROTOCOL_ERROR,
                "PUSH_PROMISE from a client",
            )),
            // Unknown types are ignored (§5.5).
            _ => Ok(()),
        }
    }

    /// One more flood-counted frame.
    fn calm(&mut self) -> Result<(), Error> {
        counted(
            &mut self.control,
            self.limits.max_control,
            "control frames past the bound",
        )
    }

    /// A frame other than HEADERS on a stream the client never opened.
    fn idle(&self, stream: u32) -> Result<(), Error> {
        if stream > self.last {
            return Err(conn_error(
                Code::PROTOCOL_ERROR,
                "a frame on an idle stream",
            ));
        }
        Ok(())
    }

    /// Ends `stream` with `code` (a stream error), telling the server.
    fn refuse(&mut self, stream: u32, code: Code) {
        frame::put_rst_stream(stream, code, &mut self.out);
        if self.streams.remove(&stream).is_some() {
            self.events.push(Event::Reset { stream, code });
        }
    }
}

#[cfg(test)]
mod tests;
