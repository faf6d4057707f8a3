//! The pair's one link: calls to the other router's admin API (`pair.peer`,
//! or `acme.peer`), as `router check-pair` makes them: with the admin token,
//! over TLS verified against `admin.tls_ca` when the admin listeners are off
//! loopback (the pair's are set alike), plain on loopback. The shared state's
//! updates ([`super::link`]), a rotate-out's wait on the peer and ACME's
//! sharing (`crate::issuer`) all go over it.
//!
//! One connection per call: the calls are one update per change or per
//! `pair.interval`, a few per ACME order, not worth a pool (a TLS 1.3
//! handshake is about 120 µs here). Each has a deadline and a cap on the
//! answer's size, so a peer that hangs or floods costs one failed call.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

/// The largest answer taken from the peer: a page of certificates.
const MAX_ANSWER: usize = 4 * 1024 * 1024;

/// Why a call to the peer failed.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("pair.peer {0:?}: an admin address is host:port")]
    Address(String),
    #[error("admin.tls_ca: {0}")]
    Tls(#[from] crate::tls::client::ClientTlsError),
    #[error("{0}: no answer within {1:?}")]
    Timeout(String, Duration),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    #[error("{0}: {1}")]
    Http(String, String),
}

/// The pair's other router, as its admin API.
pub struct Peer {
    /// `host:port`, as configured.
    addr: String,
    /// The name its admin certificate is verified for; `None`: plain (loopback).
    tls: Option<(TlsConnector, ServerName<'static>)>,
    token: Option<String>,
    timeout: Duration,
}

impl Peer {
    /// `addr` (`acme.peer`) reached with `token`; over TLS when `tls_off_loopback`
    /// (this router's admin listener is off loopback), trusting `tls_ca`.
    pub fn new(
        addr: &str,
        tls_off_loopback: bool,
        tls_ca: Option<&std::path::Path>,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Peer, PeerError> {
        let (host, _) = addr
            .rsplit_once(':')
            .ok_or_else(|| PeerError::Address(addr.to_string()))?;
        let tls = if tls_off_loopback {
            let provider: Arc<CryptoProvider> =
                Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let connector = crate::tls::client::connector(tls_ca, true, provider)?;
            let name = ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                .map_err(|_| PeerError::Address(addr.to_string()))?;
            Some((connector, name))
        } else {
            None
        };
        Ok(Peer {
            addr: addr.to_string(),
            tls,
            token,
            timeout,
        })
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// `method path` with `body` (JSON); the status and body of the answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(StatusCode, Bytes), PeerError> {
        self.call_within(self.timeout, method, path, body).await
    }

    /// [`Peer::call`] with a deadline of its own (a rotate-out waits for the
    /// peer's drain).
    pub async fn call_within(
        &self,
        timeout: Duration,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(StatusCode, Bytes), PeerError> {
        let what = format!("{method} {}{path}", self.addr);
        tokio::time::timeout(timeout, self.exchange(&what, method, path, body))
            .await
            .map_err(|_| PeerError::Timeout(what.clone(), timeout))?
    }

    async fn exchange(
        &self,
        what: &str,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(StatusCode, Bytes), PeerError> {
        let io = |e: std::io::Error| PeerError::Io(what.to_string(), e);
        let http = |e: &dyn std::fmt::Display| PeerError::Http(what.to_string(), e.to_string());
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(io)?;
        let _ = tcp.set_nodelay(true);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.addr)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| http(&e))?;
        let response = match &self.tls {
            Some((connector, name)) => {
                let tls = connector.connect(name.clone(), tcp).await.map_err(io)?;
                send(TokioIo::new(tls), request).await
            }
            None => send(TokioIo::new(tcp), request).await,
        }
        .map_err(|e| http(&e))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| http(&e))?
            .to_bytes();
        Ok((status, body))
    }
}

/// One request on a new HTTP/1.1 connection.
async fn send<T>(
    io: TokioIo<T>,
    request: Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, hyper::Error>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender.send_request(request).await
}
