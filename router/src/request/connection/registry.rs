//! A listener's open connections (TCP and TLS): what makes room at
//! `limits.max_connections` ([`Connections::make_room`]: the quietest, else one of
//! the heaviest source) and what wakes each connection's one [`Signal`] when its
//! drain epoch ends or the kill switch turns ([`Connections::wake_all`]), so that
//! a connection waiting for its next request waits on nothing else.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use per_source::ClientKey;

use super::activity::Activity;
use super::lifecycle::Signal;

/// A listener's open connections, for [`Connections::make_room`].
#[derive(Default)]
pub(in crate::request) struct Connections {
    next: u64,
    /// Each connection's activity, its signal and its client source.
    by_id: HashMap<u64, (Arc<Activity>, Arc<Signal>, ClientKey)>,
}

impl Connections {
    /// Has every connection look at its drain epoch and the kill switch (one
    /// has turned).
    pub(in crate::request) fn wake_all(&self) {
        for (_, signal, _) in self.by_id.values() {
            signal.wake();
        }
    }

    /// At `limits.max_connections`, with a client from `newcomer` waiting: tells
    /// one connection to close, and says whether it did.
    ///
    /// First the connection quiet the longest (a slowloris head that never ends,
    /// an idle keep-alive). If every connection has a request in flight, one of
    /// the source holding the most connections, if it holds more than the
    /// newcomer's source plus one (slow readers from one place keep their
    /// requests in flight for as long as they like: without this they would hold
    /// the listener against everyone else). Otherwise none: the newcomer waits for
    /// a slot.
    pub(in crate::request) fn make_room(
        &mut self,
        newcomer: ClientKey,
        sources: &per_source::PerSource,
    ) -> bool {
        let quietest = self
            .by_id
            .values()
            .filter_map(|(a, evict, _)| a.idle_since().map(|t| (t, evict)))
            .min_by_key(|(t, _)| *t);
        if let Some((_, evict)) = quietest {
            evict.evict();
            return true;
        }
        let Some((heaviest, holds)) = sources.heaviest() else {
            return false;
        };
        if heaviest == newcomer || holds <= sources.holds(newcomer) + 1 {
            return false;
        }
        match self.by_id.values().find(|(_, _, from)| *from == heaviest) {
            Some((_, evict, _)) => {
                evict.evict();
                true
            }
            None => false,
        }
    }
}

pub(in crate::request) fn lock(c: &Mutex<Connections>) -> std::sync::MutexGuard<'_, Connections> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection's entry in [`Connections`], removed when dropped.
pub(in crate::request) struct Registered {
    id: u64,
    all: Arc<Mutex<Connections>>,
    pub(in crate::request) evict: Arc<Signal>,
}

impl Registered {
    pub(in crate::request) fn new(
        all: &Arc<Mutex<Connections>>,
        activity: Arc<Activity>,
        from: ClientKey,
    ) -> Registered {
        let evict = Arc::new(Signal::default());
        let mut c = lock(all);
        let id = c.next;
        c.next += 1;
        c.by_id.insert(id, (activity, evict.clone(), from));
        Registered {
            id,
            all: all.clone(),
            evict,
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.all).by_id.remove(&self.id);
    }
}
