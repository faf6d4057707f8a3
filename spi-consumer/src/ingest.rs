//! What every broker source does with one message: apply it, park it if it cannot be
//! decoded, make the result durable and live, and only then report success so the
//! source acknowledges it. Runs on the blocking pool (it fsyncs), so requests never
//! wait on the disk.

use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus::{Histogram, IntCounter, IntGauge};

use crate::consumer::{Consumer, Disposition, Publish};
use crate::deadletter::DeadLetters;

/// Broker-side metrics of a source.
#[derive(Clone)]
pub struct SourceMetrics {
    /// `spi_broker_connected`: 1 while subscribed.
    pub connected: IntGauge,
    /// `spi_broker_reconnects_total`.
    pub reconnects: IntCounter,
    /// `spi_route_propagation_seconds`: message received → change durable and live.
    pub propagation: Histogram,
}

/// Why a message could not be ingested; the source must not acknowledge it.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("cannot park an undecodable message: {0}")]
    DeadLetter(std::io::Error),
    #[error("cannot make the change durable: {0}")]
    Persist(#[from] crate::persist::StoreError),
}

/// Ingests one message body on the blocking pool. The consumer is moved there and
/// back; `None` means it panicked (a bug) and is gone.
pub async fn ingest_off_thread<P: Publish + 'static>(
    mut consumer: Consumer<P>,
    dead: &DeadLetters,
    metrics: &SourceMetrics,
    id: String,
    body: Bytes,
) -> (Option<Consumer<P>>, Result<(), IngestError>) {
    let (dead, metrics) = (dead.clone(), metrics.clone());
    match tokio::task::spawn_blocking(move || {
        let r = ingest(&mut consumer, &dead, &metrics, &id, &body);
        (consumer, r)
    })
    .await
    {
        Ok((c, r)) => (Some(c), r),
        Err(_) => (None, Ok(())),
    }
}

/// Applies one message and makes it durable (blocking: fsync).
pub fn ingest<P: Publish>(
    consumer: &mut Consumer<P>,
    dead: &DeadLetters,
    metrics: &SourceMetrics,
    id: &str,
    body: &[u8],
) -> Result<(), IngestError> {
    let received = Instant::now();
    let disposition = consumer.handle(body);
    if let Disposition::DeadLetter(reason) = &disposition {
        let path = dead
            .park(id, body, &reason.to_string())
            .map_err(IngestError::DeadLetter)?;
        tracing::warn!(message = %id, file = %path.display(), "message parked");
    }
    consumer.commit()?;
    if matches!(disposition, Disposition::Applied) {
        metrics
            .propagation
            .observe(received.elapsed().as_secs_f64());
    }
    Ok(())
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
