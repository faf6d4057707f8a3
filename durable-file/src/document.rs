//! A small piece of saved state kept whole in one JSON file, `{"format": N, ...}`,
//! loaded at start and rewritten through [`crate::write`] on every change: the
//! router's rotated-out members and its blue/green splits. It changes only when
//! an operator acts and holds a handful of entries, so simplicity wins over a
//! journal.
//!
//! A change is made on a copy, written, and only then made current: a failed
//! write leaves both the file and the value as they were.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Why a document could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a {what} file: {source}")]
    Format {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: format {format} is newer than this program")]
    Newer { path: PathBuf, format: u32 },
}

/// The file's shape: the format number beside the document's own fields.
#[derive(Serialize, Deserialize)]
struct File<T> {
    format: u32,
    #[serde(flatten)]
    body: T,
}

/// The format every document is written in, and the newest one read.
pub const FORMAT: u32 = 1;

/// One document and where it lives (`None`: in memory only, for tests).
#[derive(Debug)]
pub struct Document<T> {
    path: Option<PathBuf>,
    value: Mutex<T>,
}

impl<T: Serialize + DeserializeOwned + Default + Clone> Document<T> {
    pub fn in_memory() -> Document<T> {
        Document {
            path: None,
            value: Mutex::new(T::default()),
        }
    }

    /// Loads `path` (absent: the default value); `what` names the file's kind in
    /// errors.
    pub fn open(path: &Path, what: &'static str) -> Result<Document<T>, DocumentError> {
        let value = match std::fs::read(path) {
            Ok(bytes) => {
                let file: File<T> =
                    serde_json::from_slice(&bytes).map_err(|source| DocumentError::Format {
                        path: path.to_path_buf(),
                        what,
                        source,
                    })?;
                if file.format != FORMAT {
                    return Err(DocumentError::Newer {
                        path: path.to_path_buf(),
                        format: file.format,
                    });
                }
                file.body
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => T::default(),
            Err(source) => {
                return Err(DocumentError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        Ok(Document {
            path: Some(path.to_path_buf()),
            value: Mutex::new(value),
        })
    }

    /// Where it is saved, if anywhere.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The current value.
    pub fn get(&self) -> MutexGuard<'_, T> {
        self.value.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `change` to a copy; if it says the copy changed, saves it durably,
    /// then makes it current. Returns whether it changed.
    pub fn update(&self, change: impl FnOnce(&mut T) -> bool) -> Result<bool, DocumentError> {
        let mut current = self.get();
        let mut next = current.clone();
        if !change(&mut next) {
            return Ok(false);
        }
        if let Some(path) = &self.path {
            let io = |source| DocumentError::Io {
                path: path.clone(),
                source,
            };
            let json = serde_json::to_vec_pretty(&File {
                format: FORMAT,
                body: &next,
            })
            .map_err(|e| io(std::io::Error::other(e)))?;
            crate::write(path, &json).map_err(io)?;
        }
        *current = next;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[derive(Serialize, Deserialize, Default, Clone, Debug, PartialEq)]
    struct Names {
        names: BTreeSet<String>,
    }

    #[test]
    fn saved_changes_load_back_and_bad_files_are_named() {
        let dir = std::env::temp_dir().join(format!("document-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("names.json");
        let d: Document<Names> = Document::open(&path, "names").expect("absent is empty");
        assert!(d.update(|n| n.names.insert("a".into())).expect("saved"));
        assert!(!d.update(|n| n.names.insert("a".into())).expect("no change"));
        let again: Document<Names> = Document::open(&path, "names").expect("reopen");
        assert_eq!(again.get().names.len(), 1);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.contains("\"format\": 1"), "{text}");
        std::fs::write(&path, b"{\"format\": 2, \"names\": []}").expect("write");
        let e = Document::<Names>::open(&path, "names").expect_err("newer");
        assert!(matches!(e, DocumentError::Newer { format: 2, .. }), "{e}");
        std::fs::write(&path, b"{nope").expect("write");
        let e = Document::<Names>::open(&path, "names").expect_err("garbage");
        assert!(e.to_string().contains("not a names file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
