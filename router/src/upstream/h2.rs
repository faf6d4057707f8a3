//! HTTP/2 to members, for apps whose members speak it (`members_protocol: h2` in the
//! app's settings): gRPC needs it (trailers, long-lived streams both ways), and an
//! h2-only member cannot be reached over HTTP/1.1 at all. Prior knowledge (h2c) on
//! plain members, ALPN `h2` on TLS (`ssl_to_gear`) ones. Clients reach such a member
//! over any protocol they speak to the router (h2 over TLS, h2c, or HTTP/1.1).
//!
//! One connection per member (and TLS name), made by the first request and shared by
//! the ones after it: h2 multiplexes. Each request still takes one of the member's
//! slots (`upstream.max_connections_per_backend` bounds its streams in flight, as it
//! bounds HTTP/1.1 connections), so a member sees no more requests at once either
//! way. A connection that failed, or that the member closed (GOAWAY), is replaced by
//! the next request. Pings every 20 s find a member that vanished without closing.
//!
//! The framing is hyper's client (`hyper::client::conn::http2`): no h2 is written
//! here, only which connection a request goes on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::client::conn::http2::{self, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::conn::{ConnectSettings, MemberTls, SendError, dial};
use super::request_body::RequestBody;

/// How often an idle h2 connection is pinged, and how long a ping may take.
const PING_EVERY: Duration = Duration::from_secs(20);
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// A member's shared h2 connection, if one is open.
#[derive(Default)]
pub struct H2Conn(Mutex<Option<Open>>);

impl std::fmt::Debug for H2Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("H2Conn")
    }
}

struct Open {
    /// The TLS name it was made for (`None`: plain).
    sni: Option<Arc<str>>,
    send: SendRequest<RequestBody>,
}

impl H2Conn {
    /// The open connection for `sni`, if it still takes requests.
    fn current(&self, sni: Option<&str>) -> Option<SendRequest<RequestBody>> {
        let open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        open.as_ref()
            .filter(|o| o.sni.as_deref() == sni && !o.send.is_closed())
            .map(|o| o.send.clone())
    }

    /// A sender on the member's connection, opening one if there is none (or it
    /// closed, or was made for another TLS name).
    pub async fn sender(
        &self,
        addr: &Arc<str>,
        target: Option<std::net::SocketAddr>,
        settings: ConnectSettings,
        tls: Option<MemberTls<'_>>,
        opened: &prometheus::IntCounter,
    ) -> Result<SendRequest<RequestBody>, SendError> {
        let sni = tls.as_ref().map(|t| t.host);
        if let Some(send) = self.current(sni) {
            return Ok(send);
        }
        let target = target.ok_or_else(|| SendError::Connect {
            addr: addr.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not an IP address"),
        })?;
        let deadline = tokio::time::Instant::now() + settings.connect_timeout;
        let stream = dial(addr, target, deadline).await?;
        let send = match tls {
            None => {
                let connect = |e| SendError::Connect {
                    addr: addr.clone(),
                    source: std::io::Error::other(e),
                };
                h2_handshake(TokioIo::new(stream), addr, deadline, connect).await?
            }
            Some(tls) => {
                let stream = tls_with_h2(stream, tls, addr, deadline).await?;
                let failed = |e| SendError::Tls {
                    addr: addr.clone(),
                    source: std::io::Error::other(e),
                };
                h2_handshake(TokioIo::new(stream), addr, deadline, failed).await?
            }
        };
        opened.inc();
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Open {
            sni: sni.map(Arc::from),
            send: send.clone(),
        });
        Ok(send)
    }
}

/// TLS to a member that must agree to h2 (ALPN), within `deadline`.
async fn tls_with_h2(
    stream: tokio::net::TcpStream,
    tls: MemberTls<'_>,
    addr: &Arc<str>,
    deadline: tokio::time::Instant,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, SendError> {
    let name = rustls::pki_types::ServerName::try_from(tls.host.to_string()).map_err(|e| {
        SendError::Tls {
            addr: addr.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        }
    })?;
    let connect = tls
        .connector
        .with_alpn(vec![b"h2".to_vec()])
        .connect(name, stream);
    let stream = tokio::time::timeout_at(deadline, connect)
        .await
        .map_err(|_| SendError::ConnectTimeout { addr: addr.clone() })?
        .map_err(|source| SendError::Tls {
            addr: addr.clone(),
            source,
        })?;
    if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err(SendError::Tls {
            addr: addr.clone(),
            source: std::io::Error::other("the member did not agree to h2 (ALPN)"),
        });
    }
    Ok(stream)
}

/// The h2 handshake on `io` within `deadline` (its failure as `failed` says),
/// the connection then driven by a task of its own.
async fn h2_handshake<I>(
    io: I,
    addr: &Arc<str>,
    deadline: tokio::time::Instant,
    failed: impl FnOnce(hyper::Error) -> SendError,
) -> Result<SendRequest<RequestBody>, SendError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .keep_alive_interval(PING_EVERY)
        .keep_alive_timeout(PING_TIMEOUT)
        .keep_alive_while_idle(true);
    let (send, conn) = tokio::time::timeout_at(deadline, builder.handshake(io))
        .await
        .map_err(|_| SendError::ConnectTimeout { addr: addr.clone() })?
        .map_err(failed)?;
    tokio::spawn(drive(conn, addr.clone()));
    Ok(send)
}

/// Runs a connection until it ends (the member closed it, a ping went unanswered,
/// or every sender and stream is gone).
async fn drive<T>(conn: http2::Connection<T, RequestBody, TokioExecutor>, addr: Arc<str>)
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    if let Err(e) = conn.await {
        tracing::debug!(member = %addr, error = %e, "h2 member connection ended");
    }
}
