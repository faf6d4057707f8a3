//! The HTTP/3 listener's accepting side: what a QUIC connection must pass before
//! it is served (see the bounds in [`super`]).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::request::connection::activity::ConnectionSlot;
use crate::request::connection::listener::{Gate, Live, Slots, stopped};

/// The bound UDP socket and what the endpoint is made of; served by [`listen`].
pub struct Bound {
    pub socket: UdpSocket,
    pub endpoint: quinn::EndpointConfig,
    pub server: quinn::ServerConfig,
    pub retry_above: usize,
}

/// Binds the UDP socket of `listen.http3` (IPv6 wildcard: both families).
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<UdpSocket> {
    let domain = socket2::Domain::for_address(addr);
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(false)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Accepts QUIC connections until `stop`, then lets them finish for `grace`.
pub async fn listen(
    bound: Bound,
    live: Live,
    (mut stop, drainer): (
        watch::Receiver<bool>,
        crate::request::connection::drain::Drainer,
    ),
    grace: Duration,
) {
    let local_port = bound.socket.local_addr().map(|a| a.port()).unwrap_or(0);
    let runtime = Arc::new(quinn::TokioRuntime);
    let endpoint =
        match quinn::Endpoint::new(bound.endpoint, Some(bound.server), bound.socket, runtime) {
            Ok(e) => e,
            Err(e) => {
                tracing::error!(error = %e, "HTTP/3 listener: cannot start the QUIC endpoint");
                return;
            }
        };
    let gate = Gate::new(&live);
    let metrics = gate.current.proxy.metrics.clone();
    let result = |r: &str| metrics.http3.with_label_values(&[r]);
    let (kill_tx, kill) = watch::channel(false);
    let mut quic = QuicListener {
        endpoint: endpoint.clone(),
        gate,
        live,
        handshakes: Arc::new(AtomicUsize::new(0)),
        retry_above: bound.retry_above,
        local_port,
        ok: result("ok"),
        refused: result("refused"),
        retried: result("retry"),
        failed: result("failed"),
        open: metrics.open_connections.with_label_values(&["h3"]),
        accepted: metrics.connections.with_label_values(&["h3"]),
        source_refused: metrics.refused.with_label_values(&["h3", "source_limit"]),
        epochs: drainer.epochs(stop.clone()),
        kill,
    };
    // quinn reports no accept errors (a bad packet is its own business).
    let errors = metrics.accept_errors.with_label_values(&["h3"]);
    accept::run(&mut quic, "h3", &errors, stopped(&mut stop)).await;
    let (gate, refused) = (quic.gate, quic.refused);
    // Draining. After an upgrade the successor reads the same socket: a new
    // connection's first packet that this process reads is refused at once
    // (CONNECTION_REFUSED), so that the client tries again (and reaches the
    // successor, or is refused again a round trip later) instead of waiting a
    // retransmission timeout for an answer that never comes.
    let refusing = async {
        while let Some(incoming) = endpoint.accept().await {
            refused.inc();
            incoming.refuse();
        }
    };
    tokio::select! {
        () = drain(&endpoint, &gate.slots, grace, kill_tx) => {}
        () = refusing => {}
    }
}

/// The HTTP/3 listener's steps of the one accept loop (`accept::run`): an address
/// not validated yet proves it first under load (Retry), and a full listener
/// refuses at once: there is no backlog to wait in, and the client falls back to
/// TCP, which has one.
struct QuicListener {
    endpoint: quinn::Endpoint,
    gate: Gate,
    live: Live,
    /// QUIC handshakes under way.
    handshakes: Arc<AtomicUsize>,
    retry_above: usize,
    local_port: u16,
    ok: prometheus::IntCounter,
    refused: prometheus::IntCounter,
    retried: prometheus::IntCounter,
    failed: prometheus::IntCounter,
    open: prometheus::IntGauge,
    accepted: prometheus::IntCounter,
    source_refused: prometheus::IntCounter,
    /// What each connection watches to drain: the stop, or a drain request.
    epochs: crate::request::connection::drain::Epochs,
    kill: watch::Receiver<bool>,
}

impl accept::Source for QuicListener {
    type Client = quinn::Incoming;

    async fn next(&mut self) -> std::io::Result<Option<(quinn::Incoming, SocketAddr)>> {
        Ok(self.endpoint.accept().await.map(|i| {
            let peer = i.remote_address();
            (i, peer)
        }))
    }
}

impl accept::Listener for QuicListener {
    type Source = Self;
    type Passed = per_source::SourceSlot;

    fn source(&mut self) -> &mut Self {
        self
    }

    fn gate(
        &mut self,
        incoming: quinn::Incoming,
        peer: SocketAddr,
    ) -> Option<(quinn::Incoming, Self::Passed)> {
        self.gate.refresh(&self.live);
        // Under load, an address not validated yet proves it first (Retry).
        if !incoming.remote_address_validated()
            && self.handshakes.load(Ordering::Relaxed) >= self.retry_above
            && incoming.may_retry()
        {
            self.retried.inc();
            let _ = incoming.retry();
            return None;
        }
        let Some(source) = self.gate.pass(peer.ip()) else {
            self.source_refused.inc();
            self.refused.inc();
            incoming.refuse();
            return None;
        };
        Some((incoming, source))
    }

    fn slots(&self) -> Arc<tokio::sync::Semaphore> {
        self.gate.slots.sem.clone()
    }

    fn full(&mut self, incoming: quinn::Incoming, _: &Self::Passed) -> Option<quinn::Incoming> {
        self.refused.inc();
        incoming.refuse();
        None
    }

    fn serve(
        &mut self,
        incoming: quinn::Incoming,
        peer: SocketAddr,
        source: Self::Passed,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let local = incoming
            .local_ip()
            .map(|ip| SocketAddr::new(ip, self.local_port));
        let connecting = match incoming.accept() {
            Ok(c) => c,
            Err(e) => {
                self.failed.inc();
                tracing::debug!(client = %peer, error = %e, "QUIC handshake refused");
                return;
            }
        };
        self.accepted.inc();
        let place = ConnectionSlot::new(slot, source, self.open.clone());
        let handshaking = super::connection::Handshaking::begin(&self.handshakes);
        let connection = super::connection::QuicConnection {
            serving: self.gate.current.clone(),
            place,
            local_port: self.local_port,
            stop: self.epochs.for_connection(),
            kill: self.kill.clone(),
            ok: self.ok.clone(),
        };
        tokio::spawn(connection.run(connecting, peer, local, handshaking));
    }
}

/// Waits up to `grace` for the connections to end (each holds a slot), then
/// closes what is left and waits for the endpoint to send its last packets.
async fn drain(
    endpoint: &quinn::Endpoint,
    slots: &Slots,
    grace: Duration,
    kill: watch::Sender<bool>,
) {
    tracing::info!(listener = "h3", grace = ?grace, "stopped accepting; draining connections");
    let all = u32::try_from(slots.max()).unwrap_or(u32::MAX);
    if tokio::time::timeout(grace, slots.sem.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            listener = "h3",
            "grace period over; closing the remaining connections"
        );
        let _ = kill.send(true);
    }
    endpoint.close(quinn::VarInt::from_u32(0x100), b"shutting down");
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
}
