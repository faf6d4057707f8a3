//! One HTTP/1.1 connection to a member, driven by the request that uses it, and what
//! its errors mean.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::request_body::{BodyError, RequestBody};
use crate::metrics::UpstreamError;

/// The byte stream to a member: plain TCP or TLS over it.
pub enum MemberIo {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl tokio::io::AsyncRead for MemberIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for MemberIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MemberIo::Plain(s) => s.is_write_vectored(),
            MemberIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_flush(cx),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

type Io = TokioIo<MemberIo>;

/// TLS towards a member: the connector and the name to ask for and verify.
pub struct MemberTls<'a> {
    pub connector: &'a tokio_rustls::TlsConnector,
    pub host: &'a str,
}

/// One HTTP/1.1 connection to a member.
pub struct Upstream {
    sender: SendRequest<RequestBody>,
    /// The TLS server name, for TLS members: reused only for the same host.
    sni: Option<Arc<str>>,
    /// Boxed once per connection: it is large, and connections move between the
    /// pool, requests and bodies.
    conn: Box<Connection<Io, RequestBody>>,
    /// When it was last returned idle; `None` if it was never used before.
    idle_since: Option<Instant>,
}

/// The error is this process running out of something (file descriptors, memory),
/// not the peer refusing: it must never count against a member.
pub fn local_shortage(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Why a connection to a member could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: Arc<str>,
        #[source]
        source: io::Error,
    },
    #[error("connect to {addr}: timed out")]
    ConnectTimeout { addr: Arc<str> },
    #[error("TLS to {addr}: {source}")]
    Tls {
        addr: Arc<str>,
        #[source]
        source: io::Error,
    },
    #[error("member {addr}: {source}")]
    Http {
        addr: Arc<str>,
        /// The connection had served a request before (a pooled one).
        reused: bool,
        #[source]
        source: hyper::Error,
    },
}

impl SendError {
    /// The kind, for the status code and the metric.
    pub fn kind(&self) -> UpstreamError {
        match self {
            SendError::Connect { source, .. } if local_shortage(source) => {
                UpstreamError::LocalResources
            }
            SendError::Connect { .. } => UpstreamError::Connect,
            SendError::ConnectTimeout { .. } => UpstreamError::ConnectTimeout,
            SendError::Tls { .. } => UpstreamError::Tls,
            // hyper's "user" errors here come from the request body we stream: the
            // client's side failed, not the member.
            SendError::Http { source, .. } if source.is_user() => {
                match std::error::Error::source(source).and_then(|e| e.downcast_ref()) {
                    Some(BodyError::Stalled(_)) => UpstreamError::ClientTimeout,
                    _ => UpstreamError::ClientBody,
                }
            }
            SendError::Http { source, .. } if source.is_parse() => UpstreamError::Protocol,
            SendError::Http { .. } => UpstreamError::Reset,
        }
    }

    /// The member closed or reset the connection before sending any response byte:
    /// the one failure after which an idempotent request may be sent again (as
    /// nginx's default `proxy_next_upstream error` does). A garbled response or a
    /// timeout is not one of them.
    pub fn closed_before_response(&self) -> bool {
        let SendError::Http { source, .. } = self else {
            return false;
        };
        if source.is_user() {
            return false;
        }
        if source.is_incomplete_message() || source.is_canceled() || source.is_closed() {
            return true;
        }
        // A reset while writing the request or waiting for the head.
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            std::error::Error::source(source);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return matches!(
                    io.kind(),
                    io::ErrorKind::ConnectionReset
                        | io::ErrorKind::BrokenPipe
                        | io::ErrorKind::ConnectionAborted
                );
            }
            cause = e.source();
        }
        false
    }

    /// The connection had served a request before: its close was likely the
    /// member's keep-alive timeout, not the member dying.
    pub fn on_reused(&self) -> bool {
        matches!(self, SendError::Http { reused: true, .. })
    }
}

/// How a new connection is made, from `upstream.*` (how idle ones are kept is
/// [`PoolSettings`](super::PoolSettings)).
#[derive(Clone, Copy, Debug)]
pub struct ConnectSettings {
    pub connect_timeout: Duration,
}

/// A TCP connection to `target` by `deadline`, without delay on small writes.
pub async fn dial(
    addr: &Arc<str>,
    target: SocketAddr,
    deadline: tokio::time::Instant,
) -> Result<TcpStream, SendError> {
    let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(target)).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => {
            return Err(SendError::Connect {
                addr: addr.clone(),
                source,
            });
        }
        Err(_) => return Err(SendError::ConnectTimeout { addr: addr.clone() }),
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

impl Upstream {
    /// Opens a new connection to `addr` (`target`, its parsed form), with TLS if
    /// `tls` is given. The connect timeout covers the TLS handshake too.
    pub async fn connect(
        addr: &Arc<str>,
        target: Option<SocketAddr>,
        settings: ConnectSettings,
        tls: Option<MemberTls<'_>>,
    ) -> Result<Upstream, SendError> {
        let addr = addr.clone();
        let target: SocketAddr = match target {
            Some(a) => a,
            None => {
                return Err(SendError::Connect {
                    addr,
                    source: io::Error::new(io::ErrorKind::InvalidInput, "not an IP address"),
                });
            }
        };
        let deadline = tokio::time::Instant::now() + settings.connect_timeout;
        let stream = dial(&addr, target, deadline).await?;
        let (io, sni) = match tls {
            None => (MemberIo::Plain(stream), None),
            Some(tls) => {
                let name =
                    rustls::pki_types::ServerName::try_from(tls.host.to_string()).map_err(|e| {
                        SendError::Tls {
                            addr: addr.clone(),
                            source: io::Error::new(io::ErrorKind::InvalidInput, e),
                        }
                    })?;
                match tokio::time::timeout_at(deadline, tls.connector.connect(name, stream)).await {
                    Ok(Ok(s)) => (MemberIo::Tls(Box::new(s)), Some(Arc::from(tls.host))),
                    Ok(Err(source)) => return Err(SendError::Tls { addr, source }),
                    Err(_) => return Err(SendError::ConnectTimeout { addr }),
                }
            }
        };
        let (sender, conn) = http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(|source| SendError::Http {
                addr,
                reused: false,
                source,
            })?;
        Ok(Upstream {
            sender,
            sni,
            conn: Box::new(conn),
            idle_since: None,
        })
    }

    /// The TLS server name this connection was made for (`None`: plain TCP).
    pub fn sni(&self) -> Option<&str> {
        self.sni.as_deref()
    }

    /// Whether this connection had served a request before.
    pub fn reused(&self) -> bool {
        self.idle_since.is_some()
    }

    /// Sends `req` and waits for the response head, driving the connection meanwhile.
    pub async fn send(
        &mut self,
        addr: &Arc<str>,
        req: Request<RequestBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let reused = self.reused();
        let response = self.sender.send_request(req);
        let conn = &mut self.conn;
        tokio::pin!(response);
        let result = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = response.as_mut().poll(cx) {
                return Poll::Ready(r);
            }
            // Writes the request (and its body), reads the response. When the
            // connection ends, the response future fails and says why.
            let _ = conn.poll_without_shutdown(cx);
            response.as_mut().poll(cx)
        })
        .await;
        result.map_err(|source| SendError::Http {
            addr: addr.clone(),
            reused,
            source,
        })
    }

    /// Polls the connection once without waiting; false if it has closed or is busy.
    /// Cheap: the socket is only read if the runtime saw it become readable.
    pub fn is_reusable(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if self.conn.poll_without_shutdown(&mut cx).is_ready() {
            return false;
        }
        self.sender.is_ready()
    }

    /// Whether it has been idle longer than `limit` at `now`.
    pub fn expired(&self, now: Instant, limit: Duration) -> bool {
        self.idle_since
            .is_some_and(|t| now.saturating_duration_since(t) >= limit)
    }

    pub(super) fn mark_idle(&mut self, now: Instant) {
        self.idle_since = Some(now);
    }

    /// Sends a request that asks for an upgrade (WebSocket). The connection is handed
    /// to a task of its own first, which drives it through the switch (polling it
    /// here would consume the upgrade); it is never pooled.
    pub async fn send_upgrade(
        self,
        addr: &Arc<str>,
        req: Request<RequestBody>,
    ) -> Result<Response<Incoming>, SendError> {
        let Upstream {
            mut sender, conn, ..
        } = self;
        tokio::spawn(async move {
            let _ = (*conn).with_upgrades().await;
        });
        sender
            .send_request(req)
            .await
            .map_err(|source| SendError::Http {
                addr: addr.clone(),
                reused: false,
                source,
            })
    }

    pub(super) fn poll_drive(&mut self, cx: &mut Context<'_>) {
        let _ = self.conn.poll_without_shutdown(cx);
    }
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream").field("sni", &self.sni).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_descriptors_is_never_the_members_fault() {
        for errno in [libc::EMFILE, libc::ENFILE] {
            let e = SendError::Connect {
                addr: Arc::from("10.0.0.1:80"),
                source: io::Error::from_raw_os_error(errno),
            };
            assert_eq!(e.kind(), UpstreamError::LocalResources);
            assert!(!e.kind().members_fault());
        }
        let refused = SendError::Connect {
            addr: Arc::from("10.0.0.1:80"),
            source: io::Error::from_raw_os_error(libc::ECONNREFUSED),
        };
        assert_eq!(refused.kind(), UpstreamError::Connect);
        assert!(refused.kind().members_fault());
    }
}
