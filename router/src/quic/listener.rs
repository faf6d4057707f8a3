//! The HTTP/3 listener's accepting side: what a QUIC connection must pass before
//! it is served (see the bounds in [`super`]).

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::request::activity::ConnectionSlot;
use crate::request::listener::{Gate, Live, Slots, stopped};

/// The bound UDP socket and what the endpoint is made of; served by [`serve`].
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
pub async fn serve(bound: Bound, live: Live, mut stop: watch::Receiver<bool>, grace: Duration) {
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
    let mut gate = Gate::new(&live);
    let handshakes = Arc::new(AtomicUsize::new(0));
    let metrics = gate.current.proxy.metrics.clone();
    let result = |r: &str| metrics.http3.with_label_values(&[r]);
    let (ok, refused, retried) = (result("ok"), result("refused"), result("retry"));
    let failed = result("failed");
    let open = metrics.open_connections.with_label_values(&["h3"]);
    let accepted = metrics.connections.with_label_values(&["h3"]);
    let source_refused = metrics.refused.with_label_values(&["h3", "source_limit"]);
    let (kill_tx, kill) = watch::channel(false);
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => match i { Some(i) => i, None => break },
            _ = stopped(&mut stop) => break,
        };
        gate.refresh(&live);
        // Under load, an address not validated yet proves it first (Retry).
        if !incoming.remote_address_validated()
            && handshakes.load(Ordering::Relaxed) >= bound.retry_above
            && incoming.may_retry()
        {
            retried.inc();
            let _ = incoming.retry();
            continue;
        }
        let Some(source) = gate.admit_source(incoming.remote_address().ip()) else {
            source_refused.inc();
            refused.inc();
            incoming.refuse();
            continue;
        };
        // No backlog to wait in: a full listener refuses (the client falls back
        // to TCP, which has one).
        let Ok(slot) = gate.slots.sem.clone().try_acquire_owned() else {
            refused.inc();
            incoming.refuse();
            continue;
        };
        let peer = incoming.remote_address();
        let local = incoming
            .local_ip()
            .map(|ip| std::net::SocketAddr::new(ip, local_port));
        let connecting = match incoming.accept() {
            Ok(c) => c,
            Err(e) => {
                failed.inc();
                tracing::debug!(client = %peer, error = %e, "QUIC handshake refused");
                continue;
            }
        };
        accepted.inc();
        let place = ConnectionSlot::new(slot, source, open.clone());
        let handshaking = super::serve::Handshaking::begin(&handshakes);
        let connection = super::serve::QuicConnection {
            serving: gate.current.clone(),
            place,
            local_port,
            stop: stop.clone(),
            kill: kill.clone(),
            ok: ok.clone(),
        };
        tokio::spawn(connection.serve(connecting, peer, local, handshaking));
    }
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
