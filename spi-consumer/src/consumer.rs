//! The delivery discipline shared by every source: decode, apply, persist, publish,
//! and only then let the source acknowledge.
//!
//! A source feeds message bodies to [`Consumer::handle`], which decodes and applies
//! each to the in-memory state and says what became of it ([`Disposition`]). After a
//! batch (one message for a broker, a directory scan for the spool), the source calls
//! [`Consumer::commit`]: the state is saved durably and the changed apps are handed to
//! the [`Publish`] sink. Only when `commit` returned `Ok` may the source acknowledge
//! the batch. If it fails (disk full, I/O error) nothing is acknowledged, the changes
//! stay pending, and the next commit retries them: redelivered messages apply as
//! no-ops, so nothing is lost and nothing doubled.

use std::collections::BTreeSet;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::apply::{AppKey, Applied, RoutingState};
use crate::decode::{DecodeError, Decoded, RoutingEvent, decode};
use crate::metrics::Metrics;
use crate::persist::{Store, StoreError};
use crate::publish::Publish;
use crate::shard::Shard;

/// What became of one message.
#[derive(Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Applied; the state changed.
    Applied,
    /// Applied; nothing changed (a duplicate, or a remove of something unknown).
    Unchanged,
    /// Decoded but deliberately not applied (unknown action, deprecated duplicate).
    Ignored,
    /// For an app another router's shard owns (`spi.shard`): acknowledged, not stored.
    OtherShard,
    /// Cannot be decoded; park it with the reason and acknowledge it.
    DeadLetter(DecodeError),
}

impl Disposition {
    /// A bounded label for metrics and logs. Every disposition is acknowledged once
    /// the batch is committed; dead letters are parked first.
    pub fn label(&self) -> &'static str {
        match self {
            Disposition::Applied => "applied",
            Disposition::Unchanged => "unchanged",
            Disposition::Ignored => "ignored",
            Disposition::OtherShard => "other_shard",
            Disposition::DeadLetter(_) => "dead_letter",
        }
    }
}

/// The routing state, its store, and where changes go.
pub struct Consumer<P> {
    state: RoutingState,
    store: Store,
    publisher: P,
    metrics: Metrics,
    /// Apps changed in memory but not yet durable and published.
    pending: BTreeSet<AppKey>,
    /// Which apps this router stores.
    shard: Shard,
}

impl<P: Publish> Consumer<P> {
    /// Loads the saved state and publishes all of it, so the router serves what it
    /// served before a restart before any source has answered.
    pub fn start(store: Store, publisher: P, metrics: Metrics) -> Result<Self, StoreError> {
        Consumer::start_sharded(store, publisher, metrics, Shard::default())
    }

    /// [`start`](Self::start) for the apps `shard` owns: saved apps it no longer
    /// owns (the rule changed) are dropped, and the drop is saved first.
    pub fn start_sharded(
        mut store: Store,
        mut publisher: P,
        metrics: Metrics,
        shard: Shard,
    ) -> Result<Self, StoreError> {
        let mut state = store.load()?;
        let foreign: BTreeSet<AppKey> = state
            .apps()
            .filter(|(k, _)| !shard.owns(k))
            .map(|(k, _)| k.clone())
            .collect();
        if !foreign.is_empty() {
            for k in &foreign {
                state.remove(k);
            }
            store.save(&state, &foreign)?;
            tracing::warn!(
                apps = foreign.len(),
                "saved apps outside spi.shard dropped (the rule changed)"
            );
        }
        let all: BTreeSet<AppKey> = state.apps().map(|(k, _)| k.clone()).collect();
        publisher.publish(&state, &all);
        tracing::info!(apps = state.len(), dir = %store.dir().display(), "routing state loaded");
        Ok(Consumer {
            state,
            store,
            publisher,
            metrics,
            pending: BTreeSet::new(),
            shard,
        })
    }

    pub fn state(&self) -> &RoutingState {
        &self.state
    }

    /// Decodes and applies one message body to the in-memory state.
    pub fn handle(&mut self, body: &[u8]) -> Disposition {
        self.metrics.last_event.set(unix_now());
        match decode(body) {
            Ok(Decoded::Event(event)) => {
                let d = if self.shard.owns(&AppKey::of(event.app())) {
                    self.apply(&event)
                } else {
                    Disposition::OtherShard
                };
                self.metrics
                    .events
                    .with_label_values(&[event.action(), d.label()])
                    .inc();
                d
            }
            Ok(Decoded::Ignored { action, reason }) => {
                tracing::info!(%action, reason = reason.as_str(), "event ignored");
                // Unknown action names come from the wire: keep the label set bounded.
                let label = match action.as_str() {
                    "add_gear" | "delete_gear" => action.as_str(),
                    _ => "other",
                };
                self.metrics
                    .events
                    .with_label_values(&[label, "ignored"])
                    .inc();
                Disposition::Ignored
            }
            Err(error) => {
                // Never log the body: it may hold private keys.
                tracing::warn!(%error, bytes = body.len(), "undecodable event, dead-lettered");
                self.refuse(error)
            }
        }
    }

    /// Applies an event that did not come from a source (reconcile: what the broker's
    /// REST API says is missing or stale), through the same apply path; counted with
    /// outcome `reconciled`. Like [`handle`](Self::handle), it is durable and
    /// published only at the next [`commit`](Self::commit).
    pub fn apply_event(&mut self, event: &RoutingEvent) -> Disposition {
        let d = if self.shard.owns(&AppKey::of(event.app())) {
            self.apply(event)
        } else {
            Disposition::OtherShard
        };
        self.metrics
            .events
            .with_label_values(&[event.action(), "reconciled"])
            .inc();
        d
    }

    /// A message refused before decoding (e.g. too large), counted as undecodable.
    pub fn refuse(&mut self, error: DecodeError) -> Disposition {
        self.metrics
            .events
            .with_label_values(&["undecodable", "dead_letter"])
            .inc();
        self.metrics.dead_letters.inc();
        Disposition::DeadLetter(error)
    }

    fn apply(&mut self, event: &RoutingEvent) -> Disposition {
        match self.state.apply(event) {
            Applied::Changed(key) => {
                tracing::debug!(action = event.action(), app = %key, "event applied");
                self.pending.insert(key);
                Disposition::Applied
            }
            Applied::Unchanged(why) => {
                tracing::debug!(action = event.action(), app = %AppKey::of(event.app()), why = why.as_str(), "event changed nothing");
                Disposition::Unchanged
            }
        }
    }

    /// Makes every pending change durable, then publishes it. On error nothing is
    /// published, the changes stay pending, and the caller must not acknowledge.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.store.save(&self.state, &self.pending) {
            self.metrics.persist_failures.inc();
            return Err(e);
        }
        self.publisher.publish(&self.state, &self.pending);
        self.pending.clear();
        Ok(())
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
