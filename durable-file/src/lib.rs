//! One way to write a file that must survive a crash: whole or not at all, and on
//! disk before the caller goes on (an event is acknowledged, an operator is answered).
//!
//! Every piece of saved state goes through here: the routing snapshot, parked dead
//! letters and their reasons, the rotated-out list, the portproxy's gear mappings.
//! The sequence (temporary file in the same directory, fsync, rename over the target,
//! fsync the directory) is `atomic-write-file`'s; this crate only fixes the choices
//! that matter to us: files are created `0600` (a routing event may carry a private
//! key), the permissions of a file being replaced are not inherited, and moves
//! between directories are made durable on both sides.

pub mod document;

pub use document::{Document, DocumentError};

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use atomic_write_file::OpenOptions;
use atomic_write_file::unix::OpenOptionsExt as _;

/// The mode of every file written here: owner only.
pub const MODE: u32 = 0o600;

/// Replaces (or creates) `path` with `bytes`, atomically and durably, mode `0600`.
///
/// A reader sees the old content or the new, never a torn file; when this returns,
/// the new content and its name are on disk.
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = OpenOptions::new()
        .mode(MODE)
        .preserve_mode(false)
        .open(path)?;
    file.write_all(bytes)?;
    file.commit()
}

/// Moves `from` to `to` (same file system) and makes the move durable in both
/// directories.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::rename(from, to)?;
    if let Some(dir) = to.parent() {
        sync_dir(dir)?;
    }
    match from.parent() {
        Some(dir) if Some(dir) != to.parent() => sync_dir(dir),
        _ => Ok(()),
    }
}

/// Makes the creation, removal or rename of an entry in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("durable-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn replaces_whole_with_owner_only_mode_and_leaves_no_temporary_file() {
        let dir = temp_dir("write");
        let path = dir.join("state.json");
        std::fs::write(&path, b"old").expect("old");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        write(&path, b"new content").expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"new content");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, MODE, "a replaced file does not keep 0644");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_failed_write_leaves_the_old_file() {
        let dir = temp_dir("fail");
        let missing = dir.join("no-such-dir").join("x");
        assert!(write(&missing, b"x").is_err());
        assert!(rename(&dir.join("absent"), &dir.join("y")).is_err());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn rename_moves_between_directories() {
        let dir = temp_dir("rename");
        std::fs::create_dir_all(dir.join("done")).expect("done");
        write(&dir.join("a"), b"a").expect("write");
        rename(&dir.join("a"), &dir.join("done").join("a")).expect("rename");
        assert!(!dir.join("a").exists());
        assert_eq!(
            std::fs::read(dir.join("done").join("a")).expect("read"),
            b"a"
        );
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
