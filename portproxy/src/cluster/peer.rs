//! The proxy port: peer proxies (and this host's own, when it is not short-cut) ask
//! for one of our cluster ports with the `wire` request line.
//!
//! Only hosts of `hosts.conf` and `trusted_sources` may connect (unless
//! `peers_from_hosts_only: false`); others are closed at once and counted
//! (`rejected{reason="untrusted_peer"}`). The request line must come within
//! `peer_timeout` and be a valid PROXY v1 line (107 bytes at most); its destination
//! port is the cluster port. Bytes after it are the client's and go to the target.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::Cluster;
use super::route::{Pick, pick_local};
use super::wire::{self, Answer, RequestRead};
use crate::metrics::Mode;
use crate::server;

pub fn spawn(cluster: Arc<Cluster>, listener: TcpListener) -> JoinHandle<()> {
    let shared = cluster.shared.clone();
    tokio::spawn(server::accept_loop(
        listener,
        shared,
        Mode::Peer,
        move |s, peer| {
            let cluster = cluster.clone();
            async move { answer(&cluster, s, peer).await }
        },
    ))
}

async fn answer(cluster: &Cluster, mut s: TcpStream, peer: std::net::SocketAddr) {
    let live = cluster.live.load_full();
    let metrics = &cluster.shared.metrics;
    if cluster.cfg.peers_from_hosts_only && !live.is_trusted(peer.ip()) {
        metrics
            .rejected
            .with_label_values(&["untrusted_peer"])
            .inc();
        tracing::info!(%peer, "proxy-port connection from a host not in hosts.conf refused");
        return;
    }
    let mut buf = Vec::with_capacity(128);
    let deadline = tokio::time::Instant::now() + cluster.cfg.peer_timeout;
    let (len, cluster_port) = loop {
        let more = match wire::read_request(&buf) {
            RequestRead::Port { len, cluster_port } => break (len, cluster_port),
            RequestRead::More(n) => n,
            RequestRead::Invalid => {
                metrics
                    .proxy_protocol_rejects
                    .with_label_values(&["invalid"])
                    .inc();
                tracing::debug!(%peer, "bad request line on the proxy port");
                return;
            }
        };
        let read =
            tokio::time::timeout_at(deadline, (&mut s).take(more as u64).read_buf(&mut buf)).await;
        match read {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    };
    let early = buf.split_off(len);
    match pick_local(
        &live,
        cluster_port,
        cluster.shared.limits.connect_timeout,
        metrics,
    )
    .await
    {
        Pick::Connected(mut p) => {
            if s.write_all(wire::encode(Answer::Accepted(p.send_proxy)))
                .await
                .is_err()
            {
                return;
            }
            if !early.is_empty() && p.stream.write_all(&early).await.is_err() {
                return;
            }
            server::relay_and_count(&cluster.shared, Mode::Peer, &mut s, &mut p.stream, false)
                .await;
            drop(p.slot);
        }
        Pick::Busy => {
            metrics.busy_sent.inc();
            let _ = s.write_all(wire::encode(Answer::Busy)).await;
            let _ = s.shutdown().await;
        }
        // "Not here": close without a byte, as the JS proxy does.
        Pick::NotHere => {}
    }
}
