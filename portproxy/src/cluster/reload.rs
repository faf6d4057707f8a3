//! Watching the Simplenetes files and swapping what changed.
//!
//! Every `reload_interval` the three files are `stat`ed (size, mtime, inode). A change
//! is loaded once the file has stayed the same for one more interval, so a writer
//! that is still writing (`simplenetesd` may copy across filesystems, which is not
//! atomic) is not read half-way; SIGHUP loads at once. The files are parsed whole
//! and checked together; on any error the old table stays, the error is logged as
//! `file:line: field: problem` and counted (`portproxy_reload_errors_total{file}`).
//!
//! On success the new [`Live`](super::Live) is swapped in with one store, the
//! cluster-port listener set is diffed (unchanged ports untouched), and `maxConn`
//! counts carry over. `HOST` and `PORT` cannot change live: a new value is logged
//! and ignored until a restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::signal::unix::{SignalKind, signal};

use super::{Cluster, files, load_pinned};

type Stamp = Option<(u64, std::time::SystemTime, u64)>;

fn stamp(p: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).ok()?;
    Some((m.len(), m.modified().ok()?, m.ino()))
}

fn stamps(paths: &[PathBuf; 3]) -> [Stamp; 3] {
    [stamp(&paths[0]), stamp(&paths[1]), stamp(&paths[2])]
}

const FILES: [&str; 3] = ["proxy_conf", "hosts_conf", "portmappings_conf"];

pub async fn run(cluster: Arc<Cluster>) {
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "no SIGHUP handler; files are still polled");
            None
        }
    };
    let paths = |c: &Cluster| {
        let l = c.live.load();
        [
            c.cfg.proxy_conf.clone(),
            l.proxy.hosts_conf.clone(),
            l.proxy.ports_conf.clone(),
        ]
    };
    let mut last = stamps(&paths(&cluster));
    let mut pending: Option<[Stamp; 3]> = None;
    loop {
        let forced = tokio::select! {
            () = tokio::time::sleep(cluster.cfg.reload_interval) => false,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => true,
        };
        let now = stamps(&paths(&cluster));
        if !forced {
            if now == last {
                pending = None;
                continue;
            }
            if pending != Some(now) {
                pending = Some(now);
                continue;
            }
        }
        pending = None;
        reload(&cluster, &last, &now);
        // Paths may have moved (PORTSCONF/HOSTSCONF changed): stamp what is now named.
        last = stamps(&paths(&cluster));
    }
}

fn reload(cluster: &Arc<Cluster>, before: &[Stamp; 3], now: &[Stamp; 3]) {
    let metrics = &cluster.shared.metrics;
    let old = cluster.live.load_full();
    match load_pinned(
        &cluster.cfg,
        &cluster.counters,
        Some((old.proxy.host, old.proxy.port)),
    ) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                tracing::warn!("{w}");
            }
            for (i, f) in FILES.iter().enumerate() {
                if before[i] != now[i] {
                    metrics.reloads.with_label_values(&[f]).inc();
                }
            }
            let ports_changed = loaded.live.proxy.cluster_ports != old.proxy.cluster_ports;
            let want = files::ports_of(&loaded.live.proxy.cluster_ports);
            metrics
                .mappings
                .with_label_values(&["cluster"])
                .set(loaded.live.table.items() as i64);
            tracing::info!(
                hosts = loaded.live.hosts.len(),
                mappings = loaded.live.table.items(),
                "cluster files reloaded"
            );
            cluster.live.store(Arc::new(loaded.live));
            if ports_changed {
                let (listening, failed) = cluster.ports.apply(cluster, &want);
                tracing::info!(listening, failed, "cluster port set changed");
            }
        }
        Err((file, e)) => {
            metrics.reload_errors.with_label_values(&[file]).inc();
            tracing::error!(error = %e, "cluster files refused; the old table stays");
        }
    }
}
