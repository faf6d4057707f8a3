//! TLS to the broker (STOMP over TLS, e.g. ActiveMQ's `stomp+ssl` on 61614): the
//! broker is verified against a private CA bundle, and a client certificate can be
//! presented when the broker asks for one (mcollective-style `ssl.ca`, `ssl.cert`,
//! `ssl.key`). rustls with its default provider; PEM via `rustls::pki_types::pem`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

/// Where the trust anchors and the optional client identity are.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// PEM bundle of the CA(s) that sign the broker's certificate.
    pub ca_file: PathBuf,
    /// PEM certificate chain and key presented to the broker, if it asks.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The name to verify instead of the host of `host:port`.
    pub server_name: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Pem {
        path: PathBuf,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path}: {source}")]
    Certificate {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("{path}: no certificate in the file")]
    NoCertificate { path: PathBuf },
    #[error("cert_file and key_file go together")]
    HalfIdentity,
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
    #[error("{0:?} is not a valid TLS server name")]
    ServerName(String),
}

/// A ready client configuration plus the name override.
#[derive(Clone, Debug)]
pub struct TlsClient {
    pub config: Arc<ClientConfig>,
    pub server_name: Option<String>,
}

impl TlsClient {
    pub fn load(files: &TlsFiles) -> Result<TlsClient, TlsError> {
        let mut roots = RootCertStore::empty();
        for cert in certs(&files.ca_file)? {
            roots.add(cert).map_err(|source| TlsError::Certificate {
                path: files.ca_file.clone(),
                source,
            })?;
        }
        let builder = ClientConfig::builder().with_root_certificates(roots);
        let config = match (&files.cert_file, &files.key_file) {
            (Some(cert), Some(key)) => {
                let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Pem {
                    path: key.clone(),
                    source,
                })?;
                builder.with_client_auth_cert(certs(cert)?, key)?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(TlsError::HalfIdentity),
        };
        Ok(TlsClient {
            config: Arc::new(config),
            server_name: files.server_name.clone(),
        })
    }

    /// The name to verify for `host:port`.
    pub fn name_for(&self, host: &str) -> Result<ServerName<'static>, TlsError> {
        let name = match &self.server_name {
            Some(n) => n.clone(),
            None => host
                .rsplit_once(':')
                .map_or(host, |(h, _)| h)
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        };
        ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName(name))
    }
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = |source| TlsError::Pem {
        path: path.to_path_buf(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(pem)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_empty_files_are_named() {
        let files = TlsFiles {
            ca_file: "/nonexistent/ca.pem".into(),
            cert_file: None,
            key_file: None,
            server_name: None,
        };
        let e = TlsClient::load(&files).expect_err("missing");
        assert!(e.to_string().starts_with("/nonexistent/ca.pem: "), "{e}");
        let empty = std::env::temp_dir().join(format!("empty-ca-{}.pem", std::process::id()));
        std::fs::write(&empty, b"").expect("write");
        let e = TlsClient::load(&TlsFiles {
            ca_file: empty.clone(),
            ..files
        })
        .expect_err("empty");
        assert!(e.to_string().contains("no certificate"), "{e}");
        let _ = std::fs::remove_file(empty);
    }

    #[test]
    fn server_name_comes_from_the_host_unless_overridden() {
        let client = TlsClient {
            config: Arc::new(
                ClientConfig::builder()
                    .with_root_certificates(RootCertStore::empty())
                    .with_no_client_auth(),
            ),
            server_name: None,
        };
        assert_eq!(
            client
                .name_for("amq1.example.com:61614")
                .expect("dns")
                .to_str(),
            "amq1.example.com"
        );
        assert!(matches!(
            client.name_for("127.0.0.1:61614").expect("ip"),
            ServerName::IpAddress(_)
        ));
        let named = TlsClient {
            server_name: Some("broker.internal".into()),
            ..client
        };
        assert_eq!(
            named.name_for("10.1.1.1:61614").expect("dns").to_str(),
            "broker.internal"
        );
    }
}
