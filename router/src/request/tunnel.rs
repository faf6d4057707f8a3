//! An upgraded connection (WebSocket): bytes both ways between client and member
//! until either side closes, or until nothing has moved either way for
//! `limits.tunnel_idle_timeout` (haproxy's `timeout tunnel`; OpenShift's router uses
//! 1 h). Without that deadline a tunnel nobody uses would hold its member connection
//! and its client connection's place for ever.
//!
//! While it lives the tunnel is counted on its member (`tunnels`, apart from the
//! request slots: see [`InFlight::into_tunnel`]) and holds the client connection's
//! [`Activity`] (which holds its place among `limits.max_connections`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use super::activity::Activity;
#[cfg(doc)]
use crate::members::InFlight;
use crate::members::TunnelSlot;

/// What an upgraded connection holds while its tunnel lives.
pub struct Tunnel {
    pub slot: TunnelSlot,
    pub member: Arc<str>,
    /// The client connection's activity (its place on the listener).
    pub connection: Arc<Activity>,
    pub idle_timeout: Duration,
}

impl Tunnel {
    /// Waits for both upgrades, then relays until a side closes or the tunnel idles.
    pub async fn run(self, client: OnUpgrade, member: OnUpgrade) {
        let (c, m) = match tokio::try_join!(client, member) {
            Ok(both) => both,
            Err(e) => {
                tracing::debug!(member = %self.member, error = %e, "upgrade failed");
                return;
            }
        };
        relay(
            TokioIo::new(c),
            TokioIo::new(m),
            self.idle_timeout,
            &self.member,
        )
        .await;
        drop(self.connection);
    }
}

/// Relays bytes both ways until a side closes (each half-close passed on) or
/// nothing has moved either way for `idle_timeout`. Shared by upgraded connections
/// and TLS passthrough.
pub async fn relay<A, B>(a: A, b: B, idle_timeout: Duration, member: &str)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let clock = Arc::new(Clock::new());
    let mut a = Watched::new(a, clock.clone());
    let mut b = Watched::new(b, clock.clone());
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut a, &mut b) => {
            if let Err(e) = r {
                tracing::debug!(member, error = %e, "tunnel ended");
            }
        }
        _ = clock.idle(idle_timeout) => {
            tracing::debug!(member, "tunnel idle: closed (limits.tunnel_idle_timeout)");
        }
    }
}

/// When bytes last moved through the tunnel, either way.
struct Clock {
    origin: Instant,
    last_ms: AtomicU64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn moved(&self) {
        let ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `limit`.
    async fn idle(&self, limit: Duration) {
        loop {
            let last = self.origin + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            if Instant::now() >= last + limit {
                return;
            }
            tokio::time::sleep_until(last + limit).await;
        }
    }
}

/// One side of the tunnel, telling the clock about every byte read or written.
struct Watched<T> {
    io: T,
    clock: Arc<Clock>,
}

impl<T> Watched<T> {
    fn new(io: T, clock: Arc<Clock>) -> Watched<T> {
        Watched { io, clock }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.clock.moved();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.clock.moved();
        }
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_counts_from_the_last_byte_either_way() {
        let clock = Arc::new(Clock::new());
        let limit = Duration::from_secs(10);
        let waiter = tokio::spawn({
            let clock = clock.clone();
            async move {
                clock.idle(limit).await;
                Instant::now()
            }
        });
        for _ in 0..5 {
            tokio::time::sleep(Duration::from_secs(6)).await;
            clock.moved();
        }
        assert!(!waiter.is_finished(), "bytes kept moving");
        let last = Instant::now();
        assert_eq!(waiter.await.expect("join") - last, limit);
    }
}
