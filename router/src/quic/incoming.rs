//! What a client sends on one QUIC stream, read as HTTP/3 frames: chunks as
//! quinn delivers them, frame heads and payloads cut out of them without a
//! copy (one only when a head or a HEADERS payload straddles two chunks).

use bytes::{Buf as _, Bytes, BytesMut};
use h3_codec::{Code, Error, frame};
use quinn::VarInt;

/// Why reading a stream stopped short.
#[derive(Debug)]
pub(super) enum Fault {
    /// The client broke HTTP/3's rules (on this stream, or the connection's).
    Protocol(Error),
    /// The stream was reset or the connection lost: nothing to answer.
    Gone(quinn::ReadError),
}

impl From<Error> for Fault {
    fn from(e: Error) -> Fault {
        Fault::Protocol(e)
    }
}

/// The stream ended inside a frame or before a request's HEADERS.
pub(super) const INCOMPLETE: Error = Error::stream(Code::REQUEST_INCOMPLETE, "stream ended early");

/// A stream being read frame by frame.
pub(super) struct Incoming {
    recv: quinn::RecvStream,
    /// Read from the stream, not consumed yet.
    buf: Bytes,
    /// The stream's end (FIN) has been read.
    pub(super) fin: bool,
}

impl Incoming {
    pub(super) fn new(recv: quinn::RecvStream) -> Incoming {
        Incoming {
            recv,
            buf: Bytes::new(),
            fin: false,
        }
    }

    /// Reads the next chunk behind what is buffered; false at the stream's end.
    async fn more(&mut self) -> Result<bool, Fault> {
        match self.recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => {
                self.append(chunk.bytes);
                Ok(true)
            }
            Ok(None) => {
                self.fin = true;
                Ok(false)
            }
            Err(e) => Err(Fault::Gone(e)),
        }
    }

    fn append(&mut self, bytes: Bytes) {
        if self.buf.is_empty() {
            self.buf = bytes;
        } else {
            let mut joined = BytesMut::with_capacity(self.buf.len() + bytes.len());
            joined.extend_from_slice(&self.buf);
            joined.extend_from_slice(&bytes);
            self.buf = joined.freeze();
        }
    }

    /// Whether the stream has ended with nothing left unread, looking at the
    /// stream without waiting (a GET's end usually comes with its head).
    pub(super) fn ended_now(&mut self) -> bool {
        use futures_util::FutureExt as _;
        if self.buf.is_empty()
            && !self.fin
            && let Some(Ok(chunk)) = self.recv.read_chunk(usize::MAX, true).now_or_never()
        {
            match chunk {
                Some(chunk) => self.append(chunk.bytes),
                None => self.fin = true,
            }
        }
        self.fin && self.buf.is_empty()
    }

    /// A varint (a unidirectional stream's type); `None` at the stream's end.
    pub(super) async fn varint(&mut self) -> Result<Option<u64>, Fault> {
        loop {
            if let Some((value, n)) = h3_codec::varint::decode(&self.buf) {
                self.buf.advance(n);
                return Ok(Some(value));
            }
            if !self.more().await? {
                return Ok(None);
            }
        }
    }

    /// The next frame's head; `None` at the stream's end between frames.
    pub(super) async fn frame(&mut self) -> Result<Option<frame::Head>, Fault> {
        loop {
            if let Some(head) = frame::head(&self.buf) {
                self.buf.advance(head.size);
                return Ok(Some(head));
            }
            if !self.more().await? {
                return match self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(INCOMPLETE.into()),
                };
            }
        }
    }

    /// The next `len` bytes whole (a HEADERS or SETTINGS payload, bounded by
    /// the caller).
    pub(super) async fn take(&mut self, len: usize) -> Result<Bytes, Fault> {
        while self.buf.len() < len {
            if !self.more().await? {
                return Err(INCOMPLETE.into());
            }
        }
        Ok(self.buf.split_to(len))
    }

    /// Skips the next `len` bytes (a frame of a type this server ignores).
    pub(super) async fn skip(&mut self, mut len: u64) -> Result<(), Fault> {
        loop {
            let here = (self.buf.len() as u64).min(len);
            self.buf.advance(here as usize);
            len -= here;
            if len == 0 {
                return Ok(());
            }
            if !self.more().await? {
                return Err(INCOMPLETE.into());
            }
        }
    }

    /// Up to `max` bytes as they come (a DATA payload, piece by piece).
    pub(super) async fn some(&mut self, max: u64) -> Result<Bytes, Fault> {
        if self.buf.is_empty() && !self.more().await? {
            return Err(INCOMPLETE.into());
        }
        let n = (self.buf.len() as u64).min(max) as usize;
        Ok(self.buf.split_to(n))
    }

    /// Stops reading: the client need not send the rest.
    pub(super) fn stop(&mut self, code: Code) {
        if !self.fin {
            let _ = self.recv.stop(varint(code));
        }
    }
}

impl Drop for Incoming {
    /// A stream dropped before its end is stopped with H3_NO_ERROR (quinn's
    /// own drop would say 0, no HTTP/3 code): the response did not need the rest.
    fn drop(&mut self) {
        self.stop(Code::NO_ERROR);
    }
}

/// An HTTP/3 code as QUIC carries it.
pub(super) fn varint(code: Code) -> VarInt {
    VarInt::from_u64(code.0).unwrap_or(VarInt::from_u32(Code::INTERNAL_ERROR.0 as u32))
}
