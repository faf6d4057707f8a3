//! The sender's half of the pair's link: the entries the peer has not
//! acknowledged, posted to its `POST /pair/updates` at once on a change and
//! every `pair.interval` otherwise (the heartbeat that says whether the peer
//! is reachable). The peer's answer names its epoch (a number drawn when it
//! started) and acknowledges everything sent: a link that drops resumes at
//! the last acknowledgement, a peer that restarted is sent everything.
//!
//! Metrics: `router_pair_peer_up{peer}` (1 while the last call was
//! answered), `router_pair_updates_sent_total`,
//! `router_pair_updates_received_total` (applied here, from the peer: newer
//! than what was here), `router_pair_updates_refused_total{reason="future"}`
//! (entries from the peer versioned beyond `pair.max_clock_skew`),
//! `router_pair_lag_seconds` (how long the oldest entry
//! the peer has not acknowledged has waited; 0 when it has them all), and the
//! shared limit's `router_pair_count_bytes_total` and
//! `router_pair_counts_dropped_total`.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use prometheus::{Gauge, IntCounter, IntGauge, Registry};
use serde::{Deserialize, Serialize};

use super::{Node, Peer};
use pair_state::{State, Update};

/// Entries in one call at most (a maintenance page is up to 64 KiB: a page of
/// them stays well under the receiver's body limit).
pub const PAGE: usize = 64;

/// What `POST /pair/updates` carries.
#[derive(Serialize, Deserialize)]
pub struct Updates {
    /// The sender's name in the pair.
    pub node: String,
    /// The sender's epoch.
    pub epoch: u64,
    pub updates: Vec<Update>,
}

/// What `POST /pair/updates` answers: everything sent is acknowledged.
#[derive(Serialize, Deserialize)]
pub struct Ack {
    /// The receiver's epoch.
    pub epoch: u64,
    /// How many of the updates were newer there and applied.
    pub applied: usize,
}

/// The link's metrics (see the module doc).
#[derive(Clone)]
pub struct PairMetrics {
    pub up: IntGauge,
    pub sent: IntCounter,
    pub received: IntCounter,
    /// `router_pair_updates_refused_total{reason="future"}`.
    pub refused_future: IntCounter,
    pub lag: Gauge,
    /// `router_pair_count_bytes_total`: what the link carries for the shared
    /// rate limit (see [`super::counts`]).
    pub count_bytes: IntCounter,
    /// `router_pair_counts_dropped_total`: tokens counted here the peer did
    /// not take (the link down, or slow).
    pub counts_dropped: IntCounter,
}

impl PairMetrics {
    pub fn new(r: &Registry, peer: &str) -> prometheus::Result<PairMetrics> {
        let up = prometheus::IntGaugeVec::new(
            prometheus::Opts::new(
                "router_pair_peer_up",
                "1 while the pair's other router answers the link (pair.peer)",
            ),
            &["peer"],
        )?;
        r.register(Box::new(up.clone()))?;
        let sent = IntCounter::new(
            "router_pair_updates_sent_total",
            "Shared-state entries sent to the pair's other router and acknowledged",
        )?;
        let received = IntCounter::new(
            "router_pair_updates_received_total",
            "Shared-state entries from the pair's other router applied here (newer than what was here)",
        )?;
        let refused = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "router_pair_updates_refused_total",
                "Shared-state entries from the pair's other router refused here, by reason (future: versioned beyond pair.max_clock_skew)",
            ),
            &["reason"],
        )?;
        r.register(Box::new(refused.clone()))?;
        let lag = Gauge::new(
            "router_pair_lag_seconds",
            "How long the oldest entry the pair's other router has not acknowledged has waited",
        )?;
        let count_bytes = IntCounter::new(
            "router_pair_count_bytes_total",
            "Bytes of rate-limit counts sent to the pair's other router",
        )?;
        let counts_dropped = IntCounter::new(
            "router_pair_counts_dropped_total",
            "Rate-limit tokens counted here that the pair's other router did not take (link down or slow)",
        )?;
        for c in [&sent, &received, &count_bytes, &counts_dropped] {
            r.register(Box::new(c.clone()))?;
        }
        r.register(Box::new(lag.clone()))?;
        Ok(PairMetrics {
            up: up.with_label_values(&[peer]),
            sent,
            received,
            refused_future: refused.with_label_values(&["future"]),
            lag,
            count_bytes,
            counts_dropped,
        })
    }
}

/// The pair's link: the state it shares, the peer it shares it with, and
/// its sender ([`Link::run`]).
pub struct Link {
    pub peer: Arc<Peer>,
    pub state: Arc<State>,
    pub metrics: PairMetrics,
    /// This router's epoch.
    pub epoch: u64,
    pub timeout: Duration,
    pub interval: Duration,
    /// `pair.limit_interval` (see [`super::counts`]).
    pub limit_interval: Duration,
}

impl Link {
    /// Sends until the task is aborted (the router stops).
    pub async fn run(self: Arc<Self>) {
        let mut acked = 0;
        let mut peer_epoch = None;
        loop {
            if let Err(e) = self.state.prune_due() {
                tracing::error!(error = %e, "pair: cannot drop expired tombstones");
            }
            let (updates, upto, lag) = self.state.since(acked, PAGE);
            self.metrics.lag.set(lag.as_secs_f64());
            let sent = updates.len();
            match self.send(updates).await {
                Ok(ack) => {
                    self.metrics.up.set(1);
                    if peer_epoch.is_some_and(|e| e != ack.epoch) {
                        // The peer restarted: everything, at once.
                        tracing::info!(
                            peer = self.peer.addr(),
                            "pair: the peer restarted; sending it the whole state"
                        );
                        acked = 0;
                    } else {
                        acked = upto;
                        self.metrics.sent.inc_by(sent as u64);
                    }
                    peer_epoch = Some(ack.epoch);
                    if acked < self.state.seq() {
                        continue;
                    }
                }
                Err(e) => {
                    if self.metrics.up.get() != 0 {
                        tracing::warn!(peer = self.peer.addr(), error = %e, "pair: the peer does not answer the link");
                    }
                    self.metrics.up.set(0);
                }
            }
            tokio::select! {
                _ = self.state.changed.notified() => {}
                _ = tokio::time::sleep(self.interval) => {}
            }
        }
    }

    /// One call: the updates, and the peer's acknowledgement.
    async fn send(&self, updates: Vec<Update>) -> Result<Ack, String> {
        let body = Updates {
            node: self.state.node().as_str().to_string(),
            epoch: self.epoch,
            updates,
        };
        let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let (status, answer) = self
            .peer
            .call_within(self.timeout, Method::POST, "/pair/updates", body)
            .await
            .map_err(|e| e.to_string())?;
        if status != StatusCode::OK {
            return Err(format!(
                "{status}: {}",
                String::from_utf8_lossy(&answer).trim()
            ));
        }
        serde_json::from_slice(&answer).map_err(|e| format!("answer: {e}"))
    }
}

/// A number for this start of the router: its peer tells a restart by it.
pub fn new_epoch() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

/// The pair's effective address and name: `pair.peer`/`pair.node`, else
/// `acme.peer`/`acme.node`.
pub fn effective(
    pair: &super::PairSettings,
    acme: (Option<&str>, Option<Node>),
) -> Option<(String, Node)> {
    let peer = pair.peer.as_deref().or(acme.0)?;
    let node = pair.node.or(acme.1)?;
    Some((peer.to_string(), node))
}
