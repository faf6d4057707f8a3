//! The client-facing TLS configuration and the handshake, with its metrics.
//!
//! TLS 1.2 and 1.3 only (aws-lc-rs provider), ALPN `h2` then `http/1.1`. The
//! certificate comes from [`SniResolver`](crate::tls::store::SniResolver) on every
//! handshake, so certificate changes apply to the next handshake and never touch
//! open connections.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::server::{NoServerSessionStorage, ProducesTickets};
use tokio_rustls::LazyConfigAcceptor;
use tokio_rustls::server::TlsStream;

use crate::metrics::TlsMetrics;
use crate::tls::rewind::Rewind;
use crate::tls::store::{Certs, Served, SniResolver};

/// How sessions resume.
pub enum Resumption {
    /// Tickets sealed with keys from the pair's shared secret file.
    Shared(Arc<dyn ProducesTickets>),
    /// rustls's in-memory session cache: resumption on this router only.
    Local,
    /// Every handshake is a full one (benchmarks).
    Off,
}

/// The server side of TLS: the configuration, and the certificates it serves (to
/// tell a client asking for a name we have no certificate for from other failures).
#[derive(Clone)]
pub struct Acceptor {
    config: Arc<ServerConfig>,
    certs: Arc<ArcSwap<Certs>>,
}

pub fn acceptor(
    certs: Arc<ArcSwap<Certs>>,
    provider: Arc<CryptoProvider>,
    resumption: Resumption,
) -> Result<Acceptor, rustls::Error> {
    let resolver = Arc::new(SniResolver {
        live: certs.clone(),
    });
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
    Ok(Acceptor {
        config: Arc::new(config),
        certs,
    })
}

impl Acceptor {
    /// The certificate a connection made with this SNI name presented.
    pub fn served(&self, sni: &str) -> Served {
        self.certs.load().served_for(sni)
    }
}

/// Runs the handshake within `timeout`; counts it either way.
///
/// The ClientHello is read first ([`LazyConfigAcceptor`]), so a name we hold no
/// certificate for (and no default) is counted as `no_certificate` from the name
/// itself; the handshake then goes on so that the client gets its alert.
pub async fn handshake(
    acceptor: &Acceptor,
    stream: Rewind,
    timeout: Duration,
    metrics: &TlsMetrics,
) -> Option<TlsStream<Rewind>> {
    let handshake = async {
        let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), stream).await?;
        let covered = {
            let hello = start.client_hello();
            let name = hello.server_name().map(str::to_ascii_lowercase);
            acceptor.certs.load().for_name(name.as_deref()).is_some()
        };
        start
            .into_stream(acceptor.config.clone())
            .await
            .map_err(|e| (covered, e))
            .map_err(Failure::Handshake)
    };
    match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(tls)) => {
            let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            metrics.handshake(resumed);
            Some(tls)
        }
        Ok(Err(failure)) => {
            let (reason, e) = match failure {
                Failure::Handshake((false, e)) => ("no_certificate", e),
                Failure::Handshake((true, e)) | Failure::Hello(e) => (failure_reason(&e), e),
            };
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

/// Where a handshake failed: reading the ClientHello, or after it (and whether we
/// had a certificate for the name it asked for).
enum Failure {
    Hello(std::io::Error),
    Handshake((bool, std::io::Error)),
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::Hello(e)
    }
}

/// The `reason` label of `router_tls_handshake_failures_total`.
fn failure_reason(e: &std::io::Error) -> &'static str {
    use rustls::Error as E;
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
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
