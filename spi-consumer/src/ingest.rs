//! What every broker source does with one message: apply it, park it if it cannot be
//! decoded, make the result durable and live, and only then report success so the
//! source acknowledges it. Runs on the blocking pool (it fsyncs), so requests never
//! wait on the disk.

use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::consumer::{Consumer, Disposition};
use crate::deadletter::DeadLetters;
use crate::metrics::SourceMetrics;
use crate::publish::Publish;

/// Why a message could not be ingested; the source must not acknowledge it.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("cannot park an undecodable message: {0}")]
    DeadLetter(std::io::Error),
    #[error("cannot make the change durable: {0}")]
    Persist(#[from] crate::persist::StoreError),
}

/// Most messages ingested together (group commit: one fsync and one publish for all).
pub const MAX_BATCH: usize = 256;

/// One received message, waiting to be ingested.
#[derive(Debug)]
pub struct Received {
    /// For dead-letter file names and logs.
    pub id: String,
    pub body: Bytes,
    /// When it arrived, for `spi_route_propagation_seconds`.
    pub at: Instant,
}

/// Ingests a batch on the blocking pool (it fsyncs). The consumer is moved there and
/// back; `None` means it panicked (a bug) and is gone.
pub async fn ingest_off_thread<P: Publish + 'static>(
    mut consumer: Consumer<P>,
    dead: &DeadLetters,
    metrics: &SourceMetrics,
    batch: Vec<Received>,
) -> (Option<Consumer<P>>, Result<(), IngestError>) {
    let (dead, metrics) = (dead.clone(), metrics.clone());
    match tokio::task::spawn_blocking(move || {
        let r = ingest(&mut consumer, &dead, &metrics, &batch);
        (consumer, r)
    })
    .await
    {
        Ok((c, r)) => (Some(c), r),
        Err(_) => (None, Ok(())),
    }
}

/// Applies a batch of messages and makes the result durable and live with one save
/// (blocking: fsync). On error none of them may be acknowledged; applying them again
/// after redelivery is harmless.
pub fn ingest<P: Publish>(
    consumer: &mut Consumer<P>,
    dead: &DeadLetters,
    metrics: &SourceMetrics,
    batch: &[Received],
) -> Result<(), IngestError> {
    let mut applied = Vec::with_capacity(batch.len());
    for m in batch {
        match consumer.handle(&m.body) {
            Disposition::DeadLetter(reason) => {
                let path = dead
                    .park(&m.id, &m.body, &reason.to_string())
                    .map_err(IngestError::DeadLetter)?;
                tracing::warn!(message = %m.id, file = %path.display(), "message parked");
            }
            Disposition::Applied => applied.push(m.at),
            Disposition::Unchanged | Disposition::Ignored | Disposition::OtherShard => {}
        }
    }
    consumer.commit()?;
    for at in applied {
        metrics.propagation.observe(at.elapsed().as_secs_f64());
    }
    Ok(())
}

/// After a session ended: counts the reconnect and waits the next backoff delay.
/// Returns false if `stop` resolved first (the source should return).
pub async fn wait_to_reconnect<S: std::future::Future<Output = ()>>(
    backoff: &mut Backoff,
    metrics: &SourceMetrics,
    stop: std::pin::Pin<&mut S>,
) -> bool {
    metrics.connected.set(0);
    metrics.reconnects.inc();
    let delay = backoff.delay();
    tokio::select! {
        _ = stop => false,
        _ = tokio::time::sleep(delay) => true,
    }
}

/// Reconnect delays of a source: 100 ms doubling to 30 s, back to 100 ms after a
/// session that worked.
#[derive(Debug)]
pub struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff(Backoff::FIRST)
    }
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(30);

    /// The delay to wait now; the next one is twice as long.
    pub fn delay(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Backoff::MAX);
        now
    }

    pub fn reset(&mut self) {
        self.0 = Backoff::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_resets() {
        let mut b = Backoff::default();
        let seq: Vec<u128> = (0..11).map(|_| b.delay().as_millis()).collect();
        assert_eq!(seq[..4], [100, 200, 400, 800]);
        assert_eq!(seq[10], 30_000);
        b.reset();
        assert_eq!(b.delay(), Duration::from_millis(100));
    }
}
