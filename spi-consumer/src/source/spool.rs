//! The spool directory: the embedded event source that needs no broker.
//!
//! Each regular file directly in the directory is one message body, exactly as the
//! broker would deliver it. Files are applied in file-name order (name them with a
//! sortable prefix), then moved to `done/`, or to `failed/` with the reason written
//! beside them in `NAME.reason`. Names starting with `.` or ending in `.tmp` are
//! skipped so that a writer can create a file under such a name and rename it into
//! place when complete (a rename is atomic; a half-written file is never read).
//!
//! A file is moved only after its batch was committed (state durable and published),
//! so a crash mid-batch leaves the files in place to be applied again, harmlessly.
//!
//! Bounded by design: a file over `max_file_bytes` is not read but parked in
//! `failed/` with its reason; a reason file's name always fits the file system (a
//! long name is shortened, with a hash of the whole name); files in `done/` and
//! `failed/` are made owner-only, keep no private key nor pass phrase (an `add_ssl`
//! event's are replaced by `[redacted]`, see [`crate::redact`]), and are removed
//! after `done_retention` and `failed_retention`; entries that are not regular files (symlinks, FIFOs,
//! directories) are skipped and logged once.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::consumer::{Consumer, Disposition};
use crate::decode::DecodeError;
use crate::publish::Publish;

pub const DONE: &str = "done";
pub const FAILED: &str = "failed";

/// The longest file name most Linux file systems take, in bytes.
const NAME_MAX: usize = 255;

/// How a spool is bounded (`spi.spool.*`).
#[derive(Clone, Debug)]
pub struct SpoolLimits {
    /// Larger files are parked unread.
    pub max_file_bytes: u64,
    /// Files in `done/` older than this are removed.
    pub done_retention: Duration,
    /// Files in `failed/` (and their `.reason`) older than this are removed.
    pub failed_retention: Duration,
}

impl Default for SpoolLimits {
    fn default() -> SpoolLimits {
        SpoolLimits {
            max_file_bytes: 1024 * 1024,
            done_retention: Duration::from_secs(7 * 24 * 3600),
            failed_retention: Duration::from_secs(30 * 24 * 3600),
        }
    }
}

/// A file of a batch, what became of it, and the copy to keep if it held secrets.
type Settled = (PathBuf, Disposition, Option<Vec<u8>>);

/// A spool directory with its `done/` and `failed/` folders.
#[derive(Clone, Debug)]
pub struct Spool {
    dir: PathBuf,
    limits: SpoolLimits,
    /// Skipped entries already logged (each is logged once).
    skipped: Arc<Mutex<HashSet<PathBuf>>>,
    /// When `done/` was last pruned.
    pruned: Arc<Mutex<Option<Instant>>>,
}

impl Spool {
    /// Opens the spool, creating it and its sub-folders if needed.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Spool> {
        Spool::open_with(dir, SpoolLimits::default())
    }

    pub fn open_with(dir: impl Into<PathBuf>, limits: SpoolLimits) -> io::Result<Spool> {
        let dir = dir.into();
        fs::create_dir_all(dir.join(DONE))?;
        fs::create_dir_all(dir.join(FAILED))?;
        Ok(Spool {
            dir,
            limits,
            skipped: Arc::default(),
            pruned: Arc::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The files waiting to be applied, in name order.
    pub fn pending(&self) -> io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') || name.ends_with(".tmp") {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_file() {
                files.push(entry.path());
            } else if !(kind.is_dir() && (name == DONE || name == FAILED)) {
                self.skip_once(entry.path(), &kind);
            }
        }
        files.sort();
        Ok(files)
    }

    /// Applies every pending file as one batch. Returns how many files were settled.
    pub fn process<P: Publish>(&self, consumer: &mut Consumer<P>) -> io::Result<usize> {
        let files = self.pending()?;
        if files.is_empty() {
            return Ok(0);
        }
        let mut settled = Vec::with_capacity(files.len());
        for path in files {
            match self.read_bounded(&path) {
                Ok(Ok(body)) => {
                    let d = consumer.handle(&body);
                    let kept = crate::redact::secrets(&body);
                    settled.push((path, d, kept));
                }
                Ok(Err(too_large)) => {
                    tracing::warn!(file = %path.display(), "spool file over spi.spool.max_file_bytes");
                    settled.push((path, consumer.refuse(too_large), None));
                }
                // Removed by someone else between the scan and now: nothing to do.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "spool file unreadable, will retry");
                }
            }
        }
        // Durable first; if this fails, the files stay and are applied again later.
        consumer.commit().map_err(io::Error::other)?;
        for (path, d, kept) in &settled {
            self.settle(path, d, kept.as_deref())?;
        }
        // Only the directories that changed: each sync is a disk flush.
        let parked = |(_, d, _): &&Settled| matches!(d, Disposition::DeadLetter(_));
        if settled.iter().any(|s| parked(&s)) {
            durable_file::sync_dir(&self.dir.join(FAILED))?;
        }
        if settled.iter().any(|s| !parked(&s)) {
            durable_file::sync_dir(&self.dir.join(DONE))?;
        }
        durable_file::sync_dir(&self.dir)?;
        self.prune_done();
        Ok(settled.len())
    }

    /// The file's bytes, or why it is too large to read (never more than the cap
    /// plus one byte is read, whatever its size says).
    fn read_bounded(&self, path: &Path) -> io::Result<Result<Vec<u8>, DecodeError>> {
        let max = self.limits.max_file_bytes;
        let mut body = Vec::new();
        fs::File::open(path)?.take(max + 1).read_to_end(&mut body)?;
        if body.len() as u64 > max {
            return Ok(Err(DecodeError::TooLarge { max }));
        }
        Ok(Ok(body))
    }

    fn skip_once(&self, path: PathBuf, kind: &fs::FileType) {
        let mut seen = self.skipped.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() < 10_000 && seen.insert(path.clone()) {
            tracing::warn!(entry = %path.display(), kind = ?kind, "spool entry is not a regular file; skipped");
        }
    }

    /// Removes files older than their retention from `done/` and `failed/`, at most
    /// once a minute.
    fn prune_done(&self) {
        {
            let mut last = self.pruned.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
                return;
            }
            *last = Some(Instant::now());
        }
        self.prune(DONE, self.limits.done_retention);
        self.prune(FAILED, self.limits.failed_retention);
    }

    /// Removes the files of `folder` older than `retention`.
    fn prune(&self, folder: &str, retention: Duration) {
        let Ok(entries) = fs::read_dir(self.dir.join(folder)) else {
            return;
        };
        let now = SystemTime::now();
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age >= retention);
            if old && let Err(err) = fs::remove_file(e.path()) {
                tracing::warn!(file = %e.path().display(), error = %err, "cannot remove an old spool file");
            }
        }
    }

    /// Moves a processed file to `done/` or `failed/`; `redacted`, when the body
    /// held secrets, is what is kept there instead of the body.
    fn settle(&self, path: &Path, d: &Disposition, redacted: Option<&[u8]>) -> io::Result<()> {
        let Some(name) = path.file_name() else {
            return Ok(());
        };
        let folder = match d {
            Disposition::DeadLetter(reason) => {
                let reason_file = self.dir.join(FAILED).join(reason_name(name));
                durable_file::write(&reason_file, format!("{reason}\n").as_bytes())?;
                tracing::warn!(file = %name.to_string_lossy(), %reason, "spool file moved to failed/");
                FAILED
            }
            _ => {
                tracing::info!(file = %name.to_string_lossy(), outcome = d.label(), "spool file applied");
                DONE
            }
        };
        let target = self.dir.join(folder).join(name);
        match redacted {
            // Written whole (0600, fsynced) before the original goes: a crash
            // between the two leaves the original to be applied again, harmlessly.
            Some(kept) => {
                durable_file::write(&target, kept)?;
                fs::remove_file(path)?;
            }
            None => {
                fs::rename(path, &target)?;
                // Owner only, whatever the writer's umask was.
                owner_only(&target);
            }
        }
        Ok(())
    }

    /// Polls the directory until `stop` resolves. Errors are logged and retried on the
    /// next tick: the spool never stops because of one bad file or a full disk.
    pub async fn run<P: Publish + 'static>(
        self,
        mut consumer: Consumer<P>,
        interval: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            let spool = self.clone();
            let result = tokio::task::spawn_blocking(move || {
                let r = spool.process(&mut consumer);
                (consumer, r)
            })
            .await;
            match result {
                Ok((c, r)) => {
                    consumer = c;
                    match r {
                        // Files came: look again at once, so a backlog drains
                        // batch after batch and events a few ms apart each get
                        // their own batch, instead of waiting `interval` each time.
                        Ok(n) if n > 0 => continue,
                        Ok(_) => {}
                        Err(e) => {
                            tracing::error!(dir = %self.dir.display(), error = %e, "spool batch failed, will retry");
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "spool worker panicked; stopping the spool");
                    return;
                }
            }
            tokio::select! {
                _ = &mut stop => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }
}

/// `NAME.reason`, or, when that would not fit in a file name, the first bytes of
/// the name, a hash of all of it, and `.reason` (the name is in the file too).
fn reason_name(name: &std::ffi::OsStr) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStrExt;
    let bytes = name.as_bytes();
    if bytes.len() + ".reason".len() <= NAME_MAX {
        let mut n = name.to_os_string();
        n.push(".reason");
        return n;
    }
    // Stable across builds and enough to keep two long names apart.
    let hash = crate::shard::fnv1a(bytes);
    let mut n = std::ffi::OsStr::from_bytes(&bytes[..200]).to_os_string();
    n.push(format!("-{hash:016x}.reason"));
    n
}

fn owner_only(path: &Path) {
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(0o600)) {
        tracing::warn!(file = %path.display(), error = %e, "cannot make a spool file owner-only");
    }
}

#[cfg(test)]
mod tests;
