//! Bytes both ways between a client and its target, until both directions are done.
//!
//! Semantics (the ones TCP proxies get wrong, see portproxy.md §3.2):
//! - **Half-close**: EOF read on one side shuts down writing on the other side; the
//!   other direction keeps flowing. The relay ends when both directions have ended.
//! - **Bounded memory, none when idle**: each direction reads into a stack chunk and
//!   writes it straight through; only what the writer does not take at once is kept,
//!   in a buffer allocated then and freed when drained, and the direction reads no
//!   more until it is. An idle connection holds no buffer at all.
//! - **Zero-copy for bulk**: once a direction has moved [`SPLICE_AFTER`] bytes it
//!   switches to `splice(2)` through a kernel pipe of its own (`pipe`), so bulk bytes
//!   never cross into user space (measured in bench/RESULTS.md). Short exchanges never
//!   pay for a pipe; if no pipe can be had (out of descriptors) the copy goes on.
//! - **Idle timeout**: no byte in either direction for `idle` ends the relay
//!   ([`RelayError::Idle`]); activity only stores a timestamp, the timer is re-armed
//!   when it fires.
//! - **First-chunk guard**: optionally, the first bytes from the client are refused
//!   when they are a PROXY header (an untrusted source trying to spoof an address).
//!
//! Not here: connecting, PROXY headers other than the guard, cancellation (callers
//! wrap the future in a `select!`), resets (callers set a zero linger on error).

mod pipe;

use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::time::{Instant, Sleep};

use crate::proxy_protocol::header::{self, Inspect};
use pipe::Pipe;

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
    #[error("the client sent a PROXY header but is not a trusted source")]
    ProxyHeaderRefused,
    #[error("client side: {0}")]
    Client(#[source] io::Error),
    #[error("target side: {0}")]
    Target(#[source] io::Error),
}

/// Byte counters to bump as bytes go through (they are Prometheus counters).
#[derive(Clone)]
pub struct ByteCounters {
    /// Client → target.
    pub up: IntCounter,
    /// Target → client.
    pub down: IntCounter,
}

/// Totals when a relay ends cleanly.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub up: u64,
    pub down: u64,
}

/// Options of one relay.
pub struct Options<'a> {
    pub idle: Duration,
    pub counters: &'a ByteCounters,
    /// Refuse a PROXY header at the start of the client's bytes.
    pub guard_first_chunk: bool,
}

/// One direction's state.
#[derive(Default)]
struct Half {
    /// Copy mode: bytes read but not yet written, `(buffer, written so far)`.
    pending: Option<(Box<[u8]>, usize)>,
    /// Splice mode: the pipe, once the direction has turned out to be bulk.
    pipe: Option<Pipe>,
    /// No pipe could be had: copy for good.
    no_splice: bool,
    read_done: bool,
    done: bool,
    total: u64,
    /// The first chunk is still to be checked by the guard.
    guard: bool,
}

/// How a direction failed: on its reader, on its writer, or by the guard.
enum HalfError {
    Read(io::Error),
    Write(io::Error),
    Refused,
}

/// Relays between `client` and `target` until both directions end (or an error, or
/// the idle timeout).
pub async fn relay(
    client: &mut TcpStream,
    target: &mut TcpStream,
    opts: Options<'_>,
) -> Result<Totals, RelayError> {
    // Split halves read and write through tokio's `AsyncRead`/`AsyncWrite`, which
    // take a short read as "drained" and skip the read that would only say EAGAIN
    // (two syscalls fewer per short connection than `try_read`).
    let (mut client_r, mut client_w) = client.split();
    let (mut target_r, mut target_w) = target.split();
    let mut up = Half {
        guard: opts.guard_first_chunk,
        ..Half::default()
    };
    let mut down = Half::default();
    let mut last = Instant::now();
    let mut timer: Pin<Box<Sleep>> = Box::pin(tokio::time::sleep(opts.idle));
    poll_fn(|cx| {
        let before = (up.total, down.total);
        if !up.done {
            match poll_half(cx, &mut client_r, &mut target_w, &mut up, &opts.counters.up) {
                Poll::Ready(Ok(())) => up.done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(classify(e, true))),
                Poll::Pending => {}
            }
        }
        if !down.done {
            match poll_half(
                cx,
                &mut target_r,
                &mut client_w,
                &mut down,
                &opts.counters.down,
            ) {
                Poll::Ready(Ok(())) => down.done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(classify(e, false))),
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
            last = Instant::now();
        }
        // The timer is re-armed only when it fires before the deadline moved on.
        while timer.as_mut().poll(cx).is_ready() {
            let deadline = last + opts.idle;
            if deadline <= Instant::now() {
                return Poll::Ready(Err(RelayError::Idle));
            }
            timer.as_mut().reset(deadline);
        }
        Poll::Pending
    })
    .await
}

/// Says whose fault it was: `reader_is_client` tells which side the direction reads.
fn classify(e: HalfError, reader_is_client: bool) -> RelayError {
    match (e, reader_is_client) {
        (HalfError::Refused, _) => RelayError::ProxyHeaderRefused,
        (HalfError::Read(e), true) | (HalfError::Write(e), false) => RelayError::Client(e),
        (HalfError::Read(e), false) | (HalfError::Write(e), true) => RelayError::Target(e),
    }
}

/// Writes as much of `buf` as `w` takes now (`Pending` when nothing).
fn poll_write_some(
    cx: &mut Context<'_>,
    w: &mut WriteHalf<'_>,
    buf: &[u8],
) -> Poll<io::Result<usize>> {
    match ready!(Pin::new(w).poll_write(cx, buf)) {
        Ok(0) => Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
        other => Poll::Ready(other),
    }
}

/// Moves bytes from `r` to `w` until `r`'s EOF has been passed on as a shutdown.
fn poll_half(
    cx: &mut Context<'_>,
    r: &mut ReadHalf<'_>,
    w: &mut WriteHalf<'_>,
    st: &mut Half,
    counter: &IntCounter,
) -> Poll<Result<(), HalfError>> {
    loop {
        // What a slow writer left: written first, in order.
        if let Some((buf, pos)) = st.pending.as_mut() {
            while *pos < buf.len() {
                *pos += ready!(poll_write_some(cx, w, &buf[*pos..])).map_err(HalfError::Write)?;
            }
            st.pending = None;
        }
        if let Some(p) = st.pipe.as_mut() {
            while p.len > 0 {
                let ws: &TcpStream = w.as_ref();
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
        if st.read_done {
            // Half-close: the other side learns of the EOF, its direction goes on.
            socket2::SockRef::from(w.as_ref())
                .shutdown(Shutdown::Write)
                .or_else(|e| {
                    if e.kind() == io::ErrorKind::NotConnected {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(HalfError::Write)?;
            return Poll::Ready(Ok(()));
        }
        if st.pipe.is_none() && !st.no_splice && st.total >= SPLICE_AFTER {
            match Pipe::new() {
                Ok(p) => st.pipe = Some(p),
                Err(_) => st.no_splice = true,
            }
        }
        let n = if let Some(p) = st.pipe.as_mut() {
            let rs: &TcpStream = r.as_ref();
            ready!(rs.poll_read_ready(cx)).map_err(HalfError::Read)?;
            match rs.try_io(Interest::READABLE, || p.fill_from(rs.as_raw_fd())) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(HalfError::Read(e))),
            }
        } else {
            // Not zeroed: filling 64 KiB per read cost 3% of the bulk profile.
            let mut chunk = [MaybeUninit::<u8>::uninit(); CHUNK];
            let mut rb = ReadBuf::uninit(&mut chunk);
            ready!(Pin::new(&mut *r).poll_read(cx, &mut rb)).map_err(HalfError::Read)?;
            let data = rb.filled();
            let n = data.len();
            if n > 0 && st.guard {
                st.guard = false;
                if !matches!(
                    header::inspect(data),
                    Inspect::NotHeader | Inspect::Incomplete
                ) {
                    return Poll::Ready(Err(HalfError::Refused));
                }
            }
            let mut off = 0;
            while off < n {
                match poll_write_some(cx, w, &data[off..]) {
                    Poll::Ready(Ok(k)) => off += k,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(HalfError::Write(e))),
                    Poll::Pending => {
                        st.pending = Some((data[off..].into(), 0));
                        break;
                    }
                }
            }
            n
        };
        if n == 0 {
            st.read_done = true;
            continue;
        }
        st.total += n as u64;
        counter.inc_by(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    fn counters() -> ByteCounters {
        ByteCounters {
            up: IntCounter::new("u", "u").expect("counter"),
            down: IntCounter::new("d", "d").expect("counter"),
        }
    }

    /// Two connected loopback pairs `(client, client_far)`, `(target, target_far)`:
    /// the relay runs between `client_far` and `target`.
    async fn pairs() -> ((TcpStream, TcpStream), (TcpStream, TcpStream)) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let a = l.local_addr().expect("addr");
        let mut out = Vec::new();
        for _ in 0..2 {
            let (c, s) = tokio::join!(TcpStream::connect(a), l.accept());
            out.push((c.expect("connect"), s.expect("accept").0));
        }
        let second = out.pop().expect("pair");
        let first = out.pop().expect("pair");
        (first, second)
    }

    fn opts(c: &ByteCounters, idle: u64, guard: bool) -> Options<'_> {
        Options {
            idle: Duration::from_secs(idle),
            counters: c,
            guard_first_chunk: guard,
        }
    }

    #[tokio::test]
    async fn half_close_lets_the_other_direction_finish() {
        let ((mut client, mut client_far), (mut target, mut target_far)) = pairs().await;
        let task = tokio::spawn(async move {
            let c = counters();
            relay(&mut client_far, &mut target, opts(&c, 5, false)).await
        });
        client.write_all(b"question").await.expect("write");
        client.shutdown().await.expect("shutdown");
        let mut got = Vec::new();
        target_far
            .read_to_end(&mut got)
            .await
            .expect("target sees EOF");
        assert_eq!(got, b"question");
        // The target answers after the client's EOF; the answer still arrives.
        target_far.write_all(b"answer").await.expect("write");
        target_far.shutdown().await.expect("shutdown");
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.expect("read");
        assert_eq!(back, b"answer");
        let totals = task.await.expect("join").expect("clean end");
        assert_eq!(totals, Totals { up: 8, down: 6 });
    }

    #[tokio::test]
    async fn bulk_through_copy_then_splice_with_a_slow_reader_loses_nothing() {
        let ((client, mut client_far), (mut target, mut target_far)) = pairs().await;
        let c = counters();
        let up = c.up.clone();
        let task =
            tokio::spawn(
                async move { relay(&mut client_far, &mut target, opts(&c, 5, false)).await },
            );
        // Far past SPLICE_AFTER, so both the copy and the splice path carry bytes.
        let data: Vec<u8> = (0..8_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            let mut client = client;
            client.write_all(&sent).await.expect("write");
            client.shutdown().await.expect("shutdown");
            client
        });
        let mut got = Vec::new();
        let mut buf = vec![0u8; 7_919];
        loop {
            // A slow reader: small reads with pauses, so the relay meets back-pressure.
            let n = target_far.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if got.len() % 97 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        assert_eq!(got.len(), data.len());
        assert!(got == data, "bytes differ");
        assert_eq!(up.get(), data.len() as u64);
        drop(target_far);
        drop(writer.await.expect("writer"));
        let _ = task.await.expect("join");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_ends_with_idle() {
        let ((_client, mut client_far), (mut target, _target_far)) = pairs().await;
        let c = counters();
        let r = relay(&mut client_far, &mut target, opts(&c, 30, false)).await;
        assert!(matches!(r, Err(RelayError::Idle)), "{r:?}");
    }

    #[tokio::test]
    async fn the_guard_refuses_a_leading_proxy_header_only() {
        for (first, refused) in [
            (&b"PROXY TCP4 1.1.1.1 2.2.2.2 1 2\r\nhello"[..], true),
            (
                &b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\x01\x01\x01\x01\x02\x02\x02\x02\x00\x01\x00\x02"[..],
                true,
            ),
            (&b"GET / HTTP/1.1\r\n\r\n"[..], false),
        ] {
            let ((mut client, mut client_far), (mut target, mut target_far)) = pairs().await;
            client.write_all(first).await.expect("write");
            client.shutdown().await.expect("shutdown");
            target_far.shutdown().await.expect("shutdown");
            let c = counters();
            let r = relay(&mut client_far, &mut target, opts(&c, 5, true)).await;
            assert_eq!(matches!(r, Err(RelayError::ProxyHeaderRefused)), refused, "{r:?}");
            drop(target);
            let mut got = Vec::new();
            target_far.read_to_end(&mut got).await.expect("read");
            assert_eq!(got.is_empty(), refused, "a refused header never reaches the target");
        }
    }
}
