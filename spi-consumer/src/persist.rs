//! Durable routing state in `state_dir`: a snapshot plus an append-only journal.
//!
//! An event is acknowledged (spool file moved to `done/`, broker message ACKed) only
//! after [`Store::save`] returned, so a crash at any point loses nothing: either the
//! disk has the change, or the event is delivered again and applied again (applying
//! is idempotent).
//!
//! - `state.json`: a snapshot of every app, written to a temp file, fsynced, renamed
//!   into place, directory fsynced. A reader sees the old file or the new one.
//! - `journal.jsonl`: one line per changed app since the snapshot, holding the app's
//!   whole new state (or its deletion), appended and fsynced per save. Saving costs
//!   the size of what changed, not of the table. Replaying lines in order over the
//!   snapshot gives the state back; a last line cut short by a crash is ignored (its
//!   event was never acknowledged, so it comes again).
//! - When the journal has more lines than the state has apps (and at least
//!   [`COMPACT_AFTER`]), a new snapshot is written and the journal emptied. A crash
//!   in between is harmless: replaying full app states in order over a newer
//!   snapshot ends in the same state. Compacting costs the whole state, so it waits
//!   for as many journal lines: each line then pays for at most one app written
//!   again, whatever the table's size (a fixed count made a 100 000-app router
//!   write its whole state every 20 000 events, most of its CPU per event), and the
//!   journal stays smaller than the snapshot.
//!
//! Both files hold certificates and private keys: created mode 0600, in a 0700 dir.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::apply::{App, AppKey, RoutingState};

/// The snapshot's format version; bump it with a migration when the layout changes.
const FORMAT: u32 = 1;
const SNAPSHOT: &str = "state.json";
const JOURNAL: &str = "journal.jsonl";
/// Journal lines before the state is compacted into a new snapshot, at the least (a
/// larger state waits for as many lines as it has apps). At a typical 1–2 KB per
/// app line a small state's journal stays within a few tens of MB.
pub const COMPACT_AFTER: usize = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: not a routing-state file: {source}")]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: not a routing-state file: app {index}: {source}")]
    CorruptApp {
        path: PathBuf,
        /// The app's position in the snapshot, from 0.
        index: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: not a routing-state file: line {line}: {source}")]
    CorruptLine {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: format {found} is not supported (want {want})")]
    Format {
        path: PathBuf,
        found: u32,
        want: u32,
    },
}

#[derive(Serialize, Deserialize)]
struct Snapshot<A> {
    format: u32,
    apps: Vec<A>,
}

/// One journal line.
#[derive(Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Entry<A> {
    Put { app: A },
    Del { key: AppKey },
}

/// From this many apps on, a snapshot's apps are decoded on two threads.
const PARALLEL_FROM: usize = 2_000;

/// Decodes a snapshot's apps (already split by the first pass, which checked the
/// JSON's syntax). At 100k apps this is most of a router's start, so a large
/// snapshot is decoded in two halves side by side; the order is kept.
fn parse_apps(raw: &[&RawValue]) -> Result<Vec<App>, (usize, serde_json::Error)> {
    let parse = |from: usize, part: &[&RawValue]| {
        part.iter()
            .enumerate()
            .map(|(i, r)| serde_json::from_str::<App>(r.get()).map_err(|e| (from + i, e)))
            .collect::<Result<Vec<App>, _>>()
    };
    if raw.len() < PARALLEL_FROM {
        return parse(0, raw);
    }
    let (first, second) = raw.split_at(raw.len() / 2);
    let (mut a, b) = std::thread::scope(|s| {
        let later = s.spawn(|| parse(first.len(), second));
        let a = parse(0, first);
        // A panic in the decoder is a bug, not input: pass it on.
        let b = later
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (a, b)
    });
    if let Ok(a) = &mut a {
        a.extend(b?);
    }
    a
}

/// The state directory.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    journal: Option<File>,
    lines: usize,
    compact_after: usize,
}

/// Appends `buf` and syncs; if that fails, cuts the file back to where it was, so a
/// half-written line (a full disk) never sits in the middle of the journal.
fn append(journal: &mut File, buf: &[u8]) -> io::Result<()> {
    let before = journal.metadata()?.len();
    let result = journal.write_all(buf).and_then(|()| journal.sync_data());
    if result.is_err() {
        let _ = journal.set_len(before);
        let _ = journal.sync_data();
    }
    result
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
        Ok(Store {
            dir,
            journal: None,
            lines: 0,
            compact_after: COMPACT_AFTER,
        })
    }

    /// Compacts after `lines` journal lines instead of [`COMPACT_AFTER`] (tests).
    pub fn with_compaction(mut self, lines: usize) -> Store {
        self.compact_after = lines.max(1);
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Loads the snapshot and replays the journal; nothing saved is an empty state.
    pub fn load(&mut self) -> Result<RoutingState, StoreError> {
        let path = self.dir.join(SNAPSHOT);
        let mut state = match fs::read(&path) {
            Ok(bytes) => {
                let snap: Snapshot<&RawValue> =
                    serde_json::from_slice(&bytes).map_err(|source| StoreError::Corrupt {
                        path: path.clone(),
                        source,
                    })?;
                if snap.format != FORMAT {
                    return Err(StoreError::Format {
                        path,
                        found: snap.format,
                        want: FORMAT,
                    });
                }
                let apps =
                    parse_apps(&snap.apps).map_err(|(index, source)| StoreError::CorruptApp {
                        path: path.clone(),
                        index,
                        source,
                    })?;
                RoutingState::from_apps(apps)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => RoutingState::new(),
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        self.lines = self.replay(&mut state)?;
        Ok(state)
    }

    fn replay(&self, state: &mut RoutingState) -> Result<usize, StoreError> {
        let path = self.dir.join(JOURNAL);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        let mut lines = io::BufReader::new(file).split(b'\n').peekable();
        let mut n = 0;
        while let Some(line) = lines.next() {
            let line = line.map_err(|source| StoreError::Io {
                path: path.clone(),
                source,
            })?;
            let last = lines.peek().is_none();
            match serde_json::from_slice::<Entry<App>>(&line) {
                Ok(Entry::Put { app }) => state.put(app),
                Ok(Entry::Del { key }) => state.remove(&key),
                // A crash while appending leaves a torn last line; its event was never
                // acknowledged and will be delivered again.
                Err(_) if last => {
                    tracing::warn!(file = %path.display(), "ignoring a torn last journal line");
                    break;
                }
                Err(source) => {
                    return Err(StoreError::CorruptLine {
                        path,
                        line: n + 1,
                        source,
                    });
                }
            }
            n += 1;
        }
        Ok(n)
    }

    /// Makes the changes to the apps in `changed` durable (`state` is the state after
    /// them). Costs the size of the changed apps, except when it compacts.
    pub fn save(
        &mut self,
        state: &RoutingState,
        changed: &BTreeSet<AppKey>,
    ) -> Result<(), StoreError> {
        if changed.is_empty() {
            return Ok(());
        }
        if self.lines + changed.len() > self.compact_after.max(state.len()) {
            return self.compact(state);
        }
        let path = self.dir.join(JOURNAL);
        let io = |source| StoreError::Io {
            path: path.clone(),
            source,
        };
        let mut buf = Vec::with_capacity(1024 * changed.len());
        for key in changed {
            // Written in place: no buffer of its own per entry.
            let written = match state.app(key) {
                Some(app) => serde_json::to_writer(&mut buf, &Entry::Put { app: &**app }),
                None => serde_json::to_writer(&mut buf, &Entry::<&App>::Del { key: key.clone() }),
            };
            written.map_err(|e| io(io::Error::other(e)))?;
            buf.push(b'\n');
        }
        let journal = match &mut self.journal {
            Some(f) => f,
            None => {
                let f = OpenOptions::new()
                    .append(true)
                    .create(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(io)?;
                // The file's creation must be durable too.
                sync_dir(&self.dir)?;
                self.journal.insert(f)
            }
        };
        if let Err(e) = append(journal, &buf) {
            // Reopen next time: the handle's state after a failed write is unknown.
            self.journal = None;
            return Err(io(e));
        }
        self.lines += changed.len();
        Ok(())
    }

    /// Writes a full snapshot (apps in key order: the same state, the same
    /// file), then empties the journal.
    pub fn compact(&mut self, state: &RoutingState) -> Result<(), StoreError> {
        let snapshot = Snapshot {
            format: FORMAT,
            apps: by_key(state),
        };
        let bytes = serde_json::to_vec(&snapshot).map_err(|e| StoreError::Io {
            path: self.dir.join(SNAPSHOT),
            source: io::Error::other(e),
        })?;
        replace_file(&self.dir, SNAPSHOT, &bytes)?;
        self.journal = None;
        replace_file(&self.dir, JOURNAL, b"")?;
        self.lines = 0;
        tracing::debug!(
            apps = state.len(),
            "routing state compacted into a snapshot"
        );
        Ok(())
    }
}

/// Atomically and durably replaces `dir/name` with `bytes` (see [`durable_file`]).
fn replace_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let path = dir.join(name);
    durable_file::write(&path, bytes).map_err(|source| StoreError::Io { path, source })
}

/// Makes a create in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    durable_file::sync_dir(dir).map_err(|source| StoreError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

/// The state's apps ordered by key.
fn by_key(state: &RoutingState) -> Vec<&App> {
    let mut apps: Vec<_> = state.apps().collect();
    apps.sort_unstable_by(|a, b| a.0.cmp(b.0));
    apps.into_iter().map(|(_, a)| &**a).collect()
}

#[cfg(test)]
mod tests;
