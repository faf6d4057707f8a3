//! The live cluster table: for each cluster port, the host ports of this host that
//! serve it, each with its `maxConn` and the count of connections open to it.
//!
//! Counts survive reloads (the JS proxy reset them every 5 s): they live in
//! `Counters`, keyed by `(clusterPort, hostPort)`, and a new table takes the same
//! counter for the same key. A counter lives while a table item or an open
//! connection holds it, so a removed mapping's connections still count down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::files::Item;
use crate::proxy_protocol::Version;

/// One host port serving a cluster port.
#[derive(Debug, Clone)]
pub struct Target {
    pub host_port: u16,
    pub max_conn: u32,
    pub send_proxy: Option<Version>,
    pub active: Arc<AtomicU32>,
}

/// A connection slot on a target; frees itself on drop (every close path).
#[derive(Debug)]
pub struct TargetSlot(Arc<AtomicU32>);

impl Drop for TargetSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Target {
    /// Takes a slot unless `max_conn` are taken (checked and taken in one step, so
    /// two connections racing for the last slot cannot both win).
    pub fn try_take(&self) -> Option<TargetSlot> {
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_conn).then_some(n + 1)
            })
            .ok()
            .map(|_| TargetSlot(self.active.clone()))
    }
}

/// The registry of counters that outlives tables.
#[derive(Default)]
pub struct Counters {
    map: Mutex<HashMap<(u16, u16), Weak<AtomicU32>>>,
}

impl Counters {
    fn get(&self, key: (u16, u16)) -> Arc<AtomicU32> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = map.get(&key).and_then(Weak::upgrade) {
            return c;
        }
        let c = Arc::new(AtomicU32::new(0));
        map.insert(key, Arc::downgrade(&c));
        c
    }

    /// Forgets counters nothing holds any more.
    fn prune(&self) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
    }
}

/// Cluster port → its targets on this host.
#[derive(Debug, Default)]
pub struct ClusterTable {
    by_port: HashMap<u16, Vec<Target>>,
    items: usize,
}

impl ClusterTable {
    pub fn build(items: &[Item], counters: &Counters) -> ClusterTable {
        let mut by_port: HashMap<u16, Vec<Target>> = HashMap::new();
        for it in items {
            by_port.entry(it.cluster_port).or_default().push(Target {
                host_port: it.host_port,
                max_conn: it.max_conn,
                send_proxy: it.send_proxy,
                active: counters.get((it.cluster_port, it.host_port)),
            });
        }
        let t = ClusterTable {
            by_port,
            items: items.len(),
        };
        counters.prune();
        t
    }

    pub fn targets(&self, cluster_port: u16) -> &[Target] {
        self.by_port
            .get(&cluster_port)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    pub fn items(&self) -> usize {
        self.items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(c: u16, h: u16, m: u32) -> Item {
        Item {
            cluster_port: c,
            host_port: h,
            max_conn: m,
            send_proxy: None,
        }
    }

    #[test]
    fn max_conn_holds_and_counts_survive_a_rebuild() {
        let counters = Counters::default();
        let t1 = ClusterTable::build(&[item(61000, 30000, 1)], &counters);
        let slot = t1.targets(61000)[0].try_take().expect("first");
        assert!(t1.targets(61000)[0].try_take().is_none(), "maxConn 1");
        // A reload builds a new table: the open connection still counts.
        let t2 = ClusterTable::build(&[item(61000, 30000, 1), item(61001, 30001, 5)], &counters);
        drop(t1);
        assert!(
            t2.targets(61000)[0].try_take().is_none(),
            "count kept across the reload"
        );
        drop(slot);
        assert!(
            t2.targets(61000)[0].try_take().is_some(),
            "slot released on close"
        );
        assert!(t2.targets(1).is_empty());
        assert_eq!(t2.items(), 2);
    }
}
