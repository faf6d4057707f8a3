//! One limit for the pair: each router tells the other, every
//! `pair.limit_interval` (200 ms by default), how many tokens each client took
//! from each app's `rate_limit` bucket here since the last time
//! (`POST /pair/counts`), and takes as many from its own bucket for that
//! client. A client alternating between the routers of an active-active pair
//! is then served its limit once, not once per router.
//!
//! - **Error bound**: what the peer served in the last interval (and the
//!   call's transit) is not counted here yet, so over any time `T` a client is
//!   served at most `rate × (T + interval) + burst` across the pair, against
//!   `2 × (rate × T + burst)` with no sharing. A count the peer never got (the
//!   link down) is lost, not resent: the bound then is the per-router one.
//! - **The peer away**: nothing arrives, each router enforces the whole limit
//!   alone; never zero, never waiting on the peer. The sending runs in its own
//!   task with a deadline of one interval: a request never waits on the link.
//! - **Bounded**: a message holds at most one entry per bucket kept
//!   (`policy::clients::MAX_TRACKED`, 100 000: about 2.5 MB of JSON at most);
//!   one million client keys are still 100 000 buckets (the rest untracked,
//!   as on one router); a debt is at most one burst.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use super::link::Link;
use crate::policy::clients::{Clients, PeerCount};
use crate::token_bucket::Rate;

/// `POST /pair/counts`: per app (and its rate), the clients' counts.
#[derive(Serialize, Deserialize)]
pub struct Counts {
    pub node: String,
    pub apps: Vec<AppCounts>,
}

#[derive(Serialize, Deserialize)]
pub struct AppCounts {
    /// `name-namespace`.
    pub app: String,
    pub per_second: f64,
    pub burst: f64,
    /// `[client key, tokens]`, the key as `per_source::ClientKey` writes it.
    pub clients: Vec<(String, u32)>,
}

impl Counts {
    /// What `counts` says, grouped by app.
    pub fn of(node: &str, counts: Vec<PeerCount>) -> Counts {
        let mut apps: BTreeMap<String, AppCounts> = BTreeMap::new();
        for c in counts {
            let entry = apps.entry(c.app.to_string()).or_insert_with(|| AppCounts {
                app: c.app.to_string(),
                per_second: c.rate.per_second,
                burst: c.rate.burst,
                clients: Vec::new(),
            });
            entry.clients.push((c.client.to_string(), c.n));
        }
        Counts {
            node: node.to_string(),
            apps: apps.into_values().collect(),
        }
    }

    /// The counts again, the unreadable entries left out (and how many).
    pub fn entries(&self) -> (Vec<PeerCount>, usize) {
        let mut out = Vec::new();
        let mut bad = 0;
        for app in &self.apps {
            let rate = Rate {
                per_second: app.per_second,
                burst: app.burst,
            };
            let valid = rate.per_second > 0.0 && rate.burst >= 1.0;
            let key = spi_consumer::AppKey::parse(&app.app).filter(|_| valid);
            for (client, n) in &app.clients {
                match (&key, per_source::ClientKey::parse(client)) {
                    (Some(key), Some(client)) => out.push(PeerCount {
                        app: key.clone(),
                        rate,
                        client,
                        n: *n,
                    }),
                    _ => bad += 1,
                }
            }
        }
        (out, bad)
    }
}

/// Sends this router's counts every `interval` until the task is aborted.
pub async fn run(link: Arc<Link>, clients: Arc<Clients>, interval: Duration) {
    let metrics = &link.metrics;
    clients.share_with_peer();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let counts = clients.take_unsent();
        if counts.is_empty() {
            continue;
        }
        let n: u64 = counts.iter().map(|c| u64::from(c.n)).sum();
        let body = Counts::of(link.state.node().as_str(), counts);
        let Ok(body) = serde_json::to_vec(&body) else {
            continue;
        };
        let len = body.len() as u64;
        match link
            .peer
            .call_within(interval, Method::POST, "/pair/counts", body)
            .await
        {
            Ok((StatusCode::OK, _)) => metrics.count_bytes.inc_by(len),
            _ => metrics.counts_dropped.inc_by(n),
        }
    }
}
