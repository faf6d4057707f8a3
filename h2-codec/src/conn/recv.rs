//! The client's frames: heads, bodies, settings, windows, resets.

use bytes::{Bytes, BytesMut};

use super::{Conn, Event, Pending, Stream, conn_error};
use crate::error::{Code, Error};
use crate::frame::{self, Head, Setting};

impl Conn {
    pub(super) fn headers(&mut self, head: &Head, payload: Bytes) -> Result<(), Error> {
        if head.stream == 0 {
            return Err(conn_error(Code::PROTOCOL_ERROR, "HEADERS on stream 0"));
        }
        let range = frame::content_range(head, &payload)?;
        self.pending = Some(Pending {
            stream: head.stream,
            block: BytesMut::from(&payload[range]),
            end: head.flags & frame::END_STREAM != 0,
        });
        self.fragment_added(head)
    }

    pub(super) fn continuation(&mut self, head: &Head, payload: &[u8]) -> Result<(), Error> {
        let Some(p) = self.pending.as_mut() else {
            return Err(conn_error(
                Code::PROTOCOL_ERROR,
                "CONTINUATION without HEADERS",
            ));
        };
        p.block.extend_from_slice(payload);
        if payload.is_empty() && head.flags & frame::END_HEADERS == 0 {
            self.calm()?;
        }
        self.fragment_added(head)
    }

    /// The block so far is within its bound; complete with END_HEADERS.
    fn fragment_added(&mut self, head: &Head) -> Result<(), Error> {
        let len = self.pending.as_ref().map_or(0, |p| p.block.len());
        if len > self.limits.max_header_block {
            return Err(conn_error(
                Code::ENHANCE_YOUR_CALM,
                "a header block past its bound",
            ));
        }
        if head.flags & frame::END_HEADERS == 0 {
            return Ok(());
        }
        match self.pending.take() {
            Some(p) => self.block(p),
            None => Ok(()),
        }
    }

    /// A whole header block: a new stream's request, an open stream's
    /// trailers, or a closed stream's (decoded for the table, then refused).
    fn block(&mut self, p: Pending) -> Result<(), Error> {
        let Pending { stream, block, end } = p;
        let block = block.freeze();
        if stream > self.last {
            return self.open(stream, &block, end);
        }
        self.decoder.decode(&block, |_, _| Ok(()))?;
        match self.streams.get_mut(&stream) {
            Some(s) if !s.remote_done && end => {
                s.remote_done = true;
                self.events.push(Event::End { stream });
                self.close_if_done(stream);
            }
            Some(_) => self.refuse(stream, Code::PROTOCOL_ERROR),
            None => frame::put_rst_stream(stream, Code::STREAM_CLOSED, &mut self.out),
        }
        Ok(())
    }

    /// A new stream's request, or its refusal past the stream bound.
    fn open(&mut self, stream: u32, block: &Bytes, end: bool) -> Result<(), Error> {
        if stream.is_multiple_of(2) {
            return Err(conn_error(
                Code::PROTOCOL_ERROR,
                "an even stream from a client",
            ));
        }
        self.last = stream;
        let max = self.limits.max_header_list as usize;
        let head = crate::head::request(&mut self.decoder, block, max);
        if let Err(e) = &head
            && e.connection
        {
            return Err(*e);
        }
        let full = self.streams.len() >= self.limits.max_concurrent_streams as usize;
        if self.going_away || full {
            frame::put_rst_stream(stream, Code::REFUSED_STREAM, &mut self.out);
            return Ok(());
        }
        let window = i64::from(self.limits.stream_window.min(frame::MAX_WINDOW));
        self.streams.insert(
            stream,
            Stream {
                recv_window: window,
                unacked: 0,
                send_window: i64::from(self.peer_window),
                remote_done: end,
                local_done: false,
            },
        );
        self.events.push(Event::Request { stream, head, end });
        Ok(())
    }

    pub(super) fn data(&mut self, head: &Head, payload: Bytes) -> Result<(), Error> {
        if head.stream == 0 {
            return Err(conn_error(Code::PROTOCOL_ERROR, "DATA on stream 0"));
        }
        self.idle(head.stream)?;
        let len = payload.len() as u32;
        self.recv_window -= i64::from(len);
        if self.recv_window < 0 {
            return Err(conn_error(
                Code::FLOW_CONTROL_ERROR,
                "DATA past the connection's window",
            ));
        }
        let range = frame::content_range(head, &payload)?;
        let end = head.flags & frame::END_STREAM != 0;
        if len == 0 && !end {
            self.calm()?;
        }
        let stream = head.stream;
        let body = payload.slice(range);
        // Padding is never handed to the server: given back now.
        self.consumed(stream, len - body.len() as u32);
        let Some(s) = self.streams.get_mut(&stream) else {
            self.consumed(stream, body.len() as u32);
            frame::put_rst_stream(stream, Code::STREAM_CLOSED, &mut self.out);
            return Ok(());
        };
        s.recv_window -= i64::from(len);
        let code = match (s.remote_done, s.recv_window < 0) {
            (true, _) => Some(Code::STREAM_CLOSED),
            (_, true) => Some(Code::FLOW_CONTROL_ERROR),
            _ => None,
        };
        if let Some(code) = code {
            self.refuse(stream, code);
            self.consumed(stream, body.len() as u32);
            return Ok(());
        }
        s.remote_done = end;
        self.events.push(Event::Data {
            stream,
            data: body,
            end,
        });
        if end {
            self.close_if_done(stream);
        }
        Ok(())
    }

    pub(super) fn settings(&mut self, head: &Head, payload: &[u8]) -> Result<(), Error> {
        let list = frame::settings(head, payload)?;
        self.calm()?;
        if head.flags & frame::ACK != 0 {
            return Ok(());
        }
        for setting in list {
            match setting {
                Setting::InitialWindowSize(v) => self.peer_window_is(v)?,
                Setting::MaxFrameSize(v) => self.peer_frame = v,
                _ => {}
            }
        }
        frame::put_settings_ack(&mut self.out);
        Ok(())
    }

    /// The client's new initial window: every stream's send window moves
    /// by the difference (§6.9.2).
    fn peer_window_is(&mut self, v: u32) -> Result<(), Error> {
        let delta = i64::from(v) - i64::from(self.peer_window);
        self.peer_window = v;
        for s in self.streams.values_mut() {
            s.send_window += delta;
            if s.send_window > i64::from(frame::MAX_WINDOW) {
                return Err(conn_error(Code::FLOW_CONTROL_ERROR, "a window past 2^31-1"));
            }
        }
        if delta > 0 {
            self.events.push(Event::Window);
        }
        Ok(())
    }

    pub(super) fn ping_frame(&mut self, head: &Head, payload: &[u8]) -> Result<(), Error> {
        let data = frame::ping(head, payload)?;
        self.calm()?;
        if head.flags & frame::ACK == 0 {
            frame::put_ping_ack(&data, &mut self.out);
        } else if self.ping == Some(data) {
            self.ping = None;
            self.events.push(Event::Pong);
        }
        Ok(())
    }

    pub(super) fn window_update(&mut self, head: &Head, payload: &[u8]) -> Result<(), Error> {
        let max = i64::from(frame::MAX_WINDOW);
        let increment = match frame::window_update(head, payload) {
            Ok(n) => i64::from(n),
            Err(e) if !e.connection => {
                self.refuse(head.stream, e.code);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        if head.stream == 0 {
            self.send_window += increment;
            if self.send_window > max {
                return Err(conn_error(Code::FLOW_CONTROL_ERROR, "a window past 2^31-1"));
            }
        } else {
            self.idle(head.stream)?;
            let Some(s) = self.streams.get_mut(&head.stream) else {
                return Ok(());
            };
            s.send_window += increment;
            if s.send_window > max {
                self.refuse(head.stream, Code::FLOW_CONTROL_ERROR);
                return Ok(());
            }
        }
        self.events.push(Event::Window);
        Ok(())
    }

    pub(super) fn rst_stream(&mut self, head: &Head, payload: &[u8]) -> Result<(), Error> {
        let code = frame::rst_stream(head, payload)?;
        self.idle(head.stream)?;
        if self.streams.remove(&head.stream).is_some() {
            self.events.push(Event::Reset {
                stream: head.stream,
                code,
            });
            let max = self.limits.max_resets;
            super::counted(&mut self.resets, max, "streams reset past the bound")?;
        }
        Ok(())
    }

    /// The server read `n` body bytes of `stream`: the windows open again,
    /// in updates of at least half a window.
    pub fn consumed(&mut self, stream: u32, n: u32) {
        if n == 0 || self.failed {
            return;
        }
        self.unacked += n;
        let half = self
            .limits
            .connection_window
            .clamp(super::DEFAULT_WINDOW, frame::MAX_WINDOW)
            / 2;
        if self.unacked >= half {
            frame::put_window_update(0, self.unacked, &mut self.out);
            self.recv_window += i64::from(self.unacked);
            self.unacked = 0;
        }
        let half = self.limits.stream_window.min(frame::MAX_WINDOW) / 2;
        if let Some(s) = self.streams.get_mut(&stream)
            && !s.remote_done
        {
            s.unacked += n;
            if s.unacked >= half {
                frame::put_window_update(stream, s.unacked, &mut self.out);
                s.recv_window += i64::from(s.unacked);
                s.unacked = 0;
            }
        }
    }
}
