//! Bytes both ways between two streams until both directions are done: the one
//! relay of the router's tunnels (WebSocket, TLS passthrough, `tcp.listen` ports) and
//! of the portproxy.
//!
//! Semantics (the ones TCP proxies get wrong):
//! - **Half-close**: EOF read on one side shuts down writing on the other side; the
//!   other direction keeps flowing. The relay ends when both directions have ended.
//! - **Bounded memory, none when idle**: each direction reads into a stack chunk and
//!   writes it straight through; only what the writer does not take at once is kept,
//!   in a buffer allocated then and freed when drained, and the direction reads no
//!   more until it is. An idle relay holds no buffer at all (`tokio`'s
//!   `copy_bidirectional` holds two 8 KiB buffers for a tunnel's whole life).
//! - **Zero-copy for bulk**: between two plain TCP sockets, a direction that has
//!   moved [`SPLICE_AFTER`] bytes switches to `splice(2)` through a kernel pipe of its
//!   own ([`pipe`]), so bulk bytes never cross into user space. Short exchanges never
//!   pay for a pipe; if no pipe can be had (out of descriptors) the copy goes on.
//!   Other streams (TLS, hyper's upgraded connections) are copied.
//! - **Idle timeout**: no byte in either direction for `idle` ends the relay
//!   ([`RelayError::Idle`]), through the one "no progress" deadline, [`stall::Stall`].
//! - **First-chunk guard**: optionally, the first bytes from side `a` are shown to a
//!   check that may refuse them (the portproxy refuses a PROXY header from a source
//!   it does not trust).
//!
//! Not here: connecting, cancellation (callers wrap the future in a `select!`),
//! resets (callers set a zero linger on error).

mod pipe;
pub mod stall;

use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

use pipe::Pipe;
use stall::Stall;

/// Bytes read per step in copy mode; the most a direction keeps while its writer is
/// slow.
pub const CHUNK: usize = 64 * 1024;

/// A direction that has moved this much switches to splice.
pub const SPLICE_AFTER: u64 = 256 * 1024;

/// Why a relay ended other than by both sides closing.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("idle for longer than the idle timeout")]
    Idle,
    #[error("side a's first bytes were refused")]
    Refused,
    #[error("side a: {0}")]
    A(#[source] io::Error),
    #[error("side b: {0}")]
    B(#[source] io::Error),
}

/// A stream the relay can carry: any, and a plain TCP socket can be spliced.
pub trait Stream: AsyncRead + AsyncWrite + Unpin {
    /// The TCP socket, when bytes may move by `splice(2)` from or to it directly.
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

impl Stream for TcpStream {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

/// Any other stream, relayed by copy (TLS, hyper's upgraded connection).
pub struct Copied<T>(pub T);

impl<T: AsyncRead + AsyncWrite + Unpin> Stream for Copied<T> {}

impl<T: AsyncRead + Unpin> AsyncRead for Copied<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Copied<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// Byte counters to bump as bytes go through (they are Prometheus counters).
#[derive(Clone)]
pub struct ByteCounters {
    /// Side a → side b.
    pub up: IntCounter,
    /// Side b → side a.
    pub down: IntCounter,
}

/// Totals when a relay ends cleanly.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Side a → side b.
    pub up: u64,
    /// Side b → side a.
    pub down: u64,
}

/// Options of one relay.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    pub idle: Duration,
    pub counters: Option<&'a ByteCounters>,
    /// Shown side a's first bytes; `true` refuses them ([`RelayError::Refused`]).
    pub refuse_first: Option<fn(&[u8]) -> bool>,
}

impl Options<'_> {
    /// No counters, no guard.
    pub fn idle(idle: Duration) -> Options<'static> {
        Options {
            idle,
            counters: None,
            refuse_first: None,
        }
    }
}

/// One direction's state.
#[derive(Default)]
struct Half {
    /// Copy mode: bytes read but not yet written, `(buffer, written so far)`.
    pending: Option<(Box<[u8]>, usize)>,
    /// Splice mode: the pipe, once the direction has turned out to be bulk.
    pipe: Option<Pipe>,
    /// Copy for good: a side is not plain TCP, or no pipe could be had.
    no_splice: bool,
    /// Bytes were written that the writer may hold back until flushed.
    unflushed: bool,
    read_done: bool,
    done: bool,
    total: u64,
    /// The check the first bytes are still to pass.
    guard: Option<fn(&[u8]) -> bool>,
}

/// How a direction failed: on its reader, on its writer, or by the guard.
enum HalfError {
    Read(io::Error),
    Write(io::Error),
    Refused,
}

/// Relays between `a` and `b` until both directions end (or an error, or the idle
/// timeout).
pub async fn relay<A: Stream, B: Stream>(
    a: &mut A,
    b: &mut B,
    opts: Options<'_>,
) -> Result<Totals, RelayError> {
    let plain = a.tcp().is_some() && b.tcp().is_some();
    let mut up = Half {
        guard: opts.refuse_first,
        no_splice: !plain,
        ..Half::default()
    };
    let mut down = Half {
        no_splice: !plain,
        ..Half::default()
    };
    let mut idle = Stall::new(opts.idle);
    let (count_up, count_down) = match opts.counters {
        Some(c) => (Some(&c.up), Some(&c.down)),
        None => (None, None),
    };
    poll_fn(|cx| {
        let before = (up.total, down.total);
        if !up.done {
            match poll_half(cx, &mut *a, &mut *b, &mut up, count_up) {
                Poll::Ready(Ok(())) => up.done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(blame(e, true))),
                Poll::Pending => {}
            }
        }
        if !down.done {
            match poll_half(cx, &mut *b, &mut *a, &mut down, count_down) {
                Poll::Ready(Ok(())) => down.done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(blame(e, false))),
                Poll::Pending => {}
            }
        }
        if up.done && down.done {
            return Poll::Ready(Ok(Totals {
                up: up.total,
                down: down.total,
            }));
        }
        if (up.total, down.total) != before {
            idle.progressed();
        }
        idle.poll_waiting(cx).map(|()| Err(RelayError::Idle))
    })
    .await
}

/// Says whose fault it was: `reader_is_a` tells which side the direction reads.
fn blame(e: HalfError, reader_is_a: bool) -> RelayError {
    match (e, reader_is_a) {
        (HalfError::Refused, _) => RelayError::Refused,
        (HalfError::Read(e), true) | (HalfError::Write(e), false) => RelayError::A(e),
        (HalfError::Read(e), false) | (HalfError::Write(e), true) => RelayError::B(e),
    }
}

/// Writes as much of `buf` as `w` takes now (`Pending` when nothing).
fn poll_write_some<W: Stream>(
    cx: &mut Context<'_>,
    w: &mut W,
    buf: &[u8],
) -> Poll<io::Result<usize>> {
    match ready!(Pin::new(w).poll_write(cx, buf)) {
        Ok(0) => Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
        other => Poll::Ready(other),
    }
}

/// Moves bytes from `r` to `w` until `r`'s EOF has been passed on as a shutdown.
fn poll_half<R: Stream, W: Stream>(
    cx: &mut Context<'_>,
    r: &mut R,
    w: &mut W,
    st: &mut Half,
    counter: Option<&IntCounter>,
) -> Poll<Result<(), HalfError>> {
    loop {
        ready!(poll_drain(cx, w, st))?;
        if st.read_done {
            // Half-close: the other side learns of the EOF, its direction goes on.
            return match ready!(Pin::new(w).poll_shutdown(cx)) {
                Err(e) if e.kind() != io::ErrorKind::NotConnected => {
                    Poll::Ready(Err(HalfError::Write(e)))
                }
                _ => Poll::Ready(Ok(())),
            };
        }
        if st.pipe.is_none() && !st.no_splice && st.total >= SPLICE_AFTER {
            match Pipe::new() {
                Ok(p) => st.pipe = Some(p),
                Err(_) => st.no_splice = true,
            }
        }
        let read = match (st.pipe.as_mut(), r.tcp()) {
            (Some(p), Some(rs)) => poll_splice_in(cx, rs, p),
            _ => poll_copy(cx, r, w, st),
        };
        let n = match read {
            Poll::Ready(r) => r?,
            Poll::Pending => {
                // Nothing more to read now: what was written must not wait in a
                // writer's buffer (TLS) for bytes that may never come.
                if st.unflushed
                    && Pin::new(w)
                        .poll_flush(cx)
                        .map_err(HalfError::Write)?
                        .is_ready()
                {
                    st.unflushed = false;
                }
                return Poll::Pending;
            }
        };
        if n == 0 {
            st.read_done = true;
            continue;
        }
        st.total += n as u64;
        if let Some(c) = counter {
            c.inc_by(n as u64);
        }
    }
}

/// Writes what a slow writer left (copy mode) or what the pipe holds (splice
/// mode), in order, before anything new is read.
fn poll_drain<W: Stream>(
    cx: &mut Context<'_>,
    w: &mut W,
    st: &mut Half,
) -> Poll<Result<(), HalfError>> {
    if let Some((buf, pos)) = st.pending.as_mut() {
        while *pos < buf.len() {
            *pos += ready!(poll_write_some(cx, w, &buf[*pos..])).map_err(HalfError::Write)?;
        }
        st.pending = None;
        st.unflushed = true;
    }
    if let (Some(p), Some(ws)) = (st.pipe.as_mut(), w.tcp()) {
        while p.len > 0 {
            ready!(ws.poll_write_ready(cx)).map_err(HalfError::Write)?;
            match ws.try_io(Interest::WRITABLE, || p.drain_to(ws.as_raw_fd())) {
                Ok(0) => {
                    return Poll::Ready(Err(HalfError::Write(io::ErrorKind::WriteZero.into())));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(HalfError::Write(e))),
            }
        }
    }
    Poll::Ready(Ok(()))
}

/// Splice mode: moves what `rs` has into the pipe; 0 at EOF.
fn poll_splice_in(
    cx: &mut Context<'_>,
    rs: &TcpStream,
    p: &mut Pipe,
) -> Poll<Result<usize, HalfError>> {
    loop {
        ready!(rs.poll_read_ready(cx)).map_err(HalfError::Read)?;
        match rs.try_io(Interest::READABLE, || p.fill_from(rs.as_raw_fd())) {
            Ok(n) => return Poll::Ready(Ok(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Poll::Ready(Err(HalfError::Read(e))),
        }
    }
}

/// Copy mode: reads one chunk and writes as much as `w` takes; the rest becomes
/// the direction's pending buffer. Returns the bytes read (0 at EOF).
fn poll_copy<R: Stream, W: Stream>(
    cx: &mut Context<'_>,
    r: &mut R,
    w: &mut W,
    st: &mut Half,
) -> Poll<Result<usize, HalfError>> {
    // Not zeroed: filling 64 KiB per read cost 3% of the bulk profile.
    let mut chunk = [MaybeUninit::<u8>::uninit(); CHUNK];
    let mut rb = ReadBuf::uninit(&mut chunk);
    ready!(Pin::new(&mut *r).poll_read(cx, &mut rb)).map_err(HalfError::Read)?;
    let data = rb.filled();
    let n = data.len();
    if n > 0
        && let Some(refuse) = st.guard.take()
        && refuse(data)
    {
        return Poll::Ready(Err(HalfError::Refused));
    }
    let mut off = 0;
    while off < n {
        match poll_write_some(cx, w, &data[off..]) {
            Poll::Ready(Ok(k)) => {
                off += k;
                st.unflushed = true;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(HalfError::Write(e))),
            Poll::Pending => {
                st.pending = Some((data[off..].into(), 0));
                break;
            }
        }
    }
    Poll::Ready(Ok(n))
}

#[cfg(test)]
mod tests;
