//! The client-facing TLS configuration and the handshake, with its metrics.
//!
//! TLS 1.2 and 1.3 only (aws-lc-rs provider), ALPN `h2` then `http/1.1`. The
//! certificate comes from [`SniResolver`](crate::tls::store::SniResolver) on every
//! handshake, so certificate changes apply to the next handshake and never touch
//! open connections.
//!
//! The server picks the cipher suite, from its own order ([`server_order`]), not the
//! client's: a client listing a weaker suite first does not get it (testssl.sh's
//! "no cipher order" finding), and the order follows this host's hardware, as
//! rustls recommends: AES-GCM first (AES-128 before AES-256) where the CPU has AES
//! instructions, ChaCha20 first where it has not (there it is the faster and the
//! constant-time one).

use rustls::server::danger::ClientCertVerifier;
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
#[derive(Clone)]
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
    /// The configuration of each name's own client-certificate policy
    /// (`tls.client_certificates_by_name`; policy `i` at `i - 1`).
    by_policy: Vec<Arc<ServerConfig>>,
    /// Which policy each name gets.
    pub policies: Arc<crate::tls::client_auth::Policies>,
    certs: Arc<ArcSwap<Certs>>,
    /// Clients are asked for certificates (`tls.client_certificates`).
    pub client_auth: bool,
}

/// What every TLS listener's handshake does beside the certificate: how
/// sessions resume, and whether clients present certificates
/// (`tls.client_certificates`, see [`crate::tls::client_auth`]).
#[derive(Clone)]
pub struct Handshakes {
    pub resumption: Resumption,
    pub client_auth: Option<Arc<dyn ClientCertVerifier>>,
    /// The verifiers of `tls.client_certificates_by_name`, in policy order,
    /// and which name gets which.
    pub by_name: ByName,
    /// The OCSP staples served with the certificates (`tls.ocsp`).
    pub staples: Arc<crate::tls::ocsp::Staples>,
}

/// The verifiers of `tls.client_certificates_by_name`, in policy order, and
/// which name gets which.
pub type ByName = (
    Vec<Arc<dyn ClientCertVerifier>>,
    Arc<crate::tls::client_auth::Policies>,
);

pub fn acceptor(
    certs: Arc<ArcSwap<Certs>>,
    provider: Arc<CryptoProvider>,
    handshakes: Handshakes,
) -> Result<Acceptor, rustls::Error> {
    // The versions the profile's suites speak (`tls.profile`).
    let versions = crate::tls::profile::versions(&provider);
    let client_auth = handshakes.client_auth.is_some();
    let (verifiers, policies) = handshakes.by_name.clone();
    let tcp = |handshakes: Handshakes| {
        let mut config = server_config(&certs, provider.clone(), handshakes, &versions)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok::<_, rustls::Error>(Arc::new(config))
    };
    let by_policy = verifiers
        .into_iter()
        .map(|v| {
            tcp(Handshakes {
                client_auth: Some(v),
                ..handshakes.clone()
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Acceptor {
        config: tcp(handshakes)?,
        by_policy,
        policies,
        certs,
        client_auth,
    })
}

/// The TLS side of the HTTP/3 listener: the same certificates (the same live
/// store, so certificates added and removed apply to QUIC handshakes too), the
/// same suite order and resumption as TCP; TLS 1.3 only (QUIC has no other), ALPN
/// `h3`, and no 0-RTT (`max_early_data_size` 0: early data can be replayed).
pub fn quic_config(
    certs: &Arc<ArcSwap<Certs>>,
    provider: Arc<CryptoProvider>,
    handshakes: Handshakes,
) -> Result<ServerConfig, rustls::Error> {
    let mut config = server_config(certs, provider, handshakes, &[&rustls::version::TLS13])?;
    config.alpn_protocols = vec![b"h3".to_vec()];
    config.max_early_data_size = 0;
    Ok(config)
}

/// What the TCP and QUIC configurations share: the SNI resolver, the server's
/// suite order and how sessions resume.
fn server_config(
    certs: &Arc<ArcSwap<Certs>>,
    provider: Arc<CryptoProvider>,
    Handshakes {
        resumption,
        client_auth,
        staples,
        by_name: _,
    }: Handshakes,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Result<ServerConfig, rustls::Error> {
    let resolver = Arc::new(SniResolver {
        live: certs.clone(),
        staples,
    });
    let provider = Arc::new(CryptoProvider {
        cipher_suites: server_order(&provider.cipher_suites, aes_in_hardware()),
        ..(*provider).clone()
    });
    let builder = ServerConfig::builder_with_provider(provider).with_protocol_versions(versions)?;
    let builder = match client_auth {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.ignore_client_order = true;
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
    Ok(config)
}

/// The suites in the order the server prefers them, within each TLS version (1.3
/// before 1.2): AES-128-GCM, AES-256-GCM, then ChaCha20-Poly1305 on a CPU with AES
/// instructions; ChaCha20-Poly1305 first on one without (there it is the faster
/// and the constant-time one). AES-128 comes first (Mozilla's "intermediate"
/// order, and what browsers offer first): in TLS 1.3 its suite also selects
/// SHA-256 for the handshake's key schedule and transcript, which CPUs hash in
/// hardware, where AES-256's SHA-384 runs in software: SHA-512 blocks were 13 % of
/// the router's CPU in full handshakes before (`bench/RESULTS.md`, "Full TLS
/// handshakes: AES-128 first").
pub fn server_order(
    suites: &[rustls::SupportedCipherSuite],
    aes: bool,
) -> Vec<rustls::SupportedCipherSuite> {
    let mut ordered = suites.to_vec();
    // Stable: suites the key names alike keep the provider's order.
    ordered.sort_by_key(|s| {
        let tls12 = matches!(s, rustls::SupportedCipherSuite::Tls12(_));
        let name = format!("{:?}", s.suite());
        let rank = match (name.contains("CHACHA20"), name.contains("AES_128"), aes) {
            (true, _, false) => 0,
            (false, true, _) => 1,
            (false, false, _) => 2,
            (true, _, true) => 3,
        };
        (tls12, rank)
    });
    ordered
}

/// Whether this CPU encrypts AES in hardware (AES-NI and carry-less multiply on
/// x86, the crypto extension on ARM).
fn aes_in_hardware() -> bool {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

impl Acceptor {
    /// The certificate a connection made with this SNI name presented.
    pub fn served(&self, sni: &str) -> Served {
        self.certs.load().served_for(sni)
    }

    /// The configuration of a handshake under client-certificate `policy`.
    fn config_for(&self, policy: u16) -> &Arc<ServerConfig> {
        usize::from(policy)
            .checked_sub(1)
            .and_then(|i| self.by_policy.get(i))
            .unwrap_or(&self.config)
    }

    /// Whether clients of a handshake under `policy` are asked for a certificate.
    pub fn asks_certificate(&self, policy: u16) -> bool {
        policy != 0 || self.client_auth
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
        let (covered, challenge, policy) = {
            let hello = start.client_hello();
            let name = hello.server_name().map(str::to_ascii_lowercase);
            let policy = acceptor.policies.of(name.as_deref());
            let certs = acceptor.certs.load();
            let acme = hello
                .alpn()
                .is_some_and(|mut a| a.any(|p| p == acme::ACME_TLS_ALPN));
            let challenge = name
                .as_deref()
                .filter(|_| acme)
                .and_then(|n| certs.alpn_challenge(n));
            (certs.for_name(name.as_deref()).is_some(), challenge, policy)
        };
        let config = match challenge {
            Some(key) => alpn_challenge_config(key, &acceptor.config)
                .map_err(|e| Failure::Handshake((true, std::io::Error::other(e))))?,
            None => acceptor.config_for(policy).clone(),
        };
        start
            .into_stream(config)
            .await
            .map_err(|e| (covered, e))
            .map_err(Failure::Handshake)
    };
    match tokio::time::timeout(timeout, handshake).await {
        // An ACME CA's TLS-ALPN-01 validation: the handshake was the answer.
        Ok(Ok(tls)) if tls.get_ref().1.alpn_protocol() == Some(acme::ACME_TLS_ALPN) => {
            tracing::debug!("TLS-ALPN-01 validation handshake answered");
            None
        }
        Ok(Ok(tls)) => {
            let conn = tls.get_ref().1;
            let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
            let group = conn.negotiated_key_exchange_group().map(|g| g.name());
            metrics.handshake(resumed, super::groups::label(group));
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

/// The configuration of a TLS-ALPN-01 validation handshake (RFC 8737): the
/// challenge's certificate, ALPN `acme-tls/1` only.
fn alpn_challenge_config(
    key: Arc<rustls::sign::CertifiedKey>,
    base: &ServerConfig,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let mut config = ServerConfig::builder_with_provider(base.crypto_provider().clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(key)));
    config.alpn_protocols = vec![acme::ACME_TLS_ALPN.to_vec()];
    Ok(Arc::new(config))
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

#[cfg(test)]
mod tests {
    use super::server_order;

    fn names(suites: &[rustls::SupportedCipherSuite]) -> Vec<String> {
        suites.iter().map(|s| format!("{:?}", s.suite())).collect()
    }

    #[test]
    fn aes_128_first_with_aes_chacha_first_without_within_each_version() {
        let all = rustls::crypto::aws_lc_rs::default_provider().cipher_suites;
        for aes in [true, false] {
            let order = names(&server_order(&all, aes));
            assert_eq!(order.len(), all.len());
            let first12 = order
                .iter()
                .position(|n| n.starts_with("TLS_ECDHE"))
                .expect("TLS 1.2 suites");
            assert!(order[..first12].iter().all(|n| n.starts_with("TLS13")));
            let (tls13, tls12) = order.split_at(first12);
            if aes {
                assert_eq!(tls13[0], "TLS13_AES_128_GCM_SHA256", "{order:?}");
                assert!(tls12[0].contains("AES_128_GCM"), "{order:?}");
                assert!(tls13.last().is_some_and(|n| n.contains("CHACHA20")));
            } else {
                assert_eq!(tls13[0], "TLS13_CHACHA20_POLY1305_SHA256", "{order:?}");
                assert!(tls12[0].contains("CHACHA20"), "{order:?}");
                assert!(tls13[1].contains("AES_128"), "{order:?}");
            }
        }
    }
}
