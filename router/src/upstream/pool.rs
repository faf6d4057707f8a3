//! A member's idle keep-alive connections, and the [`Lease`] that returns one to
//! them once its response has been read to the end.
//!
//! A short std `Mutex` around a `Vec` (push and pop, never held across an await):
//! the pool is touched twice per request, and a lock-free stack would buy nothing
//! measurable at these sizes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Frame, SizeHint};
use prometheus::IntCounter;

use super::conn::{ConnectSettings, MemberTls, ResponseBodyError, SendError, Upstream};
use tokio::net::TcpStream;

/// How idle connections are kept, from `upstream.*`.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub max_idle: usize,
    pub idle_timeout: Duration,
    /// `router_upstream_connections_opened_total`.
    pub opened: IntCounter,
}

/// The connections to one member address.
#[derive(Debug)]
pub struct Pool {
    /// `address:port`, exactly as announced.
    addr: Arc<str>,
    /// The same, parsed; `None` if the address is not an IP literal (never dialled).
    target: Option<SocketAddr>,
    /// Keep-alive connections waiting for a request, most recently used last.
    idle: Mutex<Vec<Upstream>>,
    settings: Arc<PoolSettings>,
}

impl Pool {
    pub fn new(addr: Arc<str>, settings: Arc<PoolSettings>) -> Pool {
        Pool {
            target: addr.parse().ok(),
            addr,
            idle: Mutex::new(Vec::new()),
            settings,
        }
    }

    pub fn addr(&self) -> &Arc<str> {
        &self.addr
    }

    fn idle(&self) -> MutexGuard<'_, Vec<Upstream>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new connection (counted in `router_upstream_connections_opened_total`).
    pub async fn connect(
        &self,
        settings: ConnectSettings,
        tls: Option<MemberTls<'_>>,
    ) -> Result<Upstream, SendError> {
        let up = Upstream::connect(&self.addr, self.target, settings, tls).await?;
        self.settings.opened.inc();
        Ok(up)
    }

    /// A new raw TCP connection (TLS passthrough), counted like the others.
    pub async fn dial(&self, settings: ConnectSettings) -> Result<TcpStream, SendError> {
        let target = self.target.ok_or_else(|| SendError::Connect {
            addr: self.addr.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an IP address"),
        })?;
        let deadline = tokio::time::Instant::now() + settings.connect_timeout;
        let stream = super::conn::dial(&self.addr, target, deadline).await?;
        self.settings.opened.inc();
        Ok(stream)
    }

    /// An idle connection that is still usable, if there is one.
    pub fn take_idle(&self) -> Option<Upstream> {
        let now = Instant::now();
        loop {
            let mut up = self.idle().pop()?;
            if !up.expired(now, self.settings.idle_timeout) && up.is_reusable() {
                return Some(up);
            }
            // Closed by the member or too old: drop it (outside the lock) and go on.
        }
    }

    /// Returns a connection after its response was read to the end.
    pub fn put_idle(&self, mut up: Upstream) {
        if !up.is_reusable() {
            return;
        }
        up.mark_idle(Instant::now());
        let mut idle = self.idle();
        if idle.len() < self.settings.max_idle {
            idle.push(up);
        }
    }

    /// Closes idle connections older than the idle timeout.
    pub fn sweep(&self, now: Instant) {
        let expired: Vec<Upstream> = {
            let mut idle = self.idle();
            let (old, keep) = std::mem::take(&mut *idle)
                .into_iter()
                .partition(|u| u.expired(now, self.settings.idle_timeout));
            *idle = keep;
            old
        };
        drop(expired);
    }

    pub fn idle_count(&self) -> usize {
        self.idle().len()
    }
}

/// A member's response body together with the connection it arrives on. Polling the
/// body reads the connection; once the body has ended the connection goes back to
/// the member's idle list, otherwise it is closed with the lease.
pub struct Lease {
    upstream: Option<Upstream>,
    pool: Arc<Pool>,
}

impl Lease {
    /// `upstream` has just returned a response head (see [`Upstream::send`]).
    pub fn new(upstream: Upstream, pool: Arc<Pool>) -> Lease {
        Lease {
            upstream: Some(upstream),
            pool,
        }
    }

    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ResponseBodyError>>> {
        let Some(up) = self.upstream.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = up.poll_body(cx);
        if let Poll::Ready(None) = polled {
            self.release();
        }
        polled
    }

    pub fn is_end_stream(&self) -> bool {
        self.upstream.as_ref().is_none_or(Upstream::body_ended)
    }

    pub fn size_hint(&self) -> SizeHint {
        self.upstream
            .as_ref()
            .map_or(SizeHint::with_exact(0), Upstream::body_size_hint)
    }

    fn release(&mut self) {
        if let Some(up) = self.upstream.take()
            && up.body_ended()
        {
            self.pool.put_idle(up);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A body that never needed polling (HEAD, 204, 304) has ended too; one
        // dropped before its end closes the connection (HTTP/1 cannot skip it).
        self.release();
    }
}
