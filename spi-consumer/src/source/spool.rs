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

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::consumer::{Consumer, Disposition};
use crate::publish::Publish;

pub const DONE: &str = "done";
pub const FAILED: &str = "failed";

/// A spool directory with its `done/` and `failed/` folders.
#[derive(Clone, Debug)]
pub struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// Opens the spool, creating it and its sub-folders if needed.
    pub fn open(dir: impl Into<PathBuf>) -> io::Result<Spool> {
        let dir = dir.into();
        fs::create_dir_all(dir.join(DONE))?;
        fs::create_dir_all(dir.join(FAILED))?;
        Ok(Spool { dir })
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
            if entry.file_type()?.is_file() {
                files.push(entry.path());
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
            match fs::read(&path) {
                Ok(body) => {
                    let d = consumer.handle(&body);
                    settled.push((path, d));
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
        for (path, d) in &settled {
            self.settle(path, d)?;
        }
        durable_file::sync_dir(&self.dir.join(DONE))?;
        durable_file::sync_dir(&self.dir.join(FAILED))?;
        durable_file::sync_dir(&self.dir)?;
        Ok(settled.len())
    }

    fn settle(&self, path: &Path, d: &Disposition) -> io::Result<()> {
        let Some(name) = path.file_name() else {
            return Ok(());
        };
        match d {
            Disposition::DeadLetter(reason) => {
                let target = self.dir.join(FAILED).join(name);
                let mut reason_file = target.clone().into_os_string();
                reason_file.push(".reason");
                durable_file::write(Path::new(&reason_file), format!("{reason}\n").as_bytes())?;
                fs::rename(path, &target)?;
                tracing::warn!(file = %name.to_string_lossy(), %reason, "spool file moved to failed/");
            }
            _ => {
                fs::rename(path, self.dir.join(DONE).join(name))?;
                tracing::info!(file = %name.to_string_lossy(), outcome = d.label(), "spool file applied");
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
                    if let Err(e) = r {
                        tracing::error!(dir = %self.dir.display(), error = %e, "spool batch failed, will retry");
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

#[cfg(test)]
mod tests;
