//! What every listener shares (the HTTP and HTTPS listeners of [`super::serve`],
//! the `tcp.listen` ports, the HTTP/3 listener, the admin listener): binding, the
//! live settings a reload swaps, the gate a new client passes (resizable
//! connection slots and the per-source cap, kept to the live limits), and the stop
//! signal. The accept loop itself is the `accept` crate's, shared with the
//! portproxy.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::limits::Limits;
use crate::request::Proxy;

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

/// What a new client passes on a listener: a connection slot and its source's
/// place, by the limits live when it arrives (a reload applies to connections
/// accepted after it, never closing one).
pub(crate) struct Gate {
    pub(crate) slots: Slots,
    pub(crate) sources: Arc<per_source::PerSource>,
    /// The settings live at the last [`Gate::refresh`].
    pub(crate) current: Arc<Serving>,
}

impl Gate {
    pub(crate) fn new(live: &Live) -> Gate {
        let current = live.load_full();
        Gate {
            slots: Slots::new(current.limits.max_connections),
            sources: per_source::PerSource::new(current.limits.per_source()),
            current,
        }
    }

    /// Takes a reload's limits; true if there was one (the caller renews what it
    /// derives from them).
    pub(crate) fn refresh(&mut self, live: &Live) -> bool {
        let latest = live.load_full();
        if Arc::ptr_eq(&latest, &self.current) {
            return false;
        }
        self.slots.resize(latest.limits.max_connections);
        self.sources.set_cap(latest.limits.per_source());
        self.current = latest;
        true
    }

    /// `ip`'s place among its client key's connections, `None` at
    /// `limits.max_connections_per_source`.
    pub(crate) fn pass(&self, ip: IpAddr) -> Option<per_source::SourceSlot> {
        self.sources.slot(self.current.limits.client_keys().key(ip))
    }
}

/// Resolves once `stop` is true (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
