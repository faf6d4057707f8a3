//! HTTPS to the CA with every exchange bounded.
//!
//! One connection per request (an order is a dozen requests, minutes apart at
//! most), each within `Settings::request_timeout` from the connect to the last
//! byte of the body, and no body larger than `Settings::max_body` is read: a CA
//! that is slow, never answers or sends without end fails that request, with
//! its reason, and nothing else.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use crate::Settings;

/// Debian's bundle of the public CAs (package `ca-certificates`).
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Why the CA's HTTPS cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("CA bundle {path}: {source}")]
    Roots {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("CA bundle {0} holds no certificate")]
    NoRoots(PathBuf),
    #[error("{0}")]
    Rustls(#[from] rustls::Error),
}

/// Why one request to the CA failed.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    #[error("{0} is not an https:// URL with a host")]
    Url(Uri),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("connect to {0}: {1}")]
    Connect(String, std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("response body: {0}")]
    Body(Box<dyn std::error::Error + Send + Sync>),
}

/// The HTTP client `instant-acme` is given.
#[derive(Clone)]
pub struct Bounded {
    tls: TlsConnector,
    timeout: Duration,
    max_body: usize,
    /// The wait the CA last asked for with `Retry-After` on a 429 or 503
    /// (rate limited, overloaded): what the order's back-off honours, since
    /// `instant-acme`'s errors do not carry it.
    pub said_retry_after: Arc<std::sync::Mutex<Option<Duration>>>,
}

/// `Retry-After` as seconds or an HTTP date, from now.
fn retry_after(value: &http::HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

impl Bounded {
    pub fn new(settings: &Settings) -> Result<Bounded, HttpError> {
        let roots = roots(settings.ca_file.as_deref())?;
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Bounded {
            tls: TlsConnector::from(Arc::new(config)),
            timeout: settings.request_timeout,
            max_body: settings.max_body,
            said_retry_after: Arc::default(),
        })
    }

    async fn send(
        self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Result<Response<Full<Bytes>>, RequestError> {
        let uri = req.uri().clone();
        let (host, port) = match (uri.scheme_str(), uri.host()) {
            (Some("https"), Some(host)) => (host.to_string(), uri.port_u16().unwrap_or(443)),
            _ => return Err(RequestError::Url(uri)),
        };
        let name =
            ServerName::try_from(host.clone()).map_err(|_| RequestError::Url(uri.clone()))?;
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| RequestError::Connect(format!("{host}:{port}"), e))?;
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|e| RequestError::Connect(format!("{host}:{port}"), e))?;
        // Origin form and a Host field, as a client on its own connection sends it.
        let mut req = req;
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_string())
            .unwrap_or(host.clone());
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        *req.uri_mut() = path.parse().map_err(|_| RequestError::Url(uri.clone()))?;
        let host_value =
            http::HeaderValue::from_str(&authority).map_err(|_| RequestError::Url(uri.clone()))?;
        req.headers_mut().insert(http::header::HOST, host_value);
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        let conn = tokio::spawn(conn);
        let response = sender.send_request(req).await;
        let result = match response {
            Ok(response) => {
                let (parts, body) = response.into_parts();
                let refused = parts.status == http::StatusCode::TOO_MANY_REQUESTS
                    || parts.status == http::StatusCode::SERVICE_UNAVAILABLE;
                if let Some(wait) = parts
                    .headers
                    .get(http::header::RETRY_AFTER)
                    .filter(|_| refused)
                    .and_then(retry_after)
                {
                    *self
                        .said_retry_after
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(wait);
                }
                let body = Limited::new(body, self.max_body)
                    .collect()
                    .await
                    .map_err(RequestError::Body)?
                    .to_bytes();
                Ok(Response::from_parts(parts, Full::new(body)))
            }
            Err(e) => Err(e.into()),
        };
        conn.abort();
        result
    }
}

impl HttpClient for Bounded {
    fn request(
        &self,
        req: Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let this = self.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let sent = tokio::time::timeout(timeout, this.send(req))
                .await
                .unwrap_or(Err(RequestError::Timeout(timeout)));
            match sent {
                Ok(response) => Ok(BytesResponse::from(response)),
                Err(e) => Err(instant_acme::Error::Other(Box::new(e))),
            }
        })
    }
}

/// The roots the CA's certificate must chain to: `ca_file`, else the system's.
fn roots(ca_file: Option<&Path>) -> Result<RootCertStore, HttpError> {
    let path = ca_file.unwrap_or(Path::new(SYSTEM_BUNDLE));
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|source| HttpError::Roots {
        path: path.to_path_buf(),
        source,
    })?;
    for cert in certs {
        let cert = cert.map_err(|source| HttpError::Roots {
            path: path.to_path_buf(),
            source,
        })?;
        // A bundle may hold certificates rustls cannot use as roots: skipped.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(HttpError::NoRoots(path.to_path_buf()));
    }
    Ok(roots)
}
