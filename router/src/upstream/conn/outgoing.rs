//! A request on its way to a member: its head as bytes and its body, written in
//! batches.

use super::*;

/// A request to send: its head encoded once, its body as it comes. One without a
/// body can be sent again exactly ([`Encoded::rewind`]), on another connection.
pub struct Encoded {
    pub(super) ex: Outgoing,
    pub(super) body: RequestBody,
    pub(super) head_request: bool,
}

impl Encoded {
    /// A request whose head is written already (`head`, by the caller: the
    /// client's fields as they came, their `Content-Length` with them); its body,
    /// if it has one, is sent as it comes, as long as that length says.
    pub fn from_head(head: Vec<u8>, method: &Method, body: RequestBody) -> Encoded {
        let framing = if body.is_end_stream() {
            BodyFraming::Empty
        } else {
            BodyFraming::Length(body.size_hint().exact().unwrap_or(0))
        };
        Encoded::with(head, framing, method, body)
    }

    pub fn with(out: Vec<u8>, framing: BodyFraming, method: &Method, body: RequestBody) -> Encoded {
        Encoded {
            ex: Outgoing {
                out,
                written: 0,
                chunked: framing == BodyFraming::Chunked,
                done: framing == BodyFraming::Empty,
                trailers: None,
                flushed: false,
            },
            body,
            head_request: method == Method::HEAD,
        }
    }

    /// The request has no body: all of it is the encoded head.
    pub fn has_no_body(&self) -> bool {
        matches!(self.body, RequestBody::Empty) && self.ex.done
    }

    /// Makes a request without a body ready to be sent again from its start.
    pub fn rewind(&mut self) {
        if self.has_no_body() {
            self.ex.written = 0;
            self.ex.flushed = false;
        }
    }
}

/// A request on its way out: its encoded bytes and where its body stands.
pub(super) struct Outgoing {
    pub(super) out: Vec<u8>,
    pub(super) written: usize,
    pub(super) chunked: bool,
    /// The body has ended (its last bytes are in `out`).
    pub(super) done: bool,
    /// Trailers, sent with the last chunk.
    pub(super) trailers: Option<http::HeaderMap>,
    /// Everything written has been flushed (out of a TLS buffer too).
    pub(super) flushed: bool,
}

/// A failure while writing a request.
pub(super) enum WriteError {
    Io(io::Error),
    Body(RequestBodyError),
}

impl WriteError {
    pub(super) fn into_exchange(self, rbuf: &BytesMut) -> ExchangeError {
        match self {
            WriteError::Io(source) => ExchangeError::Io {
                before_response: rbuf.is_empty(),
                source,
            },
            WriteError::Body(e) => ExchangeError::Body(e),
        }
    }
}

impl Outgoing {
    pub(super) fn finished(&self) -> bool {
        self.done && self.written == self.out.len() && self.flushed
    }

    /// A body frame, encoded for the wire (a chunk when the body is chunked),
    /// or its trailers kept for the last chunk.
    #[inline]
    fn gather(&mut self, frame: Frame<Bytes>) {
        match frame.into_data() {
            Ok(data) if self.chunked => encode::encode_chunk(&data, &mut self.out),
            Ok(data) => self.out.extend_from_slice(&data),
            Err(frame) => {
                if let Ok(t) = frame.into_trailers() {
                    self.trailers = Some(t);
                }
            }
        }
    }

    /// The body has ended: the last chunk (with the trailers), if chunked.
    fn end(&mut self) {
        if self.chunked {
            encode::encode_last_chunk(self.trailers.as_ref(), &mut self.out);
        }
        self.done = true;
    }

    /// Gathers the body frames that are ready, then writes; `Ready(Ok(true))` if
    /// anything moved.
    pub(super) fn poll_write(
        &mut self,
        cx: &mut Context<'_>,
        io: &mut MemberIo,
        body: &mut RequestBody,
    ) -> Poll<Result<bool, WriteError>> {
        let mut progressed = false;
        loop {
            while !self.done && self.out.len() - self.written < WRITE_BATCH {
                match Pin::new(&mut *body).poll_frame(cx) {
                    Poll::Ready(Some(Ok(frame))) => {
                        progressed = true;
                        self.gather(frame);
                    }
                    Poll::Ready(None) => {
                        progressed = true;
                        self.end();
                    }
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(WriteError::Body(e))),
                    Poll::Pending => break,
                }
            }
            if self.written < self.out.len() {
                match Pin::new(&mut *io).poll_write(cx, &self.out[self.written..]) {
                    Poll::Ready(Ok(0)) => {
                        return Poll::Ready(Err(WriteError::Io(io::ErrorKind::WriteZero.into())));
                    }
                    Poll::Ready(Ok(n)) => {
                        progressed = true;
                        self.flushed = false;
                        self.written += n;
                        if self.written == self.out.len() && !self.done {
                            self.out.clear();
                            self.written = 0;
                        }
                        continue;
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(WriteError::Io(e))),
                    Poll::Pending => {}
                }
            } else {
                // All written so far: push it out of any TLS buffer.
                match Pin::new(&mut *io).poll_flush(cx) {
                    Poll::Ready(Ok(())) => self.flushed = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(WriteError::Io(e))),
                    Poll::Pending => {}
                }
            }
            return if progressed {
                Poll::Ready(Ok(true))
            } else {
                Poll::Pending
            };
        }
    }
}

/// Reads what the member sent into `buf` (`Ok(0)`: it closed).
pub(super) fn poll_fill(
    io: &mut MemberIo,
    buf: &mut BytesMut,
    cx: &mut Context<'_>,
) -> Poll<io::Result<usize>> {
    if buf.capacity() - buf.len() < READ_CHUNK / 4 {
        buf.reserve(READ_CHUNK);
    }
    std::pin::pin!(io.read_buf(buf)).poll(cx)
}
