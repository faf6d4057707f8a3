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
//! - **Requests in flight** (`max_connections_per_client`): each call also
//!   names every client's requests in flight here, per app (sent every
//!   interval while there are any, then once with none); the peer counts them
//!   with its own for three intervals, so that a client holds at most the
//!   limit across the pair (within one interval of requests that began or
//!   ended meanwhile). A peer that stops sending is forgotten: each router
//!   then counts its own alone.
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
use crate::policy::clients::{Clients, PeerCount, PeerHeld};
use token_bucket::Rate;

/// `POST /pair/counts`: per app (and its rate), the clients' counts; and
/// every client's requests in flight per app (all of them: a client not
/// named holds none).
#[derive(Serialize, Deserialize)]
pub struct Counts {
    pub node: String,
    pub apps: Vec<AppCounts>,
    #[serde(default)]
    pub held: Vec<AppHeld>,
}

/// One app's clients' requests in flight on the sender.
#[derive(Serialize, Deserialize)]
pub struct AppHeld {
    pub app: String,
    /// `[client key, requests in flight]`.
    pub clients: Vec<(String, u32)>,
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
    /// What `counts` and `held` say, grouped by app.
    pub fn of(node: &str, counts: Vec<PeerCount>, held: Vec<PeerHeld>) -> Counts {
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
        let mut by_app: BTreeMap<String, Vec<(String, u32)>> = BTreeMap::new();
        for h in held {
            by_app
                .entry(h.app.to_string())
                .or_default()
                .push((h.client.to_string(), h.n));
        }
        Counts {
            node: node.to_string(),
            apps: apps.into_values().collect(),
            held: by_app
                .into_iter()
                .map(|(app, clients)| AppHeld { app, clients })
                .collect(),
        }
    }

    /// The requests in flight again, the unreadable entries left out (and
    /// how many).
    pub fn held(&self) -> (Vec<PeerHeld>, usize) {
        let mut out = Vec::new();
        let mut bad = 0;
        for app in &self.held {
            let key = spi_consumer::AppKey::parse(&app.app);
            for (client, n) in &app.clients {
                match (&key, per_source::ClientKey::parse(client)) {
                    (Some(key), Some(client)) => out.push(PeerHeld {
                        app: key.clone(),
                        client,
                        n: *n,
                    }),
                    _ => bad += 1,
                }
            }
        }
        (out, bad)
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
    // Whether the last call named requests in flight: one more call (with
    // none) then tells the peer they ended.
    let mut held_before = false;
    loop {
        tick.tick().await;
        let counts = clients.take_unsent();
        let held = clients.held_now();
        if counts.is_empty() && held.is_empty() && !held_before {
            continue;
        }
        held_before = !held.is_empty();
        let n: u64 = counts.iter().map(|c| u64::from(c.n)).sum();
        let body = Counts::of(link.state.node().as_str(), counts, held);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: u32) -> Vec<PeerCount> {
        let app = spi_consumer::AppKey::parse("shop-prod").expect("app");
        let rule = per_source::KeyRule::default();
        (0..n)
            .map(|i| PeerCount {
                app: app.clone(),
                rate: Rate {
                    per_second: 10.0,
                    burst: 20.0,
                },
                client: rule.key(std::net::IpAddr::from((0x0a00_0000u32 + i).to_be_bytes())),
                n: 1 + i % 7,
            })
            .collect()
    }

    #[test]
    fn counts_travel_whole_and_small() {
        let sent = counts(10_000);
        let body = serde_json::to_vec(&Counts::of("a", sent.clone(), Vec::new())).expect("json");
        // 10 000 active IPv4 client keys in one message: what the link carries
        // each limit_interval at most for them (bench/RESULTS.md, "Issue 50: the
        // pair as one router (state, limit, rotate-out, h2 over the move)").
        let per_key = body.len() as f64 / 10_000.0;
        eprintln!(
            "10 000 client keys: {} bytes, {per_key:.1} per key",
            body.len()
        );
        assert!(per_key < 24.0, "{per_key} bytes a key");
        let back: Counts = serde_json::from_slice(&body).expect("read back");
        let (got, bad) = back.entries();
        assert_eq!(bad, 0);
        assert_eq!(got, sent);
    }

    #[test]
    fn unreadable_counts_are_left_out_not_applied() {
        let mut c = Counts::of("a", counts(2), Vec::new());
        c.apps[0].clients.push(("not an address".into(), 5));
        c.apps.push(AppCounts {
            app: "noapp".into(),
            per_second: 1.0,
            burst: 1.0,
            clients: vec![("10.0.0.1".into(), 1)],
        });
        c.apps.push(AppCounts {
            app: "zero-rate".into(),
            per_second: 0.0,
            burst: 1.0,
            clients: vec![("10.0.0.1".into(), 1)],
        });
        let (got, bad) = c.entries();
        assert_eq!((got.len(), bad), (2, 3));
    }
}
