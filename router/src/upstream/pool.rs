//! A member's idle keep-alive connections, and the [`Lease`] that returns one to
//! them once its response has been read to the end.
//!
//! A short std `Mutex` around a `Vec` (push and pop, never held across an await):
//! the pool is touched twice per request, and a lock-free stack would buy nothing
//! measurable at these sizes.
//!
//! With per-core workers ([`crate::workers`]) each worker has a list of its own: a
//! connection is registered with the reactor of the thread that opened it, goes
//! back to that thread's list, and is reused there first (as each nginx worker
//! keeps its own `keepalive` connections). `upstream.max_idle_per_backend` stays the bound of
//! the member's idle connections as a whole, counted across the lists: a list may
//! hold all of them while another holds none (an even split made the busier
//! worker close and reopen connections on every burst: 77 000 connects in 10 s).
//! A worker with none left borrows another's idle connection before it opens one
//! ([`Pool::take_idle`]): a member still never sees more connections than
//! `upstream.max_connections_per_backend`. (Closing the other's instead, so that
//! every connection stays on its own thread, made the two workers close and
//! reopen 48 000 connections in 10 s as slots moved between them.)

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    /// Idle connections kept per member, all workers' lists together.
    pub max_idle: usize,
    /// Idle lists per member: the number of per-core workers, or 1.
    pub workers: usize,
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
    /// Keep-alive connections waiting for a request, most recently used last; one
    /// list per worker (see the module doc).
    idle: Box<[Mutex<Vec<Upstream>>]>,
    /// Idle connections in all lists together (at most `settings.max_idle`).
    total: AtomicUsize,
    settings: Arc<PoolSettings>,
    /// The shared h2 connection, for apps whose members speak h2 (see [`super::h2`]).
    h2: super::h2::H2Conn,
}

impl Pool {
    pub fn new(addr: Arc<str>, settings: Arc<PoolSettings>) -> Pool {
        let lists = settings.workers.max(1);
        Pool {
            target: addr.parse().ok(),
            addr,
            idle: (0..lists).map(|_| Mutex::new(Vec::new())).collect(),
            total: AtomicUsize::new(0),
            settings,
            h2: super::h2::H2Conn::default(),
        }
    }

    /// A sender on the member's h2 connection (opened if there is none).
    pub async fn h2(
        &self,
        settings: ConnectSettings,
        tls: Option<MemberTls<'_>>,
    ) -> Result<hyper::client::conn::http2::SendRequest<super::RequestBody>, SendError> {
        self.h2
            .sender(
                &self.addr,
                self.target,
                settings,
                tls,
                &self.settings.opened,
            )
            .await
    }

    pub fn addr(&self) -> &Arc<str> {
        &self.addr
    }

    /// Worker `worker`'s list (the last one for an index past them: never the
    /// case, as both come from the same `worker_threads`).
    fn idle(&self, worker: usize) -> MutexGuard<'_, Vec<Upstream>> {
        let list = &self.idle[worker.min(self.idle.len() - 1)];
        list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new connection opened on worker `worker` (counted in
    /// `router_upstream_connections_opened_total`).
    pub async fn connect(
        &self,
        settings: ConnectSettings,
        tls: Option<MemberTls<'_>>,
        worker: usize,
    ) -> Result<Upstream, SendError> {
        let mut up = Upstream::connect(&self.addr, self.target, settings, tls).await?;
        up.set_home(worker);
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

    /// An idle connection that is still usable, if there is one: worker
    /// `worker`'s own first, else another worker's, borrowed for one request (its
    /// I/O is then woken through its own worker's reactor) and returned to that
    /// worker's list. So a connection is opened only when no list has an idle one,
    /// as with one list, and a member never sees more connections than it has
    /// request slots; and no worker opens and closes connections because the other
    /// holds the idle ones (slots move between workers, connections do not).
    pub fn take_idle(&self, worker: usize) -> Option<Upstream> {
        let lists = self.idle.len();
        (0..lists)
            .map(|i| (worker + i) % lists)
            .find_map(|w| self.take_from(w))
    }

    fn take_from(&self, worker: usize) -> Option<Upstream> {
        let now = Instant::now();
        loop {
            let mut up = self.idle(worker).pop()?;
            self.total.fetch_sub(1, Ordering::Relaxed);
            if !up.expired(now, self.settings.idle_timeout) && up.is_reusable() {
                return Some(up);
            }
            // Closed by the member or too old: drop it (outside the lock) and go on.
        }
    }

    /// Returns a connection to its worker's list (see [`Upstream::home`](super::conn::UpstreamState::home)) after
    /// its response was read to the end.
    pub fn put_idle(&self, mut up: Upstream) {
        // The socket is looked at when the connection is taken again
        // ([`Pool::take_idle`]): one readiness poll a request, not two.
        if !up.ended_cleanly() {
            return;
        }
        up.mark_idle(Instant::now());
        // Counted before it is pushed: never more than `max_idle`, whichever
        // workers return connections at once.
        if self.total.fetch_add(1, Ordering::Relaxed) < self.settings.max_idle {
            self.idle(up.home()).push(up);
        } else {
            self.total.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Closes idle connections older than the idle timeout.
    pub fn sweep(&self, now: Instant) {
        for worker in 0..self.idle.len() {
            let expired: Vec<Upstream> = {
                let mut idle = self.idle(worker);
                let (old, keep) = std::mem::take(&mut *idle)
                    .into_iter()
                    .partition(|u| u.expired(now, self.settings.idle_timeout));
                *idle = keep;
                self.total.fetch_sub(old.len(), Ordering::Relaxed);
                old
            };
            drop(expired);
        }
    }

    /// Idle connections, all workers' together.
    pub fn idle_count(&self) -> usize {
        (0..self.idle.len()).map(|w| self.idle(w).len()).sum()
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
    /// `upstream` has just returned a response head (see [`Upstream::send`](super::conn::UpstreamState::send)).
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
        self.upstream.as_ref().is_none_or(|up| up.body_ended())
    }

    pub fn size_hint(&self) -> SizeHint {
        self.upstream
            .as_ref()
            .map_or(SizeHint::with_exact(0), |up| up.body_size_hint())
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
