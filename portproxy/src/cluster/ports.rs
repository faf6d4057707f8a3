//! Cluster-port listeners and the client side of a cluster-port connection.
//!
//! One listener per port of `CLUSTERPORTS` (tens of thousands: each is one socket and
//! one small accept task, no buffer). A reload diffs the port set: new ports are
//! bound, gone ones stop accepting, unchanged ones are not touched, and open
//! connections never notice.
//!
//! A connection: route it (`route`), hand the peer's early bytes to the client, then
//! apply the PROXY policy (see `proxy_protocol`'s trust rule):
//!
//! | source    | target wants | what the target gets                                  |
//! |-----------|--------------|-------------------------------------------------------|
//! | trusted   | a header     | the client's header (verbatim, or re-encoded to the target's version), else ours |
//! | trusted   | none         | the client's header stripped, if it sent one           |
//! | untrusted | a header     | ours (source = the client's address)                  |
//! | untrusted | none         | nothing                                               |
//!
//! From an untrusted source, a leading PROXY header closes the connection.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::Cluster;
use super::route::route;
use crate::metrics::Mode;
use crate::proxy_protocol::expect::{ExpectError, read_leading};
use crate::proxy_protocol::header;
use crate::server;

/// The cluster-port listeners by port.
#[derive(Default)]
pub struct Listeners {
    map: Mutex<HashMap<u16, JoinHandle<()>>>,
}

impl Listeners {
    /// Makes the listening set equal `want`; returns `(listening, failed to bind)`.
    pub fn apply(&self, cluster: &Arc<Cluster>, want: &BTreeSet<u16>) -> (usize, usize) {
        let ip = cluster.live.load().bind_ip;
        let m = cluster.shared.metrics.mode(Mode::Cluster);
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|port, h| {
            let keep = want.contains(port);
            if !keep {
                h.abort();
            }
            keep
        });
        let mut failed = 0;
        for &port in want {
            if map.contains_key(&port) {
                continue;
            }
            let addr = SocketAddr::new(ip, port);
            match server::bind(addr) {
                Ok(l) => {
                    let c = cluster.clone();
                    let task = tokio::spawn(server::accept_loop(
                        l,
                        cluster.shared.clone(),
                        Mode::Cluster,
                        move |s, peer| {
                            let c = c.clone();
                            async move { relay(&c, s, peer, port).await }
                        },
                    ));
                    map.insert(port, task);
                }
                Err(e) => {
                    failed += 1;
                    m.bind_failures.inc();
                    if failed <= 10 {
                        tracing::error!(%addr, error = %e, "cluster port not listening");
                    }
                }
            }
        }
        if failed > 10 {
            tracing::error!(failed, "cluster ports not listening (first 10 logged)");
        }
        (map.len(), failed)
    }

    /// Stops every listener; returns once their sockets are closed.
    pub async fn stop_all(&self) {
        let handles: Vec<JoinHandle<()>> = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            map.drain().map(|(_, h)| h).collect()
        };
        for h in &handles {
            h.abort();
        }
        for h in handles {
            let _ = h.await;
        }
    }
}

async fn relay(cluster: &Cluster, mut client: TcpStream, peer: SocketAddr, cluster_port: u16) {
    let live = cluster.live.load_full();
    let shared = &cluster.shared;
    let metrics = &shared.metrics;
    let Some(mut r) = route(
        &live,
        cluster_port,
        shared.limits.connect_timeout,
        cluster.cfg.peer_timeout,
        metrics,
    )
    .await
    else {
        metrics.unrouted.inc();
        tracing::info!(%peer, cluster_port, "no host took the connection");
        return;
    };
    if !r.early.is_empty() && client.write_all(&r.early).await.is_err() {
        return;
    }
    let local = client
        .local_addr()
        .unwrap_or(SocketAddr::new(live.bind_ip, cluster_port));
    let trusted = live.is_trusted(peer.ip());
    let mut lead = Vec::new();
    if trusted {
        let wait = if r.send_proxy.is_some() {
            cluster.cfg.header_timeout
        } else {
            cluster.cfg.header_timeout / 3
        };
        let leading = match read_leading(&mut client, wait).await {
            Ok(l) => l,
            Err(ExpectError::Invalid(why)) => {
                metrics
                    .proxy_protocol_rejects
                    .with_label_values(&["invalid"])
                    .inc();
                tracing::info!(%peer, cluster_port, why, "invalid PROXY header refused");
                server::reset(&client);
                return;
            }
            Err(ExpectError::Io(_)) => return,
        };
        match (leading.header, r.send_proxy) {
            (Some(h), Some(v)) if h.version == v => lead = h.bytes,
            (Some(h), Some(v)) => {
                lead = header::encode(v, h.source.unwrap_or(peer), h.destination.unwrap_or(local));
            }
            (None, Some(v)) => lead = header::encode(v, peer, local),
            (_, None) => {}
        }
        lead.extend_from_slice(&leading.payload);
    } else if let Some(v) = r.send_proxy {
        lead = header::encode(v, peer, local);
    }
    if !lead.is_empty() && r.stream.write_all(&lead).await.is_err() {
        return;
    }
    server::relay_and_count(shared, Mode::Cluster, &mut client, &mut r.stream, !trusted).await;
    drop(r.slot);
}
