//! The one accept loop of both binaries: every listener (the router's HTTP, HTTPS,
//! `tcp.listen`, HTTP/3 and admin listeners, the portproxy's gear, cluster and
//! peer ports, its metrics port and gear admin socket through [`Capped`]) runs
//! [`run`], and says through [`Listener`] only what differs. One socket does not:
//! the router's upgrade socket (`router::upgrade`) takes one successor at a time
//! and reads its hello inline, so there is no slot to cap; its failed accepts
//! follow the same rule (`nofile::after_accept_error`).
//!
//! Each client goes through the same steps, in this order:
//!
//! 1. **accept**: a failed `accept(2)` is counted in the listener's one error
//!    metric and followed by the rule of both binaries
//!    (`nofile::after_accept_error`: a client's own error is passed over, running
//!    out of descriptors or memory pauses the listener 100 ms);
//! 2. **gate**: the listener's gate (a reload's settings taken, the client key's
//!    per-source cap); a client turned away there is counted and closed by it;
//! 3. **slot**: one of the listener's connection slots. At the cap the listener
//!    says what happens ([`Listener::full`]): it may make room (evict the quietest
//!    connection) and let the client wait for a slot, or turn it away at once;
//! 4. **serve**: the client, what its gate gave it and its slot are handed over (spawned);
//!    the slot goes back when the connection's guard is dropped.
//!
//! Stopping ([`run`]'s `stop`) ends the loop at any step; connections already
//! served are not touched (their listener drains them).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Where a listener's clients come from: a TCP socket (the one implementation
/// below serves every TCP listener of both binaries), the router's per-worker
/// listeners, a QUIC endpoint.
pub trait Source {
    /// An accepted client, not yet passed (a TCP stream, a QUIC handshake).
    type Client;

    /// The next client; `Ok(None)`: the source is closed for good.
    fn next(&mut self) -> impl Future<Output = io::Result<Option<(Self::Client, SocketAddr)>>>;
}

impl Source for tokio::net::TcpListener {
    type Client = tokio::net::TcpStream;

    async fn next(&mut self) -> io::Result<Option<(Self::Client, SocketAddr)>> {
        self.accept().await.map(Some)
    }
}

/// A listener's client: what its [`Source`] accepts.
pub type Client<L> = <<L as Listener>::Source as Source>::Client;

/// What one kind of listener does at each step of [`run`].
pub trait Listener {
    /// Where its clients come from.
    type Source: Source;
    /// What the gate gave the client (its source slot, the settings live then).
    type Passed;

    /// Its source, for the next client.
    fn source(&mut self) -> &mut Self::Source;

    /// The gate: the client with what lets it pass, or `None` when it was turned away
    /// (the listener counted and closed it).
    fn gate(
        &mut self,
        client: Client<Self>,
        peer: SocketAddr,
    ) -> Option<(Client<Self>, Self::Passed)>;

    /// The listener's connection slots (the same set each time; a reload may
    /// resize it).
    fn slots(&self) -> Arc<Semaphore>;

    /// Every slot is taken and `client` is passed: make room if the listener
    /// does, then `Some(client)` to wait for a slot, or `None` when it turned the
    /// client away (counted and closed).
    fn full(&mut self, client: Client<Self>, passed: &Self::Passed) -> Option<Client<Self>>;

    /// Serves an passed client holding `slot` (in a task of its own).
    fn serve(
        &mut self,
        client: Client<Self>,
        peer: SocketAddr,
        passed: Self::Passed,
        slot: OwnedSemaphorePermit,
    );
}

/// Accepts on `listener` until `stop` resolves or the listener closes (see the
/// module doc); `errors` counts failed accepts, `name` is the listener's in logs.
pub async fn run<L: Listener>(
    listener: &mut L,
    name: &str,
    errors: &prometheus::IntCounter,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    loop {
        let accepted = tokio::select! {
            r = listener.source().next() => r,
            () = &mut stop => return,
        };
        let (client, peer) = match accepted {
            Ok(Some(c)) => c,
            Ok(None) => return,
            Err(e) => {
                errors.inc();
                nofile::after_accept_error(name, &e).await;
                continue;
            }
        };
        let Some((client, passed)) = listener.gate(client, peer) else {
            continue;
        };
        let slots = listener.slots();
        let (client, slot) = match slots.clone().try_acquire_owned() {
            Ok(slot) => (client, slot),
            Err(TryAcquireError::Closed) => return,
            Err(TryAcquireError::NoPermits) => {
                let Some(client) = listener.full(client, &passed) else {
                    continue;
                };
                tokio::select! {
                    s = slots.acquire_owned() => match s {
                        Ok(slot) => (client, slot),
                        Err(_) => return,
                    },
                    () = &mut stop => return,
                }
            }
        };
        listener.serve(client, peer, passed, slot);
    }
}

/// A listener with no gate: each client takes one of a fixed number of
/// slots, or is turned away (closed) when all are taken, and is served in a task
/// of its own. For the small listeners that serve operators, not clients (the
/// portproxy's metrics port and its gear admin socket): a scraper or a script
/// that opens connections in a loop meets the same accept back-off and a cap,
/// instead of a task per connection without end.
pub struct Capped<S, F> {
    source: S,
    slots: Arc<Semaphore>,
    serve: F,
}

impl<S, F> Capped<S, F>
where
    S: Source,
    F: FnMut(S::Client, SocketAddr, OwnedSemaphorePermit),
{
    /// `serve` gets the client and its slot (it spawns; the slot goes back when
    /// the task drops it); at most `cap` are served at once.
    pub fn new(source: S, cap: usize, serve: F) -> Self {
        Capped {
            source,
            slots: Arc::new(Semaphore::new(cap)),
            serve,
        }
    }
}

impl<S, F> Listener for Capped<S, F>
where
    S: Source,
    F: FnMut(S::Client, SocketAddr, OwnedSemaphorePermit),
{
    type Source = S;
    type Passed = ();

    fn source(&mut self) -> &mut S {
        &mut self.source
    }

    fn gate(&mut self, client: S::Client, _: SocketAddr) -> Option<(S::Client, ())> {
        Some((client, ()))
    }

    fn slots(&self) -> Arc<Semaphore> {
        self.slots.clone()
    }

    fn full(&mut self, _client: S::Client, _: &()) -> Option<S::Client> {
        // Dropped: closed at once, never queued.
        None
    }

    fn serve(&mut self, client: S::Client, peer: SocketAddr, (): (), slot: OwnedSemaphorePermit) {
        (self.serve)(client, peer, slot);
    }
}

/// A Unix socket's clients: they have no network address (the peer given is
/// `0.0.0.0:0`); who may connect is the socket file's permissions.
impl Source for tokio::net::UnixListener {
    type Client = tokio::net::UnixStream;

    async fn next(&mut self) -> io::Result<Option<(Self::Client, SocketAddr)>> {
        let (stream, _) = self.accept().await?;
        Ok(Some((stream, SocketAddr::from(([0, 0, 0, 0], 0)))))
    }
}

#[cfg(test)]
mod tests;
