//! The server's side of a stream: its response head, its body through the
//! client's windows, its reset.

use bytes::{BufMut, Bytes, BytesMut};

use super::Conn;
use crate::error::Code;
use crate::frame;
use crate::hpack;

impl Conn {
    /// A response head (or, with `status` `None`, trailers, which end the
    /// stream) for `stream`; `end`: no body follows.
    pub fn respond<'a>(
        &mut self,
        stream: u32,
        status: Option<u16>,
        fields: impl Iterator<Item = (&'a str, &'a [u8])>,
        end: bool,
    ) {
        if self.failed || !self.streams.contains_key(&stream) {
            return;
        }
        let mut block = BytesMut::with_capacity(128);
        hpack::encode(status, fields, &mut block);
        self.respond_block(stream, &block, end || status.is_none());
    }

    /// A response head (or trailers) encoded already ([`hpack::put_status`],
    /// [`hpack::put_field`]); `end`: the stream ends with it.
    pub fn respond_block(&mut self, stream: u32, block: &[u8], end: bool) {
        if self.failed || !self.streams.contains_key(&stream) {
            return;
        }
        frame::put_headers(stream, block, end, self.peer_frame as usize, &mut self.out);
        if end {
            self.local_end(stream);
        }
    }

    /// Writes what of `data` the windows let, in frames of the client's
    /// size; what is left stays in `data` (go on after [`super::Event::Window`]).
    /// `end`: the body ends with it. True once all of it is written (or the
    /// stream is gone, `data` then dropped).
    pub fn send_data(&mut self, stream: u32, data: &mut Bytes, end: bool) -> bool {
        let Some(s) = self.streams.get_mut(&stream).filter(|_| !self.failed) else {
            data.clear();
            return true;
        };
        loop {
            let room = self.send_window.min(s.send_window).max(0);
            let room = (room as usize).min(self.peer_frame as usize);
            let n = room.min(data.len());
            let last = n == data.len();
            if n == 0 && !last {
                return false;
            }
            let flags = if last && end { frame::END_STREAM } else { 0 };
            frame::put_head(n, frame::DATA, flags, stream, &mut self.out);
            self.out.put_slice(&data.split_to(n));
            self.send_window -= n as i64;
            s.send_window -= n as i64;
            if last {
                if end {
                    self.local_end(stream);
                }
                return true;
            }
        }
    }

    /// The server gives `stream` up (its member failed, its client is gone).
    pub fn reset(&mut self, stream: u32, code: Code) {
        if self.streams.remove(&stream).is_some() && !self.failed {
            frame::put_rst_stream(stream, code, &mut self.out);
        }
    }

    /// The server's side of `stream` ended.
    fn local_end(&mut self, stream: u32) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.local_done = true;
        }
        self.close_if_done(stream);
    }

    /// Forgets `stream` once both sides ended.
    pub(super) fn close_if_done(&mut self, stream: u32) {
        if self
            .streams
            .get(&stream)
            .is_some_and(|s| s.remote_done && s.local_done)
        {
            self.streams.remove(&stream);
        }
    }
}
