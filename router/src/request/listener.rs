//! What every listener shares (the HTTP and HTTPS listeners of [`super::accept`],
//! the `tcp.listen` ports, the admin listener): binding, the live settings a reload
//! swaps, resizable connection slots, and the stop signal.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::Proxy;
use super::limits::Limits;

/// Binds a listening socket with a deep backlog and `SO_REUSEADDR`.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

/// What the listeners read for each new connection (the limits, the TLS handshake
/// deadline) and each request (the proxy and its timeouts). A reload swaps it whole:
/// requests after the swap, on old connections too, get the new proxy settings;
/// connection-level limits apply to connections accepted after it.
pub struct Serving {
    pub proxy: Arc<Proxy>,
    pub limits: Limits,
    pub handshake_timeout: Duration,
}

/// The one swappable [`Serving`], shared by every listener and the reloader.
pub type Live = Arc<arc_swap::ArcSwap<Serving>>;

/// A listener's connection slots, resizable when a reload changes
/// `limits.max_connections`: growing adds permits at once; shrinking takes permits
/// as connections end, never closing one.
pub(crate) struct Slots {
    pub(crate) sem: Arc<Semaphore>,
    max: usize,
}

impl Slots {
    pub(crate) fn new(max: usize) -> Slots {
        Slots {
            sem: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    pub(crate) fn resize(&mut self, max: usize) {
        if max > self.max {
            self.sem.add_permits(max - self.max);
        } else if max < self.max {
            let (sem, fewer) = (self.sem.clone(), self.max - max);
            tokio::spawn(async move {
                if let Ok(p) = sem
                    .acquire_many_owned(u32::try_from(fewer).unwrap_or(u32::MAX))
                    .await
                {
                    p.forget();
                }
            });
        }
        self.max = max;
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// Resolves once `stop` is true (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
