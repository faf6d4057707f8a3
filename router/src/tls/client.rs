//! TLS towards members whose endpoints speak `https`/`wss`/`tls` (`ssl_to_gear`: the
//! gear's haproxy is in TCP mode and expects TLS).
//!
//! The member's certificate is verified against `upstream.tls.ca_file` (default: the
//! system bundle, `/etc/ssl/certs/ca-certificates.crt`) for the name the client asked
//! for, which is also the SNI sent. `upstream.tls.verify: false` turns the
//! certificate check off (the handshake signatures are still checked, so the
//! connection is encrypted, but not authenticated): an explicit choice for gears
//! with self-signed certificates, logged as a warning at start.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    #[error("{path}: {source}")]
    CaPem {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path}: {source}")]
    CaCertificate {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("{path}: no certificate in the file")]
    CaEmpty { path: PathBuf },
    #[error("TLS client configuration: {0}")]
    Rustls(#[from] rustls::Error),
}

/// The connector for TLS members.
pub fn connector(
    ca_file: Option<&Path>,
    verify: bool,
    provider: Arc<CryptoProvider>,
) -> Result<TlsConnector, ClientTlsError> {
    let versions = crate::tls::profile::versions(&provider);
    let builder =
        ClientConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let mut config = if verify {
        let mut roots = RootCertStore::empty();
        let path = ca_file.unwrap_or(Path::new(SYSTEM_BUNDLE));
        let pem = |source| ClientTlsError::CaPem {
            path: path.to_path_buf(),
            source,
        };
        match CertificateDer::pem_file_iter(path) {
            Ok(certs) => {
                for cert in certs {
                    let cert = cert.map_err(pem)?;
                    roots
                        .add(cert)
                        .map_err(|source| ClientTlsError::CaCertificate {
                            path: path.to_path_buf(),
                            source,
                        })?;
                }
            }
            // No system bundle and none configured: every member check fails (502),
            // which the logs and metrics then say.
            Err(e) if ca_file.is_none() => {
                tracing::warn!(file = SYSTEM_BUNDLE, error = %e, "no CA bundle for TLS members");
            }
            Err(e) => return Err(pem(e)),
        }
        if ca_file.is_some() && roots.is_empty() {
            return Err(ClientTlsError::CaEmpty {
                path: path.to_path_buf(),
            });
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        tracing::warn!("upstream.tls.verify is false: TLS members' certificates are not checked");
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoCertificateCheck(provider)))
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(config)))
}

/// Accepts any certificate but still checks that the member signed the handshake
/// with the key of the certificate it sent.
#[derive(Debug)]
struct NoCertificateCheck(Arc<CryptoProvider>);

impl ServerCertVerifier for NoCertificateCheck {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
