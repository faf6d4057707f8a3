//! A client connection's byte stream (plain TCP or TLS) with a write deadline: when
//! the client stops reading, a write that has made no progress for
//! `limits.send_timeout` fails and the connection is closed (nginx's `send_timeout`,
//! haproxy's `timeout client` on the sending side). Without it a client that never
//! reads (a PING flood, a slow reader) keeps its connection, its buffers and the
//! member slot of its request forever.
//!
//! The deadline is armed only when a write returns `Pending` and disarmed by the next
//! write that makes progress, so the usual path costs one branch.
//!
//! HTTP/1 reads are followed by [`Framing`]: a request-smuggling shape hyper would
//! accept is cut where it shows and replaced by [`POISON`], so hyper answers 400
//! and closes (see [`h1_codec::framing`]).
//!
//! **Lingering close.** When the router ends a connection whose client is still
//! sending (a 413 for a body over the app's limit, a 400 for a cut stream), a
//! plain close with unread bytes makes the kernel answer them with a reset, and
//! the client, failing its next write, may never read the answer (curl: "Send
//! failure: Broken pipe"). So the shutdown sends its FIN after the answer, then
//! reads and drops what the client still sends until it closes, for at most
//! [`LINGER`] and [`LINGER_BYTES`] (nginx's `lingering_close`). A client
//! between requests with nothing in flight is closed at once: one read more.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use super::tunnel::LINGER;
use crate::tls::rewind::Rewind;
use h1_codec::framing::{Framing, POISON};
use relay::stall::Stall;

/// What a lingering close reads and drops at most (see the module doc).
pub const LINGER_BYTES: usize = 1024 * 1024;

/// Plain or TLS, one type for the connection driver.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<Rewind>>),
}

/// The HTTP/1 request framing a connection follows.
enum Follow {
    /// h2 by ALPN: no HTTP/1 on this connection.
    No,
    /// Between requests ([`ClientIo::rest`]): only the stream offset is kept
    /// ([`Framing::at_rest`]), and the framing is made again from it at the next
    /// byte: a connection waiting for its next request keeps 8 bytes, not 312.
    Resting(u64),
    Active(Box<Framing>),
}

pub struct ClientIo {
    stream: Stream,
    /// Armed while a write is pending (`limits.send_timeout`).
    stall: Stall,
    /// HTTP/1 request framing.
    framing: Follow,
    /// After a cut: what of [`POISON`] hyper has still to read, then end of stream.
    cut: Option<&'static [u8]>,
    /// Once shut down: the lingering close (see the module doc).
    lingering: Option<Lingering>,
}

/// A lingering close under way: its deadline and what it may still drop.
struct Lingering {
    deadline: Pin<Box<tokio::time::Sleep>>,
    left: usize,
}

impl ClientIo {
    pub fn new(stream: Stream, send_timeout: Duration) -> ClientIo {
        let h2 = matches!(&stream, Stream::Tls(s) if s.get_ref().1.alpn_protocol() == Some(b"h2"));
        ClientIo {
            stream,
            stall: Stall::new(send_timeout),
            framing: if h2 {
                Follow::No
            } else {
                Follow::Active(Box::default())
            },
            cut: None,
            lingering: None,
        }
    }

    /// One read from the client appended to `buf` through a buffer of `N`
    /// bytes on the stack: `buf` holds only the bytes read (a small
    /// allocation; the own HTTP/1.1 path reads 4 KiB at a time, the h2
    /// server 16 KiB, a frame). `Ok(0)`: end of stream.
    pub fn poll_fill<const N: usize>(
        &mut self,
        buf: &mut bytes::BytesMut,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let mut stack = [std::mem::MaybeUninit::<u8>::uninit(); N];
        let mut rb = ReadBuf::uninit(&mut stack);
        match Pin::new(self).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                buf.extend_from_slice(rb.filled());
                Poll::Ready(Ok(rb.filled().len()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Whether TLS negotiated h2 (ALPN): no HTTP/1 on this connection.
    pub fn is_h2(&self) -> bool {
        matches!(self.framing, Follow::No)
    }

    /// Nothing of a request is pending (the own path waits for the next one with
    /// nothing buffered): the framing is let go if it is at rest, keeping only
    /// where the stream stands.
    pub fn rest(&mut self) {
        if let Follow::Active(f) = &self.framing
            && let Some(pos) = f.at_rest()
        {
            self.framing = Follow::Resting(pos);
        }
    }

    /// What the framing reader said of the request head that starts `buffered`
    /// bytes before the end of what was read: the own path reads every byte into
    /// one buffer, so its buffer's start is there. What was handed is what the
    /// reader followed (up to a cut), then the poison.
    pub fn framed_head(&self, buffered: usize) -> Option<h1_codec::framing::Head> {
        let Follow::Active(framing) = &self.framing else {
            // Resting: no head has begun since the last one handed on.
            return None;
        };
        let poison = self.cut.map_or(0, |rest| POISON.len() - rest.len());
        let handed = framing.position() + poison as u64;
        framing.head_at(handed.checked_sub(buffered as u64)?)
    }

    /// The framing reader cut the stream (see [`h1_codec::framing`]): its end is not
    /// the client's.
    pub fn was_cut(&self) -> bool {
        self.cut.is_some()
    }

    /// After a write poll: progress disarms the deadline; `Pending` arms it (or
    /// fails once it has passed).
    fn watch<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => match self.stall.poll_waiting(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "client stopped reading (limits.send_timeout)",
                ))),
                Poll::Pending => Poll::Pending,
            },
            ready => {
                self.stall.progressed();
                ready
            }
        }
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(rest) = &mut this.cut {
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            *rest = &rest[n..];
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        let read = &buf.filled()[before..];
        if let Follow::Resting(pos) = this.framing
            && !read.is_empty()
        {
            this.framing = Follow::Active(Box::new(Framing::resume(pos)));
        }
        if let (Poll::Ready(Ok(())), Follow::Active(framing)) = (&r, &mut this.framing)
            && let Some((at, why)) = framing.feed(read)
        {
            tracing::debug!(
                violation = why.as_str(),
                "request framing refused; answering 400 and closing"
            );
            // At least the cut byte is taken back, so the poison's first byte fits.
            buf.set_filled(before + at);
            let n = POISON.len().min(buf.remaining());
            buf.put_slice(&POISON[..n]);
            this.cut = Some(&POISON[n..]);
        }
        r
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        };
        this.watch(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        };
        this.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        };
        this.watch(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.lingering.is_none() {
            let shut = match &mut this.stream {
                Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
                Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            };
            std::task::ready!(shut)?;
            // Mid-request (a body the router did not read to its end) or with
            // bytes waiting, the client may still be sending.
            let mid_request = matches!(&this.framing, Follow::Active(f) if f.at_rest().is_none());
            this.lingering = Some(Lingering {
                deadline: Box::pin(tokio::time::sleep(LINGER)),
                left: LINGER_BYTES,
            });
            if this.drain(cx) == Drained::Nothing && !mid_request {
                return Poll::Ready(Ok(()));
            }
        }
        this.poll_linger(cx)
    }
}

/// What one pass of a lingering close's reads found.
#[derive(PartialEq, Eq)]
enum Drained {
    /// Nothing was waiting.
    Nothing,
    /// Bytes were read and dropped; more may come.
    Some,
    /// The client closed, failed, or sent all it may.
    Done,
}

impl ClientIo {
    /// Reads and drops what the client has sent, until nothing waits.
    fn drain(&mut self, cx: &mut Context<'_>) -> Drained {
        let mut scratch = [0u8; 4096];
        let mut found = Drained::Nothing;
        loop {
            let Some(lingering) = self.lingering.as_mut() else {
                return Drained::Done;
            };
            let mut buf = ReadBuf::new(&mut scratch);
            let r = match &mut self.stream {
                Stream::Plain(s) => Pin::new(s).poll_read(cx, &mut buf),
                Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, &mut buf),
            };
            match r {
                Poll::Pending => return found,
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    lingering.left = lingering.left.saturating_sub(buf.filled().len());
                    if lingering.left == 0 {
                        return Drained::Done;
                    }
                    found = Drained::Some;
                }
                Poll::Ready(_) => return Drained::Done,
            }
        }
    }

    /// The lingering close: drained until the client closes, or the bytes or
    /// the time it may take are spent.
    fn poll_linger(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.drain(cx) == Drained::Done {
            return Poll::Ready(Ok(()));
        }
        match self.lingering.as_mut() {
            Some(l) => l.deadline.as_mut().poll(cx).map(Ok),
            None => Poll::Ready(Ok(())),
        }
    }
}
