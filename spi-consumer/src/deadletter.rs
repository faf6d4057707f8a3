//! Parked messages: bodies that could not be decoded, kept with the reason so that
//! an operator can look at them, fix them and replay them. Nothing is dropped.
//!
//! `state_dir/dead-letters/<unix-ms>-<id>.yaml` holds the body exactly as received,
//! `.reason` beside it says why. Both are written through [`durable_file`] (atomic,
//! fsynced, mode 0600) before the message is acknowledged: a body may hold a private key.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug)]
pub struct DeadLetters {
    dir: PathBuf,
}

impl DeadLetters {
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<DeadLetters> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(DeadLetters { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes the body and its reason durably; returns the body's path.
    pub fn park(&self, id: &str, body: &[u8], reason: &str) -> io::Result<PathBuf> {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        // Message ids come from the broker: keep them readable but path-safe.
        let id: String = id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .take(100)
            .collect();
        let path = self.dir.join(format!("{ms}-{id}.yaml"));
        // The reason first: a body is never parked without it.
        let mut reason_path = path.clone().into_os_string();
        reason_path.push(".reason");
        durable_file::write(Path::new(&reason_path), format!("{reason}\n").as_bytes())?;
        durable_file::write(&path, body)?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parks_body_and_reason_with_safe_names() {
        let dir = std::env::temp_dir().join(format!("spi-dead-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let dl = DeadLetters::open(&dir).expect("open");
        let path = dl
            .park("ID:host-1/../x", b"---\n:action: [", "not valid YAML")
            .expect("park");
        assert!(
            path.starts_with(&dir),
            "stays inside the folder: {}",
            path.display()
        );
        assert!(path.to_string_lossy().ends_with("-ID_host-1_.._x.yaml"));
        assert_eq!(fs::read(&path).expect("body"), b"---\n:action: [");
        let reason = fs::read_to_string(format!("{}.reason", path.display())).expect("reason");
        assert_eq!(reason, "not valid YAML\n");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&path).expect("meta").permissions().mode() & 0o777,
            0o600
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
