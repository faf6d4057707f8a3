//! The client-facing TLS configuration and the handshake, with its metrics.
//!
//! TLS 1.2 and 1.3 only (aws-lc-rs provider), ALPN `h2` then `http/1.1`. The
//! certificate comes from [`SniResolver`](crate::tls::store::SniResolver) on every
//! handshake, so certificate changes apply to the next handshake and never touch
//! open connections.

use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, ProducesTickets, ResolvesServerCert};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::metrics::TlsMetrics;

/// How sessions resume.
pub enum Resumption {
    /// Tickets sealed with keys from the pair's shared secret file.
    Shared(Arc<dyn ProducesTickets>),
    /// rustls's in-memory session cache: resumption on this router only.
    Local,
    /// Every handshake is a full one (benchmarks).
    Off,
}

pub fn acceptor(
    resolver: Arc<dyn ResolvesServerCert>,
    provider: Arc<CryptoProvider>,
    resumption: Resumption,
) -> Result<TlsAcceptor, rustls::Error> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    match resumption {
        Resumption::Shared(t) => {
            config.ticketer = t;
            // Tickets carry the state: no per-router cache is needed.
            config.session_storage = Arc::new(NoServerSessionStorage {});
        }
        Resumption::Local => {}
        Resumption::Off => {
            config.session_storage = Arc::new(NoServerSessionStorage {});
            config.send_tls13_tickets = 0;
        }
    }
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Runs the handshake within `timeout`; counts it either way.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
    metrics: &TlsMetrics,
) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            metrics.handshake(resumed);
            Some(tls)
        }
        Ok(Err(e)) => {
            let reason = failure_reason(&e);
            metrics.handshake_failed(reason);
            tracing::debug!(reason, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            metrics.handshake_failed("timeout");
            None
        }
    }
}

/// The `reason` label of `router_tls_handshake_failures_total`.
fn failure_reason(e: &std::io::Error) -> &'static str {
    use rustls::Error as E;
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(E::General(m)) if m.contains("certificate") => "no_certificate",
        Some(E::PeerIncompatible(_)) => "incompatible",
        Some(E::AlertReceived(_)) => "alert_received",
        Some(E::InvalidMessage(_) | E::InappropriateMessage { .. })
        | Some(E::InappropriateHandshakeMessage { .. }) => "protocol",
        Some(E::NoApplicationProtocol) => "no_alpn",
        Some(_) => "other",
        None => match e.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                "client_closed"
            }
            // A plain HTTP request on the TLS port.
            std::io::ErrorKind::InvalidData => "protocol",
            _ => "other",
        },
    }
}
