//! `POST /pair/updates`: the pair's other router's shared-state entries (see
//! [`crate::pair`]), each applied here when it is newer than what is here,
//! through the same steps as the operator's call that made it (the settings
//! store, the splits, the rotate state), then acknowledged with this router's
//! epoch. The token is needed (it is a mutating call). And [`Admin::share`]:
//! what an operator's call put here, recorded for the peer.

use super::*;
use crate::pair::counts::Counts;
use crate::pair::link::{Ack, Updates};
use crate::pair::{Key, Update};
use crate::policy::settings::AppSettings;

/// Largest `/pair/updates` body: a page of entries, each at most an app's
/// settings with its maintenance page.
const MAX_UPDATES_BODY: usize = 4 * 1024 * 1024;

/// Largest `/pair/counts` body: one entry per bucket kept at most (100 000,
/// about 25 bytes each).
const MAX_COUNTS_BODY: usize = 8 * 1024 * 1024;

impl Admin {
    /// An operator's change (`change`: applied to the store that serves it)
    /// and its record for the peer (`key`, `value`) as one turn of the
    /// pair's state (see [`pair_state::Turn`]): an entry from the peer
    /// cannot land between them. A change that cannot be recorded is logged
    /// (it stays in force here; `router check-pair` shows the difference).
    pub(super) fn shared<R, E>(
        &self,
        key: Key,
        value: &impl Serialize,
        change: impl FnOnce() -> Result<R, E>,
    ) -> Result<R, E> {
        let Some(link) = &self.pair else {
            return change();
        };
        let value = serde_json::to_value(value);
        let mut turn = link.state.turn();
        let done = change()?;
        let recorded = value
            .map_err(|e| e.to_string())
            .and_then(|v| turn.local(&key, v).map_err(|e| e.to_string()));
        if let Err(e) = recorded {
            tracing::error!(key = %key.text(), error = %e, "pair: cannot save the change for the peer");
        }
        Ok(done)
    }

    /// `GET /pair/state`: the version of every shared entry here, and the
    /// link's state (values are on `/apps/settings`, `/routes`, `/backends`).
    pub(super) fn pair_state(&self) -> Response<Full<Bytes>> {
        let Some(link) = &self.pair else {
            return text(
                StatusCode::NOT_FOUND,
                "this router has no pair (pair.peer)\n",
            );
        };
        let versions: BTreeMap<String, u64> = link
            .state
            .all()
            .into_iter()
            .map(|(key, (_, version))| (key, version))
            .collect();
        json(&serde_json::json!({
            "node": link.state.node().as_str(),
            "epoch": link.epoch,
            "peer": link.peer.addr(),
            "peer_up": link.metrics.up.get() == 1,
            "lag_seconds": link.metrics.lag.get(),
            "versions": versions,
        }))
    }

    /// The JSON body of a call from the peer (`what` it carries, at most
    /// `limit` bytes, within `limits.header_read_timeout`), or the 4xx.
    async fn peer_body<T: serde::de::DeserializeOwned>(
        &self,
        req: Request<Incoming>,
        limit: usize,
        what: &str,
    ) -> Result<T, Response<Full<Bytes>>> {
        let body = read_limited(req.into_body(), limit, self.body_deadline)
            .await
            .map_err(|status| {
                let mib = limit / (1024 * 1024);
                text(
                    status,
                    &format!("the body is the pair's {what}, under {mib} MiB\n"),
                )
            })?;
        serde_json::from_slice(&body)
            .map_err(|e| text(StatusCode::BAD_REQUEST, &format!("{what}: {e}\n")))
    }

    /// `POST /pair/updates`.
    pub(super) async fn pair_updates(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let Some(link) = &self.pair else {
            return text(
                StatusCode::NOT_FOUND,
                "this router has no pair (pair.peer)\n",
            );
        };
        let updates: Updates = match self.peer_body(req, MAX_UPDATES_BODY, "updates").await {
            Ok(u) => u,
            Err(answer) => return answer,
        };
        if updates.node == link.state.node().as_str() {
            return text(
                StatusCode::CONFLICT,
                "both routers of the pair are named the same (pair.node)\n",
            );
        }
        if let Some(answer) = self.refuse_the_future(link, &updates) {
            return answer;
        }
        let mut applied = 0;
        for update in &updates.updates {
            // One turn from the comparison to the save: an operator's change
            // here lands before or after, never between.
            let mut turn = link.state.turn();
            if !turn.is_newer(update) {
                continue;
            }
            // One that cannot apply here (a version of the router that does
            // not know a setting) does not hold the link up: logged, left for
            // the next full send, shown by `router check-pair`.
            if let Err(e) = self.apply(update) {
                tracing::error!(key = %update.key.text(), error = %e, "pair: the peer's entry cannot apply here");
                continue;
            }
            applied += 1;
            if let Err(e) = turn.remote(update) {
                tracing::error!(key = %update.key.text(), error = %e, "pair: cannot save the peer's entry");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("not saved: {e}\n"),
                );
            }
        }
        link.metrics.received.inc_by(applied as u64);
        if applied > 0 {
            tracing::info!(peer = %updates.node, applied, "pair: the peer's changes applied");
        }
        json(&Ack {
            epoch: link.epoch,
            applied,
        })
    }

    /// The 400 for updates of which one is versioned further ahead of this
    /// router's clock than `pair.max_clock_skew` (none applied, each such entry
    /// counted): a version from the future would win over every write to
    /// come, here and, passed on, on the peer.
    fn refuse_the_future(
        &self,
        link: &crate::pair::link::Link,
        updates: &Updates,
    ) -> Option<Response<Full<Bytes>>> {
        let now = pair_state::now_ms();
        let ahead: Vec<(&Update, Duration)> = updates
            .updates
            .iter()
            .filter_map(|u| Some((u, link.state.ahead(u, now)?)))
            .collect();
        let (first, by) = ahead.first()?;
        link.metrics.refused_future.inc_by(ahead.len() as u64);
        tracing::warn!(
            peer = %updates.node,
            key = %first.key.text(),
            ahead_s = by.as_secs(),
            refused = ahead.len(),
            "pair: the peer's entries are versioned beyond pair.max_clock_skew; none applied"
        );
        Some(text(
            StatusCode::BAD_REQUEST,
            &format!(
                "updates: {} is versioned {} s ahead of this router's clock (beyond pair.max_clock_skew): none applied\n",
                first.key.text(),
                by.as_secs()
            ),
        ))
    }

    /// `POST /pair/counts`: the tokens the peer's clients took from its rate
    /// limits since its last call, taken here too (see [`crate::pair::counts`]).
    pub(super) async fn pair_counts(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if self.pair.is_none() {
            return text(
                StatusCode::NOT_FOUND,
                "this router has no pair (pair.peer)\n",
            );
        }
        let counts: Counts = match self.peer_body(req, MAX_COUNTS_BODY, "counts").await {
            Ok(c) => c,
            Err(answer) => return answer,
        };
        let (entries, bad) = counts.entries();
        for count in &entries {
            self.policies.clients.add_peer(count);
        }
        let (held, bad_held) = counts.held();
        let fresh_for = self
            .pair
            .as_ref()
            .map_or(Duration::ZERO, |l| 3 * l.limit_interval);
        self.policies.clients.set_peer_held(&held, fresh_for);
        let bad = bad + bad_held;
        if bad > 0 {
            tracing::warn!(peer = %counts.node, bad, "pair: unreadable rate-limit counts left out");
        }
        text(StatusCode::OK, "ok\n")
    }

    /// One entry from the peer, applied as the operator's call that made it
    /// would have (without the checks against the table: the peer made them,
    /// and this router's table may not have the app yet).
    fn apply(&self, update: &Update) -> Result<(), String> {
        let value = update.value.clone();
        match &update.key {
            Key::Settings(app) => {
                let settings: Option<AppSettings> =
                    serde_json::from_value(value).map_err(|e| e.to_string())?;
                if let Some(s) = &settings {
                    s.check().map_err(|e| e.to_string())?;
                }
                self.put_settings(app, settings).map_err(|e| e.to_string())
            }
            Key::Split(name) => {
                let weights: Option<BTreeMap<String, u32>> =
                    serde_json::from_value(value).map_err(|e| e.to_string())?;
                let split = match weights {
                    Some(w) => {
                        let split = Split::new(w.clone()).map_err(|e| e.to_string())?;
                        Some((w, Arc::new(split)))
                    }
                    None => None,
                };
                self.put_split(name, split).map_err(|e| e.to_string())
            }
            Key::Paths(name) => {
                let rules: Option<crate::table::paths::PathRules> =
                    serde_json::from_value(value).map_err(|e| e.to_string())?;
                let table = match rules {
                    Some(r) => Some(Arc::new(
                        crate::table::paths::PathTable::new(r).map_err(|e| e.to_string())?,
                    )),
                    None => None,
                };
                self.put_paths(name, table).map_err(|e| e.to_string())
            }
            Key::Rotate(addr) => {
                let out: bool = serde_json::from_value(value).map_err(|e| e.to_string())?;
                self.registry
                    .rotate(addr, out)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        }
    }
}
