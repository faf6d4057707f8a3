//! The members an operator rotated out (PEP 005's rotate-out/rotate-in), kept in
//! `state_dir/rotated-out.json` so that the choice survives restarts until the
//! opposite call.
//!
//! The file is a [`durable_file::Document`]: rewritten whole on each change (it
//! holds a handful of addresses and changes only when an operator acts).

use std::collections::BTreeSet;
use std::path::Path;

use durable_file::{Document, DocumentError};
use serde::{Deserialize, Serialize};

/// Why the rotate state could not be loaded or saved.
pub type RotateError = DocumentError;

/// The file's fields (beside its format number).
#[derive(Serialize, Deserialize, Default, Clone, Debug)]
struct Rotated {
    rotated_out: BTreeSet<String>,
}

/// The rotated-out set.
#[derive(Debug)]
pub struct RotateStore {
    doc: Document<Rotated>,
}

impl RotateStore {
    /// In memory only (tests).
    pub fn in_memory() -> RotateStore {
        RotateStore {
            doc: Document::in_memory(),
        }
    }

    /// Loads `state_dir/rotated-out.json` (an absent file is an empty set).
    pub fn open(state_dir: &Path) -> Result<RotateStore, RotateError> {
        let doc = Document::open(&state_dir.join("rotated-out.json"), "rotate-state")?;
        Ok(RotateStore { doc })
    }

    pub fn contains(&self, addr: &str) -> bool {
        self.doc.get().rotated_out.contains(addr)
    }

    pub fn all(&self) -> BTreeSet<String> {
        self.doc.get().rotated_out.clone()
    }

    /// Records `addr` as rotated out (`true`) or in, durably, before returning.
    pub fn set(&self, addr: &str, out: bool) -> Result<(), RotateError> {
        self.doc.update(|r| {
            if out {
                r.rotated_out.insert(addr.to_string())
            } else {
                r.rotated_out.remove(addr)
            }
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_reopen_until_rotated_in() {
        let dir = std::env::temp_dir().join(format!("rotate-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let s = RotateStore::open(&dir).expect("open");
        s.set("10.0.0.1:80", true).expect("out");
        s.set("10.0.0.2:80", true).expect("out");
        s.set("10.0.0.2:80", false).expect("in");
        let again = RotateStore::open(&dir).expect("reopen");
        assert!(again.contains("10.0.0.1:80"));
        assert!(!again.contains("10.0.0.2:80"));
        std::fs::write(dir.join("rotated-out.json"), b"{nope").expect("write");
        let err = RotateStore::open(&dir).expect_err("garbage");
        assert!(err.to_string().contains("rotated-out.json"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
