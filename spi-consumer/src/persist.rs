//! Durable routing state in `state_dir`: a snapshot written atomically and fsynced.
//!
//! An event is acknowledged (spool file moved to `done/`, broker message ACKed) only
//! after [`Store::save`] returned, so a crash at any point loses nothing: either the
//! snapshot has the change, or the event is delivered again and applied again
//! (applying is idempotent).
//!
//! Write protocol: write `state.json.tmp`, fsync it, rename it over `state.json`,
//! fsync the directory. A reader sees the old file or the new one, never half of one.
//!
//! Scope: one whole snapshot per save. That is cheap for the thousands of apps of a
//! typical installation; an append-only journal for very large tables is future work.
//! The file holds certificates and private keys, so it is created mode 0600.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::state::{App, RoutingState};

/// The snapshot's format version; bump it with a migration when the layout changes.
const FORMAT: u32 = 1;
const FILE: &str = "state.json";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: not a routing-state snapshot: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

#[derive(Serialize, Deserialize)]
struct Snapshot<A> {
    format: u32,
    apps: Vec<A>,
}

/// The state directory.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// Opens (creating if needed, mode 0700) the state directory.
    pub fn open(dir: impl Into<PathBuf>) -> Result<Store, StoreError> {
        let dir = dir.into();
        let io = |source| StoreError::Io {
            path: dir.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(io)?;
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).map_err(io)?;
        Ok(Store { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    /// Loads the last saved state; an absent snapshot is an empty state.
    pub fn load(&self) -> Result<RoutingState, StoreError> {
        let path = self.path();
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(RoutingState::new()),
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        let snap: Snapshot<App> =
            serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        if snap.format != FORMAT {
            return Err(StoreError::Corrupt {
                path,
                reason: format!("format {} is not supported (want {FORMAT})", snap.format),
            });
        }
        Ok(RoutingState::from_apps(snap.apps))
    }

    /// Makes `state` durable.
    pub fn save(&self, state: &RoutingState) -> Result<(), StoreError> {
        let path = self.path();
        let tmp = self.dir.join(format!("{FILE}.tmp"));
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| StoreError::Io { path: p, source }
        };
        let snap = Snapshot {
            format: FORMAT,
            apps: state.apps().map(|(_, a)| &**a).collect(),
        };
        let bytes = serde_json::to_vec(&snap).map_err(|e| StoreError::Io {
            path: tmp.clone(),
            source: io::Error::other(e),
        })?;
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io(&tmp))?;
        f.write_all(&bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        fs::rename(&tmp, &path).map_err(io(&path))?;
        sync_dir(&self.dir)
    }
}

/// Makes a rename or create in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StoreError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Decoded, decode};

    fn tempdir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("spi-store-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn save_then_load_round_trips() {
        let dir = tempdir("rt");
        let store = Store::open(&dir).expect("open");
        assert!(store.load().expect("empty load").is_empty());
        let mut state = RoutingState::new();
        for name in crate::fixtures::all().iter().filter(|n| n.as_str() < "11") {
            if let Ok(Decoded::Event(e)) = decode(&crate::fixtures::fixture(name)) {
                state.apply(&e);
            }
        }
        store.save(&state).expect("save");
        assert_eq!(store.load().expect("load"), state);
        assert!(!dir.join("state.json.tmp").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.join(FILE))
            .expect("meta")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "holds private keys");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_snapshot_is_a_clear_error() {
        let dir = tempdir("bad");
        let store = Store::open(&dir).expect("open");
        fs::write(dir.join(FILE), b"{\"format\": 1, \"apps\": [").expect("write");
        let err = store.load().expect_err("corrupt");
        assert!(err.to_string().contains("state.json"), "{err}");
        fs::write(dir.join(FILE), b"{\"format\": 99, \"apps\": []}").expect("write");
        assert!(
            store
                .load()
                .expect_err("future")
                .to_string()
                .contains("format 99")
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
