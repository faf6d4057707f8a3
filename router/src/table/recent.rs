//! The last route-table changes, for the status page: when, and which apps.

use serde::Serialize;

use crate::ring::{Ring, unix_now};

/// How many changes are kept, and how many app names per change.
const KEPT: usize = 50;
const NAMES: usize = 8;

#[derive(Clone, Debug, Serialize)]
pub struct Change {
    /// Seconds since the Unix epoch.
    pub at: u64,
    /// How many apps this table change touched.
    pub apps: usize,
    /// The first of them (`name-namespace`).
    pub names: Vec<String>,
}

#[derive(Debug)]
pub struct Recent {
    changes: Ring<Change>,
}

impl Default for Recent {
    fn default() -> Recent {
        Recent {
            changes: Ring::new(KEPT),
        }
    }
}

impl Recent {
    pub fn record(&self, apps: usize, names: impl Iterator<Item = String>) {
        self.changes.push(Change {
            at: unix_now(),
            apps,
            names: names.take(NAMES).collect(),
        });
    }

    /// Newest first.
    pub fn list(&self) -> Vec<Change> {
        let mut c = self.changes.list();
        c.reverse();
        c
    }
}
