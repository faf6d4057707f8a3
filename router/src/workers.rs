//! The data path's threads: one single-threaded runtime per core, each serving the
//! client connections it was given from accept to close.
//!
//! Why: tokio's work-stealing runtime moves a connection's tasks between threads
//! (hyper's h2 server spawned one per stream), and their wake-ups then go through
//! the shared run queue and its cross-thread signalling. haproxy (`nbthread`, a
//! connection on one thread for its life) and nginx (a worker process per core)
//! keep a connection on one core; so does this, as Pingora's `work_stealing:
//! false` does. A connection, its hyper or own-framing state, its h2 streams and
//! the member connections it opens live on one thread, their I/O and timers
//! registered with that thread's reactor. Measured on 2 cores (bench/RESULTS.md,
//! "Per-core workers"): h2 over TLS 12.6 µs per request against 14.9 on the
//! work-stealing runtime; HTTP/1.1 the same within noise.
//!
//! The client listeners' accept loops run on the first worker ([`Workers::acceptor`])
//! and hand each accepted socket to the worker with the fewest open connections
//! ([`Workers::pick`]; the accepting one among equals), as haproxy's listeners hand
//! connections to the least loaded thread; the worker registers it with its own
//! reactor. The event source, the admin API, the health checks and the TCP
//! listeners stay on the main runtime. Member connections are pooled per worker
//! (see [`crate::upstream::Pool`]); a worker with none idle borrows another's
//! rather than open one (a member's connections stay within its slots), and that
//! request's member I/O is then woken through the other worker's reactor. So is a
//! request queued for a member slot that another worker frees: a member's slots
//! are one pool.
//!
//! `worker_threads: 1` needs none of this (one runtime does everything), and
//! `work_stealing: true` keeps tokio's multi-threaded runtime instead.

use prometheus::{IntGauge, IntGaugeVec};
use tokio::runtime::Handle;
use tokio::sync::watch;

/// The per-core runtimes, running on threads of their own until dropped.
pub struct Workers {
    workers: Vec<Worker>,
    /// Tells every worker thread to end (its runtime, and what is left on it, is
    /// dropped on that thread).
    stop: watch::Sender<bool>,
}

struct Worker {
    handle: Handle,
    /// Client connections open on this worker (see [`WorkerSlot`]):
    /// `router_worker_connections{worker}`.
    open: IntGauge,
}

/// A connection's place on a worker: its index (for the member pools) and its
/// count in the worker's open connections, given back when dropped.
pub struct WorkerSlot {
    pub index: usize,
    open: IntGauge,
}

impl Drop for WorkerSlot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl Workers {
    /// Starts `n` worker threads (`router-worker-N`), each with a current-thread
    /// runtime with I/O and time enabled. At least one. Each worker's open
    /// connections are `open`'s series labelled with its index.
    pub fn start(n: usize, open: &IntGaugeVec) -> std::io::Result<Workers> {
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no worker threads asked for",
            ));
        }
        let (stop, stopped) = watch::channel(false);
        let mut workers = Vec::with_capacity(n);
        for i in 0..n {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let handle = rt.handle().clone();
            let mut stopped = stopped.clone();
            std::thread::Builder::new()
                .name(format!("router-worker-{i}"))
                .spawn(move || {
                    rt.block_on(async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    });
                    // Dropping `rt` here drops the connections still on it.
                })?;
            workers.push(Worker {
                handle,
                open: open.with_label_values(&[&i.to_string()]),
            });
        }
        tracing::info!(
            workers = n,
            "data path: one single-threaded runtime per worker thread"
        );
        Ok(Workers { workers, stop })
    }

    /// The runtime the client listeners' accept loops run on: worker 0's. A
    /// connection it keeps needs no other thread woken; one it hands to another
    /// worker wakes that one (as a loop on the main thread woke two threads for
    /// every connection: 48 against 40 µs per connection-per-request).
    pub fn acceptor(&self) -> &Handle {
        &self.workers[0].handle
    }

    /// Runs `f` once on every worker thread (between its tasks).
    pub fn on_each(&self, f: fn()) {
        for w in &self.workers {
            w.handle.spawn(async move { f() });
        }
    }

    /// How many worker threads there are.
    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// The worker with the fewest open connections (the first of equals), counted
    /// from now until the returned [`WorkerSlot`] is dropped; and its runtime.
    pub fn pick(&self) -> (WorkerSlot, &Handle) {
        let index = self
            .workers
            .iter()
            .enumerate()
            .min_by_key(|(_, w)| w.open.get())
            .map_or(0, |(i, _)| i);
        // `start` made at least one.
        let worker = &self.workers[index];
        worker.open.inc();
        (
            WorkerSlot {
                index,
                open: worker.open.clone(),
            },
            &worker.handle,
        )
    }

    /// Open connections per worker, in order.
    #[cfg(test)]
    fn open(&self) -> Vec<i64> {
        self.workers.iter().map(|w| w.open.get()).collect()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// How many per-core workers the data path gets: `None` when one runtime serves
/// everything (`worker_threads: 1`) or tokio's work-stealing runtime was asked
/// for; otherwise `worker_threads`, 0 meaning one per CPU.
pub fn count(worker_threads: usize, work_stealing: bool) -> Option<usize> {
    if work_stealing {
        return None;
    }
    let n = match worker_threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    (n > 1).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauges() -> IntGaugeVec {
        IntGaugeVec::new(prometheus::Opts::new("t", "t"), &["worker"]).expect("gauges")
    }

    #[test]
    fn count_follows_the_settings() {
        assert_eq!(count(1, false), None);
        assert_eq!(count(4, false), Some(4));
        assert_eq!(count(4, true), None);
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(count(0, false), (cpus > 1).then_some(cpus));
    }

    #[test]
    fn none_is_refused() {
        assert!(Workers::start(0, &gauges()).is_err());
    }

    #[test]
    fn pick_takes_the_least_loaded_and_counts_until_dropped() {
        let workers = Workers::start(3, &gauges()).expect("workers");
        let (a, _) = workers.pick();
        let (b, _) = workers.pick();
        assert_eq!((a.index, b.index), (0, 1));
        assert_eq!(workers.open(), vec![1, 1, 0]);
        drop(a);
        let (c, _) = workers.pick();
        assert_eq!(
            c.index, 0,
            "worker 0 has none again, and is first among equals"
        );
        let (d, _) = workers.pick();
        assert_eq!(d.index, 2);
        assert_eq!(workers.open(), vec![1, 1, 1]);
        drop((b, c, d));
        assert_eq!(workers.open(), vec![0, 0, 0]);
    }

    #[test]
    fn a_task_runs_on_its_worker_thread() {
        let workers = Workers::start(2, &gauges()).expect("workers");
        let (placed, handle) = workers.pick();
        let (tx, rx) = std::sync::mpsc::channel();
        handle.spawn(async move {
            let _ = tx.send(std::thread::current().name().map(str::to_owned));
        });
        let name = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the worker ran the task");
        assert_eq!(name.as_deref(), Some("router-worker-0"));
        drop(placed);
    }
}
