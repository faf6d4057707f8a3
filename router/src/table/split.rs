//! Blue/green: one host name shared between apps by weight
//! (`POST /aliases/{alias}/split`), kept in `state_dir/splits.json` so that a split
//! survives restarts until it is removed.
//!
//! A split lives in the route table ([`RouteTable::splits`](super::RouteTable)), so
//! a request sees the split and the apps' members from one table load. Picking is a
//! stride over one counter: every `total` requests go exactly `weight` times to each
//! app, interleaved, with one atomic add and no lock. An app with weight 0, or one not
//! in the table (not announced yet, or removed), takes nothing; its share goes to the
//! others.
//!
//! The file is a [`durable_file::Document`], as the rotate state is: rewritten whole
//! on each change (a handful of entries that change only when an operator acts).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use durable_file::{Document, DocumentError};
use serde::{Deserialize, Serialize};
use spi_consumer::apply::AppKey;

/// At most this many apps share one name, each weight at most [`MAX_WEIGHT`].
pub const MAX_APPS: usize = 16;
pub const MAX_WEIGHT: u32 = 10_000;
/// A prime above any possible total (16 × 10 000): coprime with every total, so the
/// stride visits each slot of a cycle exactly once.
const STRIDE: u64 = 1_000_003;

/// One name's shares.
#[derive(Debug)]
pub struct Split {
    /// Apps with weight > 0, in the order given; weights as given.
    shares: Vec<(AppKey, u32)>,
    /// As the operator wrote it (0 weights included), for `/routes` and the file.
    pub weights: BTreeMap<String, u32>,
    next: AtomicU64,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SplitError {
    #[error("an app is written name-namespace, e.g. myapp-mydomain: {0:?}")]
    BadApp(String),
    #[error("weights are whole numbers from 0 to {MAX_WEIGHT}")]
    BadWeight,
    #[error("at least one weight must be above 0")]
    AllZero,
    #[error("at most {MAX_APPS} apps share a name")]
    TooMany,
}

impl Split {
    /// Builds a split from `{"app-ns": weight}`.
    pub fn new(weights: BTreeMap<String, u32>) -> Result<Split, SplitError> {
        if weights.len() > MAX_APPS {
            return Err(SplitError::TooMany);
        }
        let mut shares = Vec::with_capacity(weights.len());
        for (app, &w) in &weights {
            let key = AppKey::parse(app).ok_or_else(|| SplitError::BadApp(app.clone()))?;
            if w > MAX_WEIGHT {
                return Err(SplitError::BadWeight);
            }
            if w > 0 {
                shares.push((key, w));
            }
        }
        if shares.is_empty() {
            return Err(SplitError::AllZero);
        }
        Ok(Split {
            shares,
            weights,
            next: AtomicU64::new(0),
        })
    }

    /// The apps this split names (for validation against the table).
    pub fn apps(&self) -> impl Iterator<Item = AppKey> + '_ {
        self.weights.keys().filter_map(|a| AppKey::parse(a))
    }

    /// The next app, among those `present` says can serve.
    pub fn pick(&self, present: impl Fn(&AppKey) -> bool) -> Option<&AppKey> {
        let live: u64 = self
            .shares
            .iter()
            .filter(|(k, _)| present(k))
            .map(|(_, w)| u64::from(*w))
            .sum();
        if live == 0 {
            return None;
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut slot = n.wrapping_mul(STRIDE) % live;
        for (k, w) in self.shares.iter().filter(|(k, _)| present(k)) {
            let w = u64::from(*w);
            if slot < w {
                return Some(k);
            }
            slot -= w;
        }
        None
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SplitStoreError {
    #[error(transparent)]
    File(#[from] DocumentError),
    #[error("{path}: {alias}: {source}")]
    Entry {
        path: PathBuf,
        alias: String,
        #[source]
        source: SplitError,
    },
}

/// The file's fields (beside its format number): what an operator set for
/// names, their splits and their path routes (see [`super::paths`]).
#[derive(Serialize, Deserialize, Default, Clone, Debug)]
struct Splits {
    splits: BTreeMap<String, BTreeMap<String, u32>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    paths: BTreeMap<String, super::paths::PathRules>,
}

/// The saved splits.
#[derive(Debug)]
pub struct SplitStore {
    doc: Document<Splits>,
}

impl SplitStore {
    /// In memory only (tests).
    pub fn in_memory() -> SplitStore {
        SplitStore {
            doc: Document::in_memory(),
        }
    }

    /// Loads `state_dir/splits.json` (absent: no split). Every entry is validated.
    pub fn open(state_dir: &Path) -> Result<SplitStore, SplitStoreError> {
        let path = state_dir.join("splits.json");
        let doc: Document<Splits> = Document::open(&path, "splits")?;
        for (alias, w) in &doc.get().splits {
            Split::new(w.clone()).map_err(|source| SplitStoreError::Entry {
                path: path.clone(),
                alias: alias.clone(),
                source,
            })?;
        }
        Ok(SplitStore { doc })
    }

    /// Every saved split, validated when loaded.
    pub fn all(&self) -> BTreeMap<String, BTreeMap<String, u32>> {
        self.doc.get().splits.clone()
    }

    /// Every saved name's path rules (those that no longer check are left out,
    /// logged).
    pub fn paths(&self) -> BTreeMap<String, super::paths::PathRules> {
        self.doc.get().paths.clone()
    }

    /// Saves `rules` for `name` (`None` removes them), durably, before returning.
    pub fn set_paths(
        &self,
        name: &str,
        rules: Option<super::paths::PathRules>,
    ) -> Result<(), SplitStoreError> {
        self.doc.update(|s| {
            match rules {
                Some(r) => s.paths.insert(name.to_string(), r),
                None => s.paths.remove(name),
            };
            true
        })?;
        Ok(())
    }

    /// Saves `weights` for `alias` (`None` removes it), durably, before returning.
    pub fn set(
        &self,
        alias: &str,
        weights: Option<BTreeMap<String, u32>>,
    ) -> Result<(), SplitStoreError> {
        self.doc.update(|s| {
            match weights {
                Some(w) => s.splits.insert(alias.to_string(), w),
                None => s.splits.remove(alias),
            };
            true
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn weights(w: &[(&str, u32)]) -> BTreeMap<String, u32> {
        w.iter().map(|(a, w)| (a.to_string(), *w)).collect()
    }

    #[test]
    fn refuses_bad_input() {
        assert_eq!(
            Split::new(weights(&[("a-b", 0)])).err(),
            Some(SplitError::AllZero)
        );
        assert!(matches!(
            Split::new(weights(&[("nohyphen", 1)])).err(),
            Some(SplitError::BadApp(_))
        ));
        assert!(matches!(
            Split::new(weights(&[("a-b-c", 1)])).err(),
            Some(SplitError::BadApp(_))
        ));
        assert_eq!(
            Split::new(weights(&[("a-b", MAX_WEIGHT + 1)])).err(),
            Some(SplitError::BadWeight)
        );
    }

    #[test]
    fn absent_apps_take_nothing() {
        let s = Split::new(weights(&[("a-ns", 50), ("b-ns", 50)])).expect("split");
        for _ in 0..10 {
            assert_eq!(s.pick(|k| &*k.name == "b").map(|k| &*k.name), Some("b"));
        }
        assert_eq!(s.pick(|_| false), None);
    }

    proptest! {
        /// Over each cycle of `total` picks, every app gets exactly its weight.
        #[test]
        fn every_cycle_is_exact(ws in proptest::collection::vec(0u32..50, 1..6), cycles in 1u32..4) {
            prop_assume!(ws.iter().any(|w| *w > 0));
            let map: BTreeMap<String, u32> =
                ws.iter().enumerate().map(|(i, w)| (format!("app{i}-ns"), *w)).collect();
            let s = Split::new(map.clone()).expect("split");
            let total: u32 = ws.iter().sum();
            let mut got: BTreeMap<String, u32> = BTreeMap::new();
            for _ in 0..total * cycles {
                let k = s.pick(|_| true).expect("pick");
                *got.entry(format!("{k}")).or_default() += 1;
            }
            for (app, w) in map {
                prop_assert_eq!(got.get(&app).copied().unwrap_or(0), w * cycles);
            }
        }
    }

    #[test]
    fn store_survives_reopen() {
        let dir = std::env::temp_dir().join(format!("split-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let s = SplitStore::open(&dir).expect("open");
        s.set(
            "www.example.com",
            Some(weights(&[("a-ns", 90), ("b-ns", 10)])),
        )
        .expect("set");
        s.set("x.example.com", Some(weights(&[("a-ns", 1)])))
            .expect("set");
        s.set("x.example.com", None).expect("remove");
        let again = SplitStore::open(&dir).expect("reopen");
        assert_eq!(again.all().len(), 1);
        assert_eq!(again.all()["www.example.com"]["b-ns"], 10);
        std::fs::write(
            dir.join("splits.json"),
            b"{\"format\":1,\"splits\":{\"w\":{\"bad\":1}}}",
        )
        .expect("write");
        let err = SplitStore::open(&dir).expect_err("bad entry");
        assert!(err.to_string().contains("splits.json"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
