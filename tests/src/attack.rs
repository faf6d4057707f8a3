//! Hostile clients for the fairness benchmark (`bench/slow.py`, modes Z and S) and
//! the tests: one address holding a member's slots.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Empty;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What an attack got: requests sent, and answers by class.
#[derive(Debug, Default)]
pub struct Tally {
    pub sent: AtomicU64,
    pub answered: AtomicU64,
    pub failed: AtomicU64,
}

impl Tally {
    pub fn json(&self) -> String {
        format!(
            "{{\"sent\":{},\"answered\":{},\"failed\":{}}}",
            self.sent.load(Ordering::Relaxed),
            self.answered.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed)
        )
    }
}

/// `connections` h2 connections (prior knowledge), each keeping `streams` requests
/// for `path` open with a receive window of zero that is never opened, until
/// `until`: every stream holds whatever the proxy gives a request in flight. A
/// stream that gets its answer (an error status, a reset) is sent again.
pub async fn zero_window(
    addr: SocketAddr,
    host: &str,
    path: &str,
    connections: usize,
    streams: usize,
    until: Instant,
) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (tally, uri) = (tally.clone(), format!("http://{host}{path}"));
        tasks.spawn(async move {
            while Instant::now() < until {
                let Ok(io) = tokio::net::TcpStream::connect(addr).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let handshake =
                    hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .initial_stream_window_size(0)
                        .handshake::<_, Empty<Bytes>>(hyper_util::rt::TokioIo::new(io))
                        .await;
                let Ok((send, conn)) = handshake else {
                    continue;
                };
                let conn = tokio::spawn(conn);
                let mut held = tokio::task::JoinSet::new();
                for _ in 0..streams {
                    let (mut send, tally, uri) = (send.clone(), tally.clone(), uri.clone());
                    held.spawn(async move {
                        while Instant::now() < until && send.ready().await.is_ok() {
                            let Ok(req) = http::Request::get(&uri).body(Empty::new()) else {
                                return;
                            };
                            tally.sent.fetch_add(1, Ordering::Relaxed);
                            match send.send_request(req).await {
                                // Held, body unread, until the end.
                                Ok(resp) if resp.status().is_success() => {
                                    tally.answered.fetch_add(1, Ordering::Relaxed);
                                    tokio::time::sleep_until(until.into()).await;
                                    return;
                                }
                                Ok(_) => {
                                    tally.answered.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(_) => {
                                    tally.failed.fetch_add(1, Ordering::Relaxed);
                                    return;
                                }
                            }
                        }
                    });
                }
                while held.join_next().await.is_some() {}
                conn.abort();
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    tally
}

/// `clients` HTTP/1.1 connections, each sending `GET path` (with `extra` header
/// lines) again as soon as it has its answer (or on a new connection when it has
/// none), until `until`.
pub async fn slow_requests(
    addr: SocketAddr,
    host: &str,
    path: &str,
    extra: &str,
    clients: usize,
    until: Instant,
) -> Arc<Tally> {
    let tally = Arc::new(Tally::default());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let tally = tally.clone();
        let req =
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n");
        tasks.spawn(async move {
            while Instant::now() < until {
                let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                tally.sent.fetch_add(1, Ordering::Relaxed);
                if s.write_all(req.as_bytes()).await.is_err() {
                    tally.failed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let left = until.saturating_duration_since(Instant::now());
                let mut head = [0u8; 12];
                match tokio::time::timeout(left, s.read_exact(&mut head)).await {
                    Ok(Ok(_)) => {
                        tally.answered.fetch_add(1, Ordering::Relaxed);
                        let mut rest = Vec::new();
                        let left = until.saturating_duration_since(Instant::now());
                        let _ = tokio::time::timeout(left, s.read_to_end(&mut rest)).await;
                    }
                    Ok(Err(_)) => {
                        tally.failed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {}
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    tally
}
