//! The STOMP event source: keeps a session to the broker and feeds every message
//! through the consumer, acknowledging it only once applied and durable.
//!
//! Per message: decode and apply ([`Consumer::handle`]), park it if undecodable
//! ([`DeadLetters`]), save and publish ([`Consumer::commit`]), then ACK. If saving
//! fails, the message is not acknowledged: the session is dropped and re-opened, so
//! the broker redelivers it (applying it again is a no-op if it had been applied).
//! Any session error leads to a reconnect with exponential backoff (100 ms doubling to
//! 30 s, reset after a good session), moving on to the next host of the failover list.

use std::future::Future;
use std::time::Instant;

use futures_util::FutureExt;

use super::session::{Session, SessionConfig, StompError};
use crate::consumer::Consumer;
use crate::deadletter::DeadLetters;
use crate::ingest::{self, Backoff, IngestError, Received};
use crate::metrics::SourceMetrics;
use crate::publish::Publish;

/// Runs until `stop` resolves (or the consumer panicked: then it logs and returns,
/// and the router keeps serving its last table).
pub async fn run<P: Publish + 'static>(
    config: SessionConfig,
    consumer: Consumer<P>,
    dead: DeadLetters,
    metrics: SourceMetrics,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut consumer = Some(consumer);
    let mut backoff = Backoff::default();
    let mut start = 0usize;
    while let Some(c) = consumer.take() {
        let connected = tokio::select! {
            _ = &mut stop => return,
            s = Session::connect(&config, start) => s,
        };
        match connected {
            Ok(mut session) => {
                metrics.connected.set(1);
                backoff.reset();
                let (c, ended) = tokio::select! {
                    _ = &mut stop => {
                        metrics.connected.set(0);
                        let _ = session.disconnect(config.timeout).await;
                        return;
                    }
                    r = consume(&mut session, c, &dead, &metrics) => r,
                };
                metrics.connected.set(0);
                tracing::warn!(host = %session.host, error = %ended, "broker session ended; reconnecting");
                consumer = c;
            }
            Err(e) => {
                tracing::warn!(error = %e,  "no broker reachable");
                consumer = Some(c);
            }
        }
        start = start.wrapping_add(1);
        if !ingest::wait_to_reconnect(&mut backoff, &metrics, stop.as_mut()).await {
            return;
        }
    }
    tracing::error!("the event consumer panicked; the STOMP source has stopped");
}

/// Why consuming stopped (always an error: a healthy session consumes forever).
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error(transparent)]
    Session(#[from] StompError),
    #[error(transparent)]
    Ingest(#[from] IngestError),
    #[error("the consumer panicked")]
    Panicked,
}

/// Consumes until the session fails. Returns the consumer (unless it panicked).
///
/// Group commit: after the first message, whatever has already arrived (up to
/// [`ingest::MAX_BATCH`]) is taken too, the batch is made durable with one save, then
/// every message of it is acknowledged.
async fn consume<P: Publish + 'static>(
    session: &mut Session,
    mut consumer: Consumer<P>,
    dead: &DeadLetters,
    metrics: &SourceMetrics,
) -> (Option<Consumer<P>>, Ended) {
    loop {
        let first = match session.next_message().await {
            Ok(m) => m,
            Err(e) => return (Some(consumer), e.into()),
        };
        let mut messages = vec![first];
        let mut failed = None;
        while messages.len() < ingest::MAX_BATCH {
            match session.next_message().now_or_never() {
                Some(Ok(m)) => messages.push(m),
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                None => break,
            }
        }
        let now = Instant::now();
        let batch = messages
            .iter()
            .map(|m| Received {
                id: m.message_id.clone(),
                body: m.body.clone(),
                at: now,
            })
            .collect();
        let (c, r) = ingest::ingest_off_thread(consumer, dead, metrics, batch).await;
        let Some(c) = c else {
            return (None, Ended::Panicked);
        };
        consumer = c;
        if let Err(e) = r {
            // Not acknowledged: dropping the session makes the broker redeliver.
            return (Some(consumer), e.into());
        }
        if let Err(e) = session.ack_all(&messages).await {
            return (Some(consumer), e.into());
        }
        if let Some(e) = failed {
            return (Some(consumer), e.into());
        }
    }
}
