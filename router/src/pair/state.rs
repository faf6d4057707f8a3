//! The pair's one state: what either router's operator put (an app's own
//! settings, a name's split, a member's rotate state), one versioned entry a
//! key, saved in `state_dir/pair.json` before a change is acknowledged.
//!
//! The entries hold the values as the admin API takes them (JSON), so that
//! the link sends them without knowing them; the stores that serve them
//! (`policy::store`, `table::split`, `members::rotate`) stay as they were, and
//! the admin API applies an entry to them ([`crate::admin`]'s `/pair/updates`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use durable_file::{Document, DocumentError};
use serde::{Deserialize, Serialize};

use super::Node;

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
}

impl Key {
    /// `settings:APP`, `split:NAME`, `rotate:ADDRESS`: the key in the file
    /// and on the link.
    pub fn text(&self) -> String {
        match self {
            Key::Settings(app) => format!("settings:{app}"),
            Key::Split(name) => format!("split:{name}"),
            Key::Rotate(addr) => format!("rotate:{addr}"),
        }
    }

    pub fn parse(text: &str) -> Option<Key> {
        let (kind, name) = text.split_once(':')?;
        let name = name.to_string();
        match kind {
            "settings" => Some(Key::Settings(name)),
            "split" => Some(Key::Split(name)),
            "rotate" => Some(Key::Rotate(name)),
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

/// What the sender needs of an entry: when it changed here.
struct Changed {
    seq: u64,
    at: Instant,
}

/// The state and its change sequence.
pub struct State {
    node: Node,
    doc: Document<Saved>,
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
}

/// Why a change could not be saved.
pub type StateError = DocumentError;

impl State {
    /// Loads `state_dir/pair.json` (absent: nothing shared yet); every entry
    /// is numbered for the first send.
    pub fn open(state_dir: &Path, node: Node) -> Result<State, StateError> {
        let doc = Document::open(&state_dir.join("pair.json"), "pair")?;
        Ok(State::with(doc, node))
    }

    /// In memory only (tests).
    pub fn in_memory(node: Node) -> State {
        State::with(Document::in_memory(), node)
    }

    fn with(doc: Document<Saved>, node: Node) -> State {
        let mut inner = Inner::default();
        let now = Instant::now();
        for (key, stored) in &doc.get().entries {
            inner.clock = inner.clock.max(stored.version);
            inner.seq += 1;
            let seq = inner.seq;
            inner.changed.insert(key.clone(), Changed { seq, at: now });
        }
        State {
            node,
            doc,
            inner: Mutex::new(inner),
            changed: tokio::sync::Notify::new(),
        }
    }

    pub fn node(&self) -> Node {
        self.node
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a change made here (already applied): its version, above every
    /// version seen and now's milliseconds, the node in the lowest bit.
    pub fn local(&self, key: &Key, value: serde_json::Value) -> Result<u64, StateError> {
        let mut inner = self.inner();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // The smallest number at or above both whose lowest bit is the node's.
        let base = (now << 1).max(inner.clock + 1);
        let version = (base & !1) | u64::from(self.node == Node::B);
        let version = if version < base { version + 2 } else { version };
        self.save(&mut inner, key, value, version)?;
        Ok(version)
    }

    /// Whether an entry from the peer is newer than what is here.
    pub fn is_newer(&self, update: &Update) -> bool {
        self.version_of(&update.key)
            .is_none_or(|here| update.version > here)
    }

    /// Records an entry from the peer, applied here because it was newer.
    pub fn remote(&self, update: &Update) -> Result<(), StateError> {
        let mut inner = self.inner();
        self.save(
            &mut inner,
            &update.key,
            update.value.clone(),
            update.version,
        )
    }

    fn save(
        &self,
        inner: &mut Inner,
        key: &Key,
        value: serde_json::Value,
        version: u64,
    ) -> Result<(), StateError> {
        let text = key.text();
        self.doc.update(|s| {
            s.entries.insert(text.clone(), Stored { value, version });
            true
        })?;
        inner.clock = inner.clock.max(version);
        inner.seq += 1;
        let seq = inner.seq;
        inner.changed.insert(
            text,
            Changed {
                seq,
                at: Instant::now(),
            },
        );
        self.changed.notify_one();
        Ok(())
    }

    /// The version of `key` here, if it was ever put.
    pub fn version_of(&self, key: &Key) -> Option<u64> {
        self.doc.get().entries.get(&key.text()).map(|s| s.version)
    }

    /// The entries changed after `acked` (at most `limit`, oldest first), the
    /// sequence number the last of them had, and how long the oldest waited.
    pub fn since(&self, acked: u64, limit: usize) -> (Vec<Update>, u64, std::time::Duration) {
        let inner = self.inner();
        let mut pending: Vec<(&String, &Changed)> = inner
            .changed
            .iter()
            .filter(|(_, c)| c.seq > acked)
            .collect();
        pending.sort_by_key(|(_, c)| c.seq);
        let lag = pending
            .first()
            .map_or(std::time::Duration::ZERO, |(_, c)| c.at.elapsed());
        pending.truncate(limit);
        let upto = pending.last().map_or(acked, |(_, c)| c.seq);
        let doc = self.doc.get();
        let updates = pending
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
        self.inner().seq
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

    #[test]
    fn the_later_write_wins_and_an_older_one_never_rolls_it_back() {
        let a = State::in_memory(Node::A);
        let b = State::in_memory(Node::B);
        let key = Key::Settings("app-ns".into());
        let v1 = a.local(&key, serde_json::json!({"h2": true})).expect("a");
        let first = update("settings:app-ns", serde_json::json!({"h2": true}), v1);
        assert!(b.is_newer(&first));
        b.remote(&first).expect("b");
        // b's own later write is above what it saw, whatever the clocks say.
        let v2 = b.local(&key, serde_json::Value::Null).expect("b");
        assert!(v2 > v1, "{v2} > {v1}");
        assert_eq!(v2 & 1, 1, "b's versions end in 1");
        // a's old entry sent again (a came back) does not apply on b.
        assert!(!b.is_newer(&first));
        let second = update("settings:app-ns", serde_json::Value::Null, v2);
        assert!(a.is_newer(&second));
        a.remote(&second).expect("a");
        // a's next write is above b's.
        let v3 = a.local(&key, serde_json::json!({})).expect("a");
        assert!(v3 > v2 && v3 & 1 == 0);
    }

    #[test]
    fn since_sends_what_was_not_acknowledged_oldest_first() {
        let a = State::in_memory(Node::A);
        for name in ["x-ns", "y-ns", "z-ns"] {
            a.local(&Key::Settings(name.into()), serde_json::json!({}))
                .expect("a");
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
        a.local(
            &Key::Settings("x-ns".into()),
            serde_json::json!({"h2": true}),
        )
        .expect("a");
        let (again, _, _) = a.since(3, 10);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].value, serde_json::json!({"h2": true}));
    }

    #[test]
    fn keys_round_trip_and_unknown_kinds_are_refused() {
        for k in [
            Key::Settings("a-b".into()),
            Key::Split("www.example.com".into()),
            Key::Rotate("10.0.0.1:8080".into()),
        ] {
            assert_eq!(Key::parse(&k.text()), Some(k));
        }
        assert_eq!(Key::parse("other:x"), None);
        assert_eq!(Key::parse("nocolon"), None);
    }
}
