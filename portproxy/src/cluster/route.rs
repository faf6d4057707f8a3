//! Where a cluster-port connection goes.
//!
//! Hosts are tried one after the other: this host first (looked up in-process, no
//! socket to our own proxy port), then the peers in `hosts.conf` order, each over the
//! `wire` protocol within `peer_timeout` (connect plus answer; a socket that runs out
//! of time is closed, never leaked). BUSY, refusal, a close without a byte, an
//! unknown answer or a timeout move on to the next host.
//!
//! On a host, the targets of the cluster port are shuffled (spreads load over a
//! pod's replicas), full ones are skipped (then the answer is BUSY if nothing else
//! connects), and the first that connects wins.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::Live;
use super::table::TargetSlot;
use super::wire::{self, Answer, AnswerRead};
use crate::metrics::Metrics;
use crate::proxy_protocol::Version;
use crate::server;

/// A connected target on this host.
pub struct Picked {
    pub stream: TcpStream,
    pub send_proxy: Option<Version>,
    /// Held while the connection lives: counts against `maxConn`.
    pub slot: TargetSlot,
}

/// What this host can do for a cluster port.
pub enum Pick {
    Connected(Picked),
    Busy,
    NotHere,
}

/// Picks and connects a target of `cluster_port` on this host.
pub async fn pick_local(
    live: &Live,
    cluster_port: u16,
    connect_timeout: Duration,
    metrics: &Metrics,
) -> Pick {
    let targets = live.table.targets(cluster_port);
    if targets.is_empty() {
        return Pick::NotHere;
    }
    let mut order: Vec<usize> = (0..targets.len()).collect();
    fastrand::shuffle(&mut order);
    let mut busy = false;
    for i in order {
        let t = &targets[i];
        let Some(slot) = t.try_take() else {
            busy = true;
            continue;
        };
        let addr = SocketAddr::new(live.pod_host, t.host_port);
        match server::connect(addr, connect_timeout).await {
            Ok(stream) => {
                return Pick::Connected(Picked {
                    stream,
                    send_proxy: t.send_proxy,
                    slot,
                });
            }
            Err(e) => {
                metrics
                    .mode(crate::metrics::Mode::Peer)
                    .connect_failures
                    .inc();
                tracing::debug!(cluster_port, %addr, error = %e, "host port connect failed");
            }
        }
    }
    if busy { Pick::Busy } else { Pick::NotHere }
}

/// A routed cluster-port connection.
pub struct Routed {
    pub stream: TcpStream,
    pub send_proxy: Option<Version>,
    /// Bytes the peer sent after its answer line (a server-speaks-first banner):
    /// they go to the client before anything else.
    pub early: Vec<u8>,
    /// `Some` when the target is on this host.
    pub slot: Option<TargetSlot>,
}

/// Tries every host in order; `None` when none took the connection.
pub async fn route(
    live: &Live,
    cluster_port: u16,
    connect_timeout: Duration,
    peer_timeout: Duration,
    metrics: &Metrics,
) -> Option<Routed> {
    for (i, &host) in live.hosts.iter().enumerate() {
        if live.self_index == Some(i) {
            match pick_local(live, cluster_port, connect_timeout, metrics).await {
                Pick::Connected(p) => {
                    return Some(Routed {
                        stream: p.stream,
                        send_proxy: p.send_proxy,
                        early: Vec::new(),
                        slot: Some(p.slot),
                    });
                }
                Pick::Busy | Pick::NotHere => continue,
            }
        }
        let label =
            match tokio::time::timeout(peer_timeout, ask(live.bind_ip, host, cluster_port)).await {
                Ok(Ok(Asked::Accepted(stream, send_proxy, early))) => {
                    metrics.peer_answers.with_label_values(&["ok"]).inc();
                    return Some(Routed {
                        stream,
                        send_proxy,
                        early,
                        slot: None,
                    });
                }
                Ok(Ok(Asked::Busy)) => "busy",
                Ok(Ok(Asked::NotHere)) => "not_here",
                Ok(Err(e)) => {
                    tracing::debug!(%host, cluster_port, error = %e, "peer proxy failed");
                    "error"
                }
                // The socket is dropped with the timed-out future: closed, not leaked.
                Err(_) => "timeout",
            };
        metrics.peer_answers.with_label_values(&[label]).inc();
    }
    None
}

enum Asked {
    Accepted(TcpStream, Option<Version>, Vec<u8>),
    Busy,
    NotHere,
}

/// One peer: connect (from our `HOST` address when it is a specific one, so the peer
/// recognises us as a host of its `hosts.conf`), ask for the port, read the one-line
/// answer.
async fn ask(from: IpAddr, host: SocketAddr, cluster_port: u16) -> std::io::Result<Asked> {
    let sock = if host.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if !from.is_unspecified() && from.is_ipv4() == host.is_ipv4() {
        sock.bind(SocketAddr::new(from, 0))?;
    }
    let mut s = sock.connect(host).await?;
    let _ = s.set_nodelay(true);
    s.write_all(wire::request(cluster_port).as_bytes()).await?;
    let mut buf = Vec::with_capacity(wire::MAX_ANSWER);
    loop {
        let more = match wire::read_answer(&buf) {
            AnswerRead::Line(answer, len) => {
                let early = buf.split_off(len);
                return match answer {
                    Some(Answer::Accepted(v)) => Ok(Asked::Accepted(s, v, early)),
                    Some(Answer::Busy) => Ok(Asked::Busy),
                    None => Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!(
                            "unknown answer {:?}",
                            String::from_utf8_lossy(&buf[..len - 2])
                        ),
                    )),
                };
            }
            AnswerRead::TooLong => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "answer line too long",
                ));
            }
            AnswerRead::More(n) => n,
        };
        let n = (&mut s).take(more as u64).read_buf(&mut buf).await?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(Asked::NotHere)
            } else {
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "answer cut short",
                ))
            };
        }
    }
}
