//! The pair's one state: what either router's operator put (an app's own
//! settings, a name's split, a member's rotate state), one versioned entry a
//! key, saved in `state_dir/pair.json` before a change is acknowledged.
//!
//! The entries hold the values as the admin API takes them (JSON), so that
//! the link sends them without knowing them; the stores that serve them
//! (`policy::store`, `table::split`, `members::rotate`) stay as they were, and
//! the admin API applies an entry to them (the router's admin API, `/pair/updates`).
//!
//! Every write goes through a [`Turn`]: an operator's change (applied, then
//! versioned and saved) and an entry from the peer (compared, applied, saved)
//! each hold it from the first step to the last, so neither lands between
//! the other's steps: what is in force, what `pair.json` holds and what the
//! peer is sent are the same value, the one with the highest version.
//!
//! Versions carry milliseconds since the epoch (shifted left by one, the node
//! in the lowest bit), so they are bounded by the clock: an entry from the
//! peer more than `pair.max_clock_skew` ahead of this router's clock is
//! refused ([`State::ahead`]); one found in `pair.json` at start (written
//! before the bound existed) is versioned anew, here and now. A deletion (a
//! setting or split removed, a member rotated back in) is kept as a tombstone
//! for `pair.tombstone_ttl`, so a peer that was away learns of it, then
//! dropped from the file.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use durable_file::{Document, DocumentError};
use serde::{Deserialize, Serialize};

/// What an entry is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// An app's own settings (`/apps/{app}/settings`); `null` deletes them.
    Settings(String),
    /// A name's blue/green split (`/aliases/{name}/split`); `null` removes it.
    Split(String),
    /// A member's rotate state (`/backends/{address:port}/rotate-out|in`):
    /// `true` for out.
    Rotate(String),
    /// A name's path routes (`/aliases/{name}/paths`); `null` removes them.
    Paths(String),
}

impl Key {
    /// `settings:APP`, `split:NAME`, `rotate:ADDRESS`: the key in the file
    /// and on the link.
    pub fn text(&self) -> String {
        match self {
            Key::Settings(app) => format!("settings:{app}"),
            Key::Split(name) => format!("split:{name}"),
            Key::Rotate(addr) => format!("rotate:{addr}"),
            Key::Paths(name) => format!("paths:{name}"),
        }
    }

    pub fn parse(text: &str) -> Option<Key> {
        let (kind, name) = text.split_once(':')?;
        let name = name.to_string();
        match kind {
            "settings" => Some(Key::Settings(name)),
            "split" => Some(Key::Split(name)),
            "rotate" => Some(Key::Rotate(name)),
            "paths" => Some(Key::Paths(name)),
            _ => None,
        }
    }
}

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text())
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        let text = String::deserialize(d)?;
        Key::parse(&text).ok_or_else(|| serde::de::Error::custom(format!("no such key: {text}")))
    }
}

/// One entry as the link carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Update {
    pub key: Key,
    pub value: serde_json::Value,
    pub version: u64,
}

impl Update {
    /// A deletion: a setting or split removed (`null`), a member rotated back
    /// in (`false`, the state a member has without an entry).
    fn is_tombstone(key: &str, value: &serde_json::Value) -> bool {
        value.is_null() || (key.starts_with("rotate:") && *value == serde_json::Value::Bool(false))
    }
}

/// `state_dir/pair.json`.
#[derive(Clone, Default, Serialize, Deserialize)]
struct Saved {
    entries: BTreeMap<String, Stored>,
}

#[derive(Clone, Serialize, Deserialize)]
struct Stored {
    value: serde_json::Value,
    version: u64,
}

/// What the sender needs of an entry: when it changed here, and whether the
/// peer sent it (then the peer has it: it is not sent back, but for a whole
/// send to a peer that restarted).
struct Changed {
    seq: u64,
    at: Instant,
    from_peer: bool,
}

/// How far the state trusts versions and keeps deletions (`pair.*`).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// `pair.max_clock_skew`: an entry from the peer versioned further ahead
    /// of this router's clock is refused.
    pub max_ahead: Duration,
    /// `pair.tombstone_ttl`: how long a deletion is kept for a peer that was
    /// away.
    pub tombstone_ttl: Duration,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            max_ahead: Duration::from_secs(300),
            tombstone_ttl: Duration::from_secs(14 * 24 * 3600),
        }
    }
}

/// The state and its change sequence.
pub struct State {
    node: Node,
    doc: Document<Saved>,
    bounds: Bounds,
    inner: Mutex<Inner>,
    /// Told on every change (the link sends at once).
    pub changed: tokio::sync::Notify,
}

#[derive(Default)]
struct Inner {
    /// The highest version seen, here or from the peer.
    clock: u64,
    /// The last change's sequence number.
    seq: u64,
    changed: BTreeMap<String, Changed>,
    /// When tombstones were last dropped.
    pruned: Option<Instant>,
}

/// Why a change could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Save(#[from] DocumentError),
    /// No version is left above the highest seen (only a clock near the end
    /// of `u64` milliseconds gets here).
    #[error("no version left above {0}: the pair's clock is exhausted")]
    Exhausted(u64),
}

/// One turn at the shared state, held from an entry's comparison through its
/// apply to its save (see the module doc): an operator's change and an entry
/// from the peer take turns, never interleave.
pub struct Turn<'a> {
    state: &'a State,
    inner: MutexGuard<'a, Inner>,
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The smallest version at or above both `now_ms` (shifted) and one above
/// `clock` whose lowest bit is `node`'s; `None` past `u64`.
fn next_version(clock: u64, now_ms: u64, node: Node) -> Option<u64> {
    let base = now_ms.checked_mul(2)?.max(clock.checked_add(1)?);
    let version = (base & !1) | u64::from(node == Node::B);
    if version < base {
        version.checked_add(2)
    } else {
        Some(version)
    }
}

/// The milliseconds a version carries.
fn millis(version: u64) -> u64 {
    version >> 1
}

impl State {
    /// Loads `state_dir/pair.json` (absent: nothing shared yet); every entry
    /// is numbered for the first send; entries versioned beyond the bound are
    /// versioned anew and expired tombstones dropped.
    pub fn open(state_dir: &Path, node: Node, bounds: Bounds) -> Result<State, StateError> {
        let doc = Document::open(&state_dir.join("pair.json"), "pair")?;
        State::with(doc, node, bounds)
    }

    /// In memory only (tests).
    pub fn in_memory(node: Node) -> State {
        match State::with(Document::in_memory(), node, Bounds::default()) {
            Ok(state) => state,
            Err(_) => unreachable!("an empty state in memory saves nothing"),
        }
    }

    fn with(doc: Document<Saved>, node: Node, bounds: Bounds) -> Result<State, StateError> {
        let state = State {
            node,
            doc,
            bounds,
            inner: Mutex::new(Inner::default()),
            changed: tokio::sync::Notify::new(),
        };
        let now = now_ms();
        let limit = now.saturating_add(bounds.max_ahead.as_millis() as u64);
        let entries = state.doc.get().entries.clone();
        let mut turn = state.turn();
        let mut poisoned = Vec::new();
        for (key, stored) in entries {
            if millis(stored.version) > limit {
                poisoned.push((key, stored.value));
                continue;
            }
            turn.inner.clock = turn.inner.clock.max(stored.version);
            turn.number(key, false);
        }
        for (key, value) in poisoned {
            tracing::warn!(
                key,
                "pair: an entry versioned beyond pair.max_clock_skew is versioned anew"
            );
            let Some(parsed) = Key::parse(&key) else {
                continue;
            };
            turn.local(&parsed, value)?;
        }
        turn.prune(now)?;
        drop(turn);
        Ok(state)
    }

    pub fn node(&self) -> Node {
        self.node
    }

    /// Waits for the state's turn (see [`Turn`]).
    pub fn turn(&self) -> Turn<'_> {
        Turn {
            state: self,
            inner: self.inner.lock().unwrap_or_else(|p| p.into_inner()),
        }
    }

    /// How far beyond `pair.max_clock_skew` an entry from the peer is versioned
    /// ahead of `now_ms`, if it is.
    pub fn ahead(&self, update: &Update, now_ms: u64) -> Option<Duration> {
        let limit = now_ms.saturating_add(self.bounds.max_ahead.as_millis() as u64);
        let at = millis(update.version);
        (at > limit).then(|| Duration::from_millis(at - now_ms))
    }

    /// The version of `key` here, if it was ever put.
    pub fn version_of(&self, key: &Key) -> Option<u64> {
        self.doc.get().entries.get(&key.text()).map(|s| s.version)
    }

    /// Drops tombstones older than `pair.tombstone_ttl`, at most once a minute.
    pub fn prune_due(&self) -> Result<(), StateError> {
        let mut turn = self.turn();
        if turn
            .inner
            .pruned
            .is_some_and(|at| at.elapsed() < Duration::from_secs(60))
        {
            return Ok(());
        }
        turn.prune(now_ms())
    }

    /// The entries changed after `acked` (at most `limit`, oldest first), the
    /// sequence number the last of them had, and how long the oldest waited.
    /// `acked` 0 is a whole send: the peer's own entries too; otherwise an
    /// entry the peer sent is not sent back.
    pub fn since(&self, acked: u64, limit: usize) -> (Vec<Update>, u64, Duration) {
        let inner = self.turn().inner;
        let whole = acked == 0;
        let mut pending: Vec<(&String, &Changed)> = inner
            .changed
            .iter()
            .filter(|(_, c)| c.seq > acked)
            .collect();
        pending.sort_by_key(|(_, c)| c.seq);
        let mut upto = acked;
        let mut picked = Vec::new();
        for (text, c) in pending {
            if picked.len() == limit {
                break;
            }
            upto = c.seq;
            if whole || !c.from_peer {
                picked.push((text, c.at));
            }
        }
        let lag = picked
            .first()
            .map_or(Duration::ZERO, |(_, at)| at.elapsed());
        let doc = self.doc.get();
        let updates = picked
            .iter()
            .filter_map(|(text, _)| {
                let stored = doc.entries.get(*text)?;
                Some(Update {
                    key: Key::parse(text)?,
                    value: stored.value.clone(),
                    version: stored.version,
                })
            })
            .collect();
        (updates, upto, lag)
    }

    /// The last change's sequence number.
    pub fn seq(&self) -> u64 {
        self.turn().inner.seq
    }

    /// Every entry (what `router check-pair` compares).
    pub fn all(&self) -> BTreeMap<String, (serde_json::Value, u64)> {
        self.doc
            .get()
            .entries
            .iter()
            .map(|(k, s)| (k.clone(), (s.value.clone(), s.version)))
            .collect()
    }
}

impl Turn<'_> {
    /// Records a change made here in this turn (already applied): its
    /// version, above every version seen and now's milliseconds, the node in
    /// the lowest bit.
    pub fn local(&mut self, key: &Key, value: serde_json::Value) -> Result<u64, StateError> {
        let clock = self.inner.clock;
        let version =
            next_version(clock, now_ms(), self.state.node).ok_or(StateError::Exhausted(clock))?;
        self.save(key, value, version, false)?;
        Ok(version)
    }

    /// Whether an entry from the peer is newer than what is here.
    pub fn is_newer(&self, update: &Update) -> bool {
        self.state
            .version_of(&update.key)
            .is_none_or(|here| update.version > here)
    }

    /// Records an entry from the peer, applied here in this turn because it
    /// was newer.
    pub fn remote(&mut self, update: &Update) -> Result<(), StateError> {
        self.save(&update.key, update.value.clone(), update.version, true)
    }

    fn save(
        &mut self,
        key: &Key,
        value: serde_json::Value,
        version: u64,
        from_peer: bool,
    ) -> Result<(), StateError> {
        let text = key.text();
        self.state.doc.update(|s| {
            s.entries.insert(text.clone(), Stored { value, version });
            true
        })?;
        self.inner.clock = self.inner.clock.max(version);
        self.number(text, from_peer);
        self.state.changed.notify_one();
        Ok(())
    }

    /// Gives `key` the next sequence number (it is sent next).
    fn number(&mut self, key: String, from_peer: bool) {
        self.inner.seq += 1;
        let seq = self.inner.seq;
        let at = Instant::now();
        self.inner
            .changed
            .insert(key, Changed { seq, at, from_peer });
    }

    /// Drops tombstones versioned more than `pair.tombstone_ttl` before
    /// `now_ms`.
    fn prune(&mut self, now_ms: u64) -> Result<(), StateError> {
        self.inner.pruned = Some(Instant::now());
        let ttl = self.state.bounds.tombstone_ttl.as_millis() as u64;
        let oldest = now_ms.saturating_sub(ttl);
        let expired = |key: &String, s: &Stored| {
            Update::is_tombstone(key, &s.value) && millis(s.version) < oldest
        };
        let gone: Vec<String> = {
            let doc = self.state.doc.get();
            doc.entries
                .iter()
                .filter(|(k, s)| expired(k, s))
                .map(|(k, _)| k.clone())
                .collect()
        };
        if gone.is_empty() {
            return Ok(());
        }
        self.state.doc.update(|s| {
            s.entries.retain(|k, stored| !expired(k, stored));
            true
        })?;
        for key in &gone {
            self.inner.changed.remove(key);
        }
        tracing::info!(
            dropped = gone.len(),
            "pair: tombstones older than pair.tombstone_ttl dropped"
        );
        Ok(())
    }
}

/// A router's name in its pair (`pair.node`, `acme.node`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Node {
    #[serde(rename = "a")]
    A,
    #[serde(rename = "b")]
    B,
}

impl Node {
    pub fn as_str(self) -> &'static str {
        match self {
            Node::A => "a",
            Node::B => "b",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(key: &str, value: serde_json::Value, version: u64) -> Update {
        Update {
            key: Key::parse(key).expect("key"),
            value,
            version,
        }
    }

    fn local(state: &State, key: &Key, value: serde_json::Value) -> u64 {
        state.turn().local(key, value).expect("saved")
    }

    #[test]
    fn the_later_write_wins_and_an_older_one_never_rolls_it_back() {
        let a = State::in_memory(Node::A);
        let b = State::in_memory(Node::B);
        let key = Key::Settings("app-ns".into());
        let v1 = local(&a, &key, serde_json::json!({"h2": true}));
        let first = update("settings:app-ns", serde_json::json!({"h2": true}), v1);
        assert!(b.turn().is_newer(&first));
        b.turn().remote(&first).expect("b");
        // b's own later write is above what it saw, whatever the clocks say.
        let v2 = local(&b, &key, serde_json::Value::Null);
        assert!(v2 > v1, "{v2} > {v1}");
        assert_eq!(v2 & 1, 1, "b's versions end in 1");
        // a's old entry sent again (a came back) does not apply on b.
        assert!(!b.turn().is_newer(&first));
        let second = update("settings:app-ns", serde_json::Value::Null, v2);
        assert!(a.turn().is_newer(&second));
        a.turn().remote(&second).expect("a");
        // a's next write is above b's.
        let v3 = local(&a, &key, serde_json::json!({}));
        assert!(v3 > v2 && v3 & 1 == 0);
    }

    #[test]
    fn since_sends_what_was_not_acknowledged_oldest_first() {
        let a = State::in_memory(Node::A);
        for name in ["x-ns", "y-ns", "z-ns"] {
            local(&a, &Key::Settings(name.into()), serde_json::json!({}));
        }
        let (all, upto, _) = a.since(0, 10);
        assert_eq!(all.len(), 3);
        assert_eq!(upto, 3);
        let (page, upto, _) = a.since(0, 2);
        assert_eq!(page.len(), 2);
        let (rest, last, _) = a.since(upto, 10);
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].key, Key::Settings("z-ns".into()));
        assert_eq!(last, 3);
        // A key written again is sent once, as it is now.
        local(
            &a,
            &Key::Settings("x-ns".into()),
            serde_json::json!({"h2": true}),
        );
        let (again, _, _) = a.since(3, 10);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].value, serde_json::json!({"h2": true}));
    }

    #[test]
    fn an_entry_from_the_peer_is_not_sent_back_but_for_a_whole_send() {
        let a = State::in_memory(Node::A);
        local(&a, &Key::Settings("mine-ns".into()), serde_json::json!({}));
        let (_, acked, _) = a.since(0, 10);
        let theirs = update("settings:theirs-ns", serde_json::json!({}), 10);
        a.turn().remote(&theirs).expect("a");
        let (echo, upto, _) = a.since(acked, 10);
        assert!(echo.is_empty(), "echoed: {echo:?}");
        assert_eq!(upto, a.seq(), "the skipped entry is acknowledged");
        let (whole, _, _) = a.since(0, 10);
        assert_eq!(whole.len(), 2, "a whole send carries both");
    }

    #[test]
    fn versions_from_beyond_the_clock_bound_are_told_apart() {
        let a = State::in_memory(Node::A);
        let now = now_ms();
        let at = |ms: u64| update("settings:x-ns", serde_json::json!({}), ms << 1);
        assert_eq!(a.ahead(&at(now), now), None);
        assert_eq!(a.ahead(&at(now + 299_000), now), None, "within 5 minutes");
        let ten_years = now + 10 * 365 * 24 * 3600 * 1000;
        assert!(a.ahead(&at(ten_years), now).is_some());
        for version in [1u64 << 63, u64::MAX] {
            let u = update("settings:x-ns", serde_json::json!({}), version);
            assert!(a.ahead(&u, now).is_some(), "{version} refused");
        }
    }

    #[test]
    fn the_next_version_never_overflows() {
        assert_eq!(next_version(u64::MAX, 0, Node::A), None);
        assert_eq!(next_version(u64::MAX - 1, 0, Node::A), None);
        assert_eq!(next_version(u64::MAX - 1, 0, Node::B), Some(u64::MAX));
        assert_eq!(next_version(u64::MAX, u64::MAX, Node::B), None);
        assert_eq!(next_version(10, 0, Node::A), Some(12));
        assert_eq!(next_version(10, 0, Node::B), Some(11));
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pair-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn a_poisoned_file_is_versioned_anew_and_old_tombstones_dropped() {
        let dir = temp_dir("poisoned");
        let now = now_ms();
        let day = 24 * 3600 * 1000;
        let file = serde_json::json!({"format": 1, "entries": {
            "settings:future-ns": {"value": {"h2": true}, "version": u64::MAX},
            "split:old.example.com": {"value": null, "version": (now - 30 * day) << 1},
            "rotate:10.0.0.1:80": {"value": false, "version": (now - 30 * day) << 1},
            "rotate:10.0.0.2:80": {"value": true, "version": (now - 30 * day) << 1},
            "split:new.example.com": {"value": null, "version": (now - day) << 1},
        }});
        std::fs::write(dir.join("pair.json"), file.to_string()).expect("write");
        let a = State::open(&dir, Node::A, Bounds::default()).expect("open");
        let all = a.all();
        let (value, version) = &all["settings:future-ns"];
        assert_eq!(value, &serde_json::json!({"h2": true}), "kept");
        assert!(
            a.ahead(
                &update("settings:future-ns", value.clone(), *version),
                now_ms()
            )
            .is_none(),
            "versioned anew: {version}"
        );
        assert!(
            !all.contains_key("split:old.example.com"),
            "an old tombstone dropped"
        );
        assert!(
            !all.contains_key("rotate:10.0.0.1:80"),
            "an old rotate-in dropped"
        );
        assert!(
            all.contains_key("rotate:10.0.0.2:80"),
            "a rotate-out is no tombstone"
        );
        assert!(
            all.contains_key("split:new.example.com"),
            "a recent tombstone is kept"
        );
        // And saved so: a restart finds the same.
        drop(a);
        let again = State::open(&dir, Node::A, Bounds::default()).expect("reopen");
        assert_eq!(again.all(), all);
        let next = local(&again, &Key::Settings("x-ns".into()), serde_json::json!({}));
        assert!(next < u64::MAX / 2, "{next}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A router of the model below: its state and what is in force.
    struct Router {
        state: State,
        live: Mutex<BTreeMap<String, serde_json::Value>>,
    }

    impl Router {
        fn new(node: Node) -> Router {
            Router {
                state: State::in_memory(node),
                live: Mutex::new(BTreeMap::new()),
            }
        }

        /// As `Admin::shared`: applied, then versioned, in one turn.
        fn operator(&self, key: &Key, value: serde_json::Value) {
            let mut turn = self.state.turn();
            self.live
                .lock()
                .expect("live")
                .insert(key.text(), value.clone());
            turn.local(key, value).expect("saved");
        }

        /// As `Admin::pair_updates`: compared, applied, saved, in one turn.
        fn receive(&self, updates: &[Update]) {
            for u in updates {
                let mut turn = self.state.turn();
                if !turn.is_newer(u) {
                    continue;
                }
                self.live
                    .lock()
                    .expect("live")
                    .insert(u.key.text(), u.value.clone());
                turn.remote(u).expect("saved");
            }
        }

        /// One call of the link to `to`, from `acked`; the new acknowledgement.
        fn send(&self, to: &Router, acked: u64) -> u64 {
            let (updates, upto, _) = self.state.since(acked, 8);
            to.receive(&updates);
            upto
        }

        fn saved(&self) -> BTreeMap<String, serde_json::Value> {
            self.state
                .all()
                .into_iter()
                .map(|(k, (v, _))| (k, v))
                .collect()
        }

        /// What is saved, read in `_turn`.
        fn saved_in(&self, _turn: &Turn<'_>) -> BTreeMap<String, serde_json::Value> {
            self.saved()
        }
    }

    #[test]
    fn operator_writes_interleaved_with_the_peers_entries_leave_both_agreeing() {
        let routers = [Router::new(Node::A), Router::new(Node::B)];
        let keys = [
            Key::Settings("one-ns".into()),
            Key::Split("two.example.com".into()),
        ];
        let writes = 3000;
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let stop = &stop;
            for (from, to) in [(0, 1), (1, 0)] {
                let routers = &routers;
                s.spawn(move || {
                    let mut acked = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        acked = routers[from].send(&routers[to], acked);
                    }
                });
            }
            // Between turns, what is in force and what is saved agree.
            let checker = s.spawn(|| {
                let mut checks = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for r in &routers {
                        let turn = r.state.turn();
                        let live = r.live.lock().expect("live").clone();
                        let saved = r.saved_in(&turn);
                        if live != saved {
                            return Err(format!(
                                "between turns, {live:?} in force, {saved:?} saved"
                            ));
                        }
                        checks += 1;
                    }
                }
                Ok(checks)
            });
            let writers: Vec<_> = routers
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let keys = &keys;
                    s.spawn(move || {
                        for n in 0..writes {
                            r.operator(&keys[n % 2], serde_json::json!({"by": i, "n": n}));
                            // Room for the links' turns between writes.
                            std::thread::yield_now();
                        }
                    })
                })
                .collect();
            for w in writers {
                w.join().expect("writer");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let checks = checker.join().expect("checker");
            assert!(checks.as_ref().is_ok_and(|n| *n > 0), "{checks:?}");
        });
        // Each router saved what it put in force, before the links settle.
        for r in &routers {
            let live = r.live.lock().expect("live").clone();
            assert_eq!(
                r.saved(),
                live,
                "router {} saved what is in force",
                r.state.node().as_str()
            );
        }
        // The links settle (each side sends what the other has not acknowledged).
        for _ in 0..2 {
            routers[0].send(&routers[1], 0);
            routers[1].send(&routers[0], 0);
        }
        let [a, b] = &routers;
        let live_a = a.live.lock().expect("live").clone();
        let live_b = b.live.lock().expect("live").clone();
        assert_eq!(live_a, live_b, "both routers have the same in force");
        assert_eq!(a.saved(), live_a, "a saved what is in force there");
        assert_eq!(b.saved(), live_b, "b saved what is in force there");
        assert_eq!(a.state.all(), b.state.all(), "the same versions");
    }

    #[test]
    fn keys_round_trip_and_unknown_kinds_are_refused() {
        for k in [
            Key::Settings("a-b".into()),
            Key::Split("www.example.com".into()),
            Key::Rotate("10.0.0.1:8080".into()),
            Key::Paths("www.example.com".into()),
        ] {
            assert_eq!(Key::parse(&k.text()), Some(k));
        }
        assert_eq!(Key::parse("other:x"), None);
        assert_eq!(Key::parse("nocolon"), None);
    }
}
