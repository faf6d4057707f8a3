//! Client-facing listeners: accept, limit, hand each connection to hyper, drain.
//!
//! The accept loop only accepts: it takes a connection slot first (at
//! `limits.max_connections` it stops accepting and lets the kernel backlog hold new
//! clients), then spawns a task that owns the connection. hyper serves HTTP/1.1 and
//! h2 (detected by the client preface, so h2 with prior knowledge works on the plain
//! port), enforces the header size and count limits (431) and the request-head read
//! timeout (slowloris), and hands upgraded connections back for tunnelling.
//!
//! A TLS listener does the handshake in the connection's task (never in the accept
//! loop), within `tls.handshake_timeout`, then serves the same way; ALPN picks h2 or
//! HTTP/1.1.
//!
//! On shutdown the loop stops accepting, every connection is told to finish (HTTP/1
//! closes after the in-flight response, h2 sends GOAWAY) and the listener waits for
//! them up to the grace period.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::Proxy;
use super::headers::ClientConn;

/// Protections of the listeners against clients.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Open client connections at most; beyond, new ones wait in the kernel backlog.
    #[serde(default = "default_max_client_conns")]
    pub max_connections: usize,
    /// Request line plus headers, in bytes (larger: 431). At least 8192.
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: usize,
    /// Header fields per request (more: 431).
    #[serde(default = "default_max_headers")]
    pub max_headers: usize,
    /// Time a client has to send a complete request head (slowloris).
    #[serde(default = "default_header_timeout", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Open connections to the admin listener at most (it has the same head
    /// timeout and size limits as the client listeners).
    #[serde(default = "default_max_admin_conns")]
    pub max_admin_connections: usize,
}

fn default_max_admin_conns() -> usize {
    256
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: default_max_client_conns(),
            max_header_bytes: default_max_header_bytes(),
            max_headers: default_max_headers(),
            header_read_timeout: default_header_timeout(),
            max_admin_connections: default_max_admin_conns(),
        }
    }
}

fn default_max_client_conns() -> usize {
    10_000
}
fn default_max_header_bytes() -> usize {
    64 * 1024
}
fn default_max_headers() -> usize {
    100
}
fn default_header_timeout() -> Duration {
    Duration::from_secs(10)
}

/// Binds a listening socket with a deep backlog and `SO_REUSEADDR`.
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(4096)?;
    TcpListener::from_std(socket.into())
}

/// TLS on a listener.
#[derive(Clone)]
pub struct TlsListener {
    pub acceptor: crate::tls::server::Acceptor,
    pub handshake_timeout: Duration,
}

/// Serves the proxy on `listener` until `stop` turns true, then drains for `grace`.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    listener: TcpListener,
    name: &'static str,
    tls: Option<TlsListener>,
    proxy: Arc<Proxy>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_header_bytes)
        .max_headers(limits.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let open = proxy.metrics.open_connections.with_label_values(&[name]);
    let accepted = proxy.metrics.connections.with_label_values(&[name]);
    let local_port = listener.local_addr().map(|a| a.port()).unwrap_or(0);

    loop {
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => match s { Ok(s) => s, Err(_) => break },
            _ = stopped(&mut stop) => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(listener = name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut stop) => break,
        };
        let _ = stream.set_nodelay(true);
        accepted.inc();
        open.inc();
        let conn = ClientConn::new(peer.ip(), local_port, tls.is_some());
        let service = {
            let proxy = proxy.clone();
            service_fn(move |req| proxy.clone().serve(conn.clone(), req))
        };
        let open = open.clone();
        let ended = move |e: Option<Box<dyn std::error::Error + Send + Sync>>| {
            if let Some(e) = e {
                tracing::debug!(client = %peer, error = %e, "client connection ended with an error");
            }
            open.dec();
            drop(slot);
        };
        match &tls {
            None => {
                let connection = graceful.watch(
                    builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .into_owned(),
                );
                tokio::spawn(async move { ended(connection.await.err()) });
            }
            Some(tls) => {
                // The handshake runs in the connection's task; only then can the
                // connection be watched for shutdown.
                let (tls, builder, watcher) = (tls.clone(), builder.clone(), graceful.watcher());
                let metrics = proxy.metrics.tls.clone();
                tokio::spawn(async move {
                    let Some(stream) = crate::tls::server::handshake(
                        &tls.acceptor,
                        stream,
                        tls.handshake_timeout,
                        &metrics,
                    )
                    .await
                    else {
                        return ended(None);
                    };
                    let connection = watcher.watch(
                        builder
                            .serve_connection_with_upgrades(TokioIo::new(stream), service)
                            .into_owned(),
                    );
                    ended(connection.await.err());
                });
            }
        }
    }
    drop(listener);
    tracing::info!(listener = name, grace = ?grace, "stopped accepting; draining connections");
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            listener = name,
            "grace period over; closing the remaining connections"
        );
    }
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
