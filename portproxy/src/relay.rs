//! Bytes both ways between a client and its target, until both directions are done.
//!
//! Semantics (the ones TCP proxies get wrong, see portproxy.md §3.2):
//! - **Half-close**: EOF read on one side shuts down writing on the other side; the
//!   other direction keeps flowing. The relay ends when both directions have ended.
//! - **Bounded memory, none when idle**: each direction reads into a stack chunk and
//!   writes it straight through; only what the writer does not take at once is kept,
//!   in a buffer allocated then and freed when drained, and the direction reads no
//!   more until it is. An idle connection holds no buffer at all.
//! - **Idle timeout**: no byte in either direction for `idle` ends the relay
//!   ([`RelayError::Idle`]); activity only stores a timestamp, the timer is re-armed
//!   when it fires.
//! - **First-chunk guard**: optionally, the first bytes from the client are refused
//!   when they are a PROXY header (an untrusted source trying to spoof an address).
//!
//! Not here: connecting, PROXY headers other than the guard, cancellation (callers
//! wrap the future in a `select!`), resets (callers set a zero linger on error).

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::proxy_protocol::header::{self, Inspect};

/// Bytes read per step; the most a direction ever keeps while its writer is slow.
pub const CHUNK: usize = 32 * 1024;

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
    /// Bytes read but not yet written: `(buffer, written so far)`.
    pending: Option<(Box<[u8]>, usize)>,
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
pub async fn relay<C, T>(
    client: &mut C,
    target: &mut T,
    opts: Options<'_>,
) -> Result<Totals, RelayError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    T: AsyncRead + AsyncWrite + Unpin,
{
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
            match poll_half(
                cx,
                Pin::new(&mut *client),
                Pin::new(&mut *target),
                &mut up,
                &opts.counters.up,
            ) {
                Poll::Ready(Ok(())) => up.done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(classify(e, true))),
                Poll::Pending => {}
            }
        }
        if !down.done {
            match poll_half(
                cx,
                Pin::new(&mut *target),
                Pin::new(&mut *client),
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
        let now = Instant::now();
        if (up.total, down.total) != before {
            last = now;
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

/// Moves bytes from `r` to `w` until `r`'s EOF has been passed on as a shutdown.
fn poll_half<R, W>(
    cx: &mut Context<'_>,
    mut r: Pin<&mut R>,
    mut w: Pin<&mut W>,
    st: &mut Half,
    counter: &IntCounter,
) -> Poll<Result<(), HalfError>>
where
    R: AsyncRead + ?Sized,
    W: AsyncWrite + ?Sized,
{
    loop {
        if let Some((buf, pos)) = st.pending.as_mut() {
            while *pos < buf.len() {
                let n =
                    ready!(w.as_mut().poll_write(cx, &buf[*pos..])).map_err(HalfError::Write)?;
                if n == 0 {
                    return Poll::Ready(Err(HalfError::Write(io::ErrorKind::WriteZero.into())));
                }
                *pos += n;
            }
            st.pending = None;
        }
        if st.read_done {
            ready!(w.as_mut().poll_shutdown(cx)).map_err(HalfError::Write)?;
            return Poll::Ready(Ok(()));
        }
        let mut chunk = [0u8; CHUNK];
        let mut rb = ReadBuf::new(&mut chunk);
        ready!(r.as_mut().poll_read(cx, &mut rb)).map_err(HalfError::Read)?;
        let n = rb.filled().len();
        if n == 0 {
            st.read_done = true;
            continue;
        }
        if st.guard {
            st.guard = false;
            if !matches!(
                header::inspect(&chunk[..n]),
                Inspect::NotHeader | Inspect::Incomplete
            ) {
                return Poll::Ready(Err(HalfError::Refused));
            }
        }
        st.total += n as u64;
        counter.inc_by(n as u64);
        let mut off = 0;
        while off < n {
            match w.as_mut().poll_write(cx, &chunk[off..n]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(HalfError::Write(io::ErrorKind::WriteZero.into())));
                }
                Poll::Ready(Ok(k)) => off += k,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(HalfError::Write(e))),
                Poll::Pending => {
                    st.pending = Some((chunk[off..n].into(), 0));
                    return Poll::Pending;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn counters() -> ByteCounters {
        ByteCounters {
            up: IntCounter::new("u", "u").expect("counter"),
            down: IntCounter::new("d", "d").expect("counter"),
        }
    }

    #[tokio::test]
    async fn half_close_lets_the_other_direction_finish() {
        let (mut client, mut client_far) = tokio::io::duplex(1024);
        let (mut target, mut target_far) = tokio::io::duplex(1024);
        let c = counters();
        let task = tokio::spawn(async move {
            let c = counters();
            relay(
                &mut client_far,
                &mut target,
                Options {
                    idle: Duration::from_secs(5),
                    counters: &c,
                    guard_first_chunk: false,
                },
            )
            .await
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
        drop(c);
    }

    #[tokio::test]
    async fn a_slow_writer_holds_at_most_one_chunk_and_loses_nothing() {
        // A 2-byte pipe to the target: almost every write is partial.
        let (mut client, mut client_far) = tokio::io::duplex(64 * 1024);
        let (mut target, mut target_far) = tokio::io::duplex(2);
        let task = tokio::spawn(async move {
            let c = counters();
            relay(
                &mut client_far,
                &mut target,
                Options {
                    idle: Duration::from_secs(5),
                    counters: &c,
                    guard_first_chunk: false,
                },
            )
            .await
        });
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            client.write_all(&sent).await.expect("write");
            client.shutdown().await.expect("shutdown");
            client
        });
        let mut got = Vec::new();
        target_far.read_to_end(&mut got).await.expect("read");
        assert!(got == data, "bytes differ");
        drop(target_far);
        drop(writer.await.expect("writer"));
        let _ = task.await.expect("join");
    }

    #[tokio::test(start_paused = true)]
    async fn silence_ends_with_idle() {
        let (_client, mut client_far) = tokio::io::duplex(64);
        let (mut target, _target_far) = tokio::io::duplex(64);
        let c = counters();
        let r = relay(
            &mut client_far,
            &mut target,
            Options {
                idle: Duration::from_secs(30),
                counters: &c,
                guard_first_chunk: false,
            },
        )
        .await;
        assert!(matches!(r, Err(RelayError::Idle)), "{r:?}");
    }

    #[tokio::test]
    async fn the_guard_refuses_a_leading_proxy_header_only() {
        for (first, refused) in [
            (&b"PROXY TCP4 1.1.1.1 2.2.2.2 1 2\r\nhello"[..], true),
            (&b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\x01\x01\x01\x01\x02\x02\x02\x02\x00\x01\x00\x02"[..], true),
            (&b"GET / HTTP/1.1\r\n\r\n"[..], false),
        ] {
            let (mut client, mut client_far) = tokio::io::duplex(1024);
            let (mut target, mut target_far) = tokio::io::duplex(1024);
            client.write_all(first).await.expect("write");
            client.shutdown().await.expect("shutdown");
            target_far.shutdown().await.expect("shutdown");
            let c = counters();
            let r = relay(&mut client_far, &mut target, Options { idle: Duration::from_secs(5), counters: &c, guard_first_chunk: true }).await;
            assert_eq!(matches!(r, Err(RelayError::ProxyHeaderRefused)), refused, "{r:?}");
            let mut got = Vec::new();
            drop(target);
            target_far.read_to_end(&mut got).await.expect("read");
            assert_eq!(got.is_empty(), refused, "a refused header never reaches the target");
        }
    }
}
