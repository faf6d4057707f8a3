//! The members an operator rotated out (PEP 005's rotate-out/rotate-in), kept in
//! `state_dir/rotated-out.json` so that the choice survives restarts until the
//! opposite call.
//!
//! The file is rewritten whole on each change (through [`durable_file`]: temporary
//! file, fsync, rename, fsync the directory): it holds a handful of addresses and changes only
//! when an operator acts, so simplicity wins over a journal.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a rotate-state file: {source}")]
    Format {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: format {format} is newer than this router")]
    Newer { path: PathBuf, format: u32 },
}

#[derive(Serialize, Deserialize)]
struct File {
    format: u32,
    rotated_out: BTreeSet<String>,
}

/// The rotated-out set; `path` is `None` for an in-memory set (tests).
#[derive(Debug)]
pub struct RotateStore {
    path: Option<PathBuf>,
    set: Mutex<BTreeSet<String>>,
}

impl RotateStore {
    pub fn in_memory() -> RotateStore {
        RotateStore {
            path: None,
            set: Mutex::new(BTreeSet::new()),
        }
    }

    /// Loads `state_dir/rotated-out.json` (an absent file is an empty set).
    pub fn open(state_dir: &Path) -> Result<RotateStore, RotateError> {
        let path = state_dir.join("rotated-out.json");
        let set = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: File =
                    serde_json::from_slice(&bytes).map_err(|source| RotateError::Format {
                        path: path.clone(),
                        source,
                    })?;
                if file.format != 1 {
                    return Err(RotateError::Newer {
                        path,
                        format: file.format,
                    });
                }
                file.rotated_out
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeSet::new(),
            Err(source) => return Err(RotateError::Io { path, source }),
        };
        Ok(RotateStore {
            path: Some(path),
            set: Mutex::new(set),
        })
    }

    pub fn contains(&self, addr: &str) -> bool {
        self.lock().contains(addr)
    }

    pub fn all(&self) -> BTreeSet<String> {
        self.lock().clone()
    }

    /// Records `addr` as rotated out (`true`) or in, durably, before returning.
    pub fn set(&self, addr: &str, out: bool) -> Result<(), RotateError> {
        let mut set = self.lock();
        let mut next = set.clone();
        let changed = if out {
            next.insert(addr.to_string())
        } else {
            next.remove(addr)
        };
        if changed {
            if let Some(path) = &self.path {
                write_atomically(path, &next)?;
            }
            *set = next;
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.set.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn write_atomically(path: &Path, set: &BTreeSet<String>) -> Result<(), RotateError> {
    let io = |source| RotateError::Io {
        path: path.to_path_buf(),
        source,
    };
    let json = serde_json::to_vec_pretty(&File {
        format: 1,
        rotated_out: set.clone(),
    })
    .map_err(|e| io(std::io::Error::other(e)))?;
    durable_file::write(path, &json).map_err(io)
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
