//! What every listener shares: admission, accept loop, target connect, relay
//! bookkeeping, and the daemon's start and graceful stop.
//!
//! A connection's life: `accept_loop` accepts and admits it (a permit from
//! `limits`), counts it and spawns the mode's handler on the shared `TaskTracker`;
//! the handler picks a target, `connect`s, and calls `relay_and_count`. Shutdown:
//! listeners stop, open connections get `shutdown_grace` to finish, then `kill`
//! cuts the rest.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::limits::Admission;
use crate::limits::Limits;
use crate::metrics::{Metrics, Mode};
use relay::RelayError;

use crate::proxy_protocol::header::{self, Inspect};

/// State every connection handler can reach.
pub struct Shared {
    pub limits: Limits,
    pub metrics: Metrics,
    pub admission: Admission,
    /// Connections per client source (`limits.max_connections_per_source`).
    pub per_source: Arc<per_source::PerSource>,
    /// Sources without that cap (`limits.unlimited_sources`, cluster's trusted).
    pub unlimited: Vec<ipnet::IpNet>,
    /// Every connection task, so shutdown can wait for them.
    pub tracker: TaskTracker,
    /// Cancelled when the shutdown grace is over: open connections are cut.
    pub kill: CancellationToken,
}

impl Shared {
    pub fn new(limits: Limits, metrics: Metrics) -> Arc<Shared> {
        Shared::with_unlimited(limits, metrics, Vec::new())
    }

    /// Also without a per-source cap for `more` (cluster mode's trusted sources).
    pub fn with_unlimited(
        limits: Limits,
        metrics: Metrics,
        more: Vec<ipnet::IpNet>,
    ) -> Arc<Shared> {
        let mut unlimited = limits.unlimited_sources.clone();
        unlimited.extend(more);
        Arc::new(Shared {
            admission: Admission::new(limits.max_connections),
            per_source: per_source::PerSource::new(limits.per_source()),
            unlimited,
            limits,
            metrics,
            tracker: TaskTracker::new(),
            kill: CancellationToken::new(),
        })
    }
}

/// Accepts on `listener` forever, admitting each connection and running `handle` on
/// it in its own task, through the one accept loop of both binaries
/// (`accept::run`). Drop (abort) the task to stop listening; the connections it
/// started are not affected.
pub async fn accept_loop<F, Fut>(listener: TcpListener, shared: Arc<Shared>, mode: Mode, handle: F)
where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let m = shared.metrics.mode(mode).clone();
    // The gauge follows the task: down however the listener ends (aborted, dropped).
    let _listening = Gauged::new(m.listeners.clone());
    let errors = shared.metrics.accept_errors.clone();
    let mut port = Port {
        listener,
        shared,
        mode,
        handle,
    };
    accept::run(&mut port, mode.as_str(), &errors, std::future::pending()).await;
}

/// One port's steps of the one accept loop: a source at its cap is closed at once
/// (except peers and `unlimited_sources`), and so is a client at
/// `limits.max_connections` (the node's relays are not waited for).
struct Port<F> {
    listener: TcpListener,
    shared: Arc<Shared>,
    mode: Mode,
    handle: F,
}

impl<F, Fut> accept::Listener for Port<F>
where
    F: Fn(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    type Source = TcpListener;
    type Passed = Option<per_source::SourceSlot>;

    fn source(&mut self) -> &mut TcpListener {
        &mut self.listener
    }

    fn gate(&mut self, client: TcpStream, peer: SocketAddr) -> Option<(TcpStream, Self::Passed)> {
        let shared = &self.shared;
        // One source (not a router in front, not a peer proxy) at its cap:
        // closed at once, so it cannot take the node's every relay.
        let unlimited = matches!(self.mode, Mode::Peer)
            || shared
                .unlimited
                .iter()
                .any(|n| n.contains(&peer.ip().to_canonical()));
        if unlimited {
            return Some((client, None));
        }
        match shared
            .per_source
            .slot(shared.limits.client_keys().key(peer.ip()))
        {
            Some(source) => Some((client, Some(source))),
            None => {
                shared
                    .metrics
                    .rejected
                    .with_label_values(&["source_limit"])
                    .inc();
                None
            }
        }
    }

    fn slots(&self) -> Arc<tokio::sync::Semaphore> {
        self.shared.admission.slots()
    }

    fn full(&mut self, _: TcpStream, _: &Self::Passed) -> Option<TcpStream> {
        self.shared
            .metrics
            .rejected
            .with_label_values(&["max_connections"])
            .inc();
        None
    }

    fn serve(
        &mut self,
        stream: TcpStream,
        peer: SocketAddr,
        source: Self::Passed,
        permit: OwnedSemaphorePermit,
    ) {
        let m = self.shared.metrics.mode(self.mode);
        let _ = stream.set_nodelay(true);
        m.total.inc();
        let fut = (self.handle)(stream, peer);
        let kill = self.shared.kill.clone();
        let open = m.open.clone();
        self.shared.tracker.spawn(async move {
            let _slot = ConnectionSlot::new(permit, open);
            let _source = source;
            tokio::select! {
                () = fut => {}
                () = kill.cancelled() => {}
            }
        });
    }
}

/// Holds a connection's permit and its `open` gauge for the task's life.
struct ConnectionSlot {
    _permit: OwnedSemaphorePermit,
    _open: Gauged,
}

impl ConnectionSlot {
    fn new(permit: OwnedSemaphorePermit, open: prometheus::IntGauge) -> ConnectionSlot {
        ConnectionSlot {
            _permit: permit,
            _open: Gauged::new(open),
        }
    }
}

/// One unit of a gauge, given back on drop.
pub struct Gauged(prometheus::IntGauge);

impl Gauged {
    pub fn new(g: prometheus::IntGauge) -> Gauged {
        g.inc();
        Gauged(g)
    }
}

impl Drop for Gauged {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Connects to a target within the connect timeout (TCP_NODELAY on).
pub async fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    tokio::time::timeout(timeout, connect_now(addr))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))?
}

/// A non-blocking connect whose outcome is read from the socket's readiness:
/// the socket's own error (`getsockopt(SO_ERROR)`) is asked for only when the
/// readiness says the connect failed. tokio's `TcpStream::connect` asks for it
/// after every connect: one system call a relayed connection that haproxy's
/// `mode tcp` does not make (`bench/RESULTS.md`, "The port proxy's system
/// calls per short connection").
async fn connect_now(addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking(),
        Some(socket2::Protocol::TCP),
    )?;
    // Before the connect, so that no data of the connection waits for it.
    socket.set_tcp_nodelay(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    let ready = stream
        .ready(tokio::io::Interest::WRITABLE | tokio::io::Interest::ERROR)
        .await?;
    if ready.is_error() || ready.is_write_closed() {
        let refused = || io::Error::new(io::ErrorKind::ConnectionRefused, "connect failed");
        return Err(stream.take_error()?.unwrap_or_else(refused));
    }
    Ok(stream)
}

/// Relays, then counts how it ended. On an error the other socket is closed with a
/// reset, so a failure on one side reaches the other as a failure, not as a clean EOF.
pub async fn relay_and_count(
    shared: &Shared,
    mode: Mode,
    client: &mut TcpStream,
    target: &mut TcpStream,
    guard_first_chunk: bool,
) {
    let m = shared.metrics.mode(mode);
    let r = relay::relay(
        client,
        target,
        relay::Options {
            idle: shared.limits.idle_timeout,
            counters: Some(&m.bytes),
            refuse_first: guard_first_chunk.then_some(starts_with_proxy_header),
        },
    )
    .await;
    match r {
        Ok(t) => tracing::debug!(mode = mode.as_str(), up = t.up, down = t.down, "relay done"),
        Err(RelayError::Idle) => m.idle_timeouts.inc(),
        Err(e) => {
            // The side that failed is already broken; the other learns of it by a
            // reset, not by a clean EOF.
            match &e {
                RelayError::Refused => {
                    shared
                        .metrics
                        .proxy_protocol_rejects
                        .with_label_values(&["untrusted"])
                        .inc();
                    reset(client);
                    reset(target);
                }
                RelayError::A(_) => {
                    m.client_errors.inc();
                    reset(target);
                }
                RelayError::B(_) => {
                    m.target_errors.inc();
                    reset(client);
                }
                RelayError::Idle => {}
            }
            tracing::debug!(mode = mode.as_str(), error = %e, "relay ended with an error");
        }
    }
}

/// The guard on an untrusted client's first bytes: a PROXY header (whole or cut
/// short) there would spoof the address the target is told.
fn starts_with_proxy_header(first: &[u8]) -> bool {
    !matches!(
        header::inspect(first),
        Inspect::NotHeader | Inspect::Incomplete
    )
}

/// Makes the coming close a reset (zero linger).
pub fn reset(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

/// Binds a listener the way every mode wants it: SO_REUSEADDR (a restart must not wait
/// for TIME_WAIT), non-blocking, a backlog of 1024.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    TcpListener::from_std(s.into())
}

/// Raises the open-files soft limit to the hard limit (tens of thousands of listeners
/// need it); returns the limit now in force (0 if it cannot be read).
pub fn raise_nofile_limit() -> u64 {
    nofile::raise().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::starts_with_proxy_header;

    #[test]
    fn the_guard_refuses_both_header_versions_and_nothing_else() {
        for (first, refused) in [
            (&b"PROXY TCP4 1.1.1.1 2.2.2.2 1 2\r\nhello"[..], true),
            (
                &b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\x01\x01\x01\x01\x02\x02\x02\x02\x00\x01\x00\x02"[..],
                true,
            ),
            (&b"GET / HTTP/1.1\r\n\r\n"[..], false),
            (&b"hello"[..], false),
        ] {
            assert_eq!(starts_with_proxy_header(first), refused, "{first:?}");
        }
    }
}
