//! The loop every broker source runs, written once: connect (the next host of the
//! failover list in turn), take messages with group commits, acknowledge only what
//! a commit made durable, and on any failure reconnect with back-off.
//!
//! Group commit: after the first message, whatever has already arrived (up to
//! [`ingest::MAX_BATCH`]) is taken too; the batch is applied and saved with one
//! fsync ([`ingest::ingest_off_thread`]), then every message of it is acknowledged.
//! If the save fails nothing is acknowledged and the session is closed, so the
//! broker redelivers (applying a message again is a no-op). A session error before
//! the acknowledgement has the same effect.
//!
//! A broker plugs in with two small traits: [`Broker`] (how to connect) and
//! [`Session`] (take one message, acknowledge a batch, close).

use std::future::Future;
use std::time::Instant;

use futures_util::FutureExt;

use crate::consumer::Consumer;
use crate::deadletter::DeadLetters;
use crate::ingest::{self, Backoff, IngestError, Received};
use crate::metrics::SourceMetrics;
use crate::publish::Publish;

/// What [`Broker::connect`] gives: a subscribed session, or its error.
pub type Connected<B> = Result<<B as Broker>::Session, <<B as Broker>::Session as Session>::Error>;

/// How to reach a broker.
pub trait Broker: Send {
    type Session: Session;
    /// Connects to the `turn`-th host of the failover list (wrapping) and
    /// subscribes.
    fn connect(&mut self, turn: usize) -> impl Future<Output = Connected<Self>> + Send;
    /// For logs: `"STOMP"`, `"AMQP"`.
    fn protocol(&self) -> &'static str;
}

/// One subscribed connection.
pub trait Session: Send {
    type Message: Send;
    type Error: std::error::Error + Send + Sync + 'static;
    /// The next message; an error ends the session.
    fn next(&mut self) -> impl Future<Output = Result<Self::Message, Self::Error>> + Send;
    /// Its id (for dead-letter names) and body.
    fn received(message: &Self::Message, at: Instant) -> Received;
    /// Acknowledges every message of a batch made durable.
    fn ack(
        &mut self,
        batch: &[Self::Message],
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// Closes without acknowledging more: what was not acknowledged is redelivered.
    fn close(self) -> impl Future<Output = ()> + Send;
    /// For logs: the host (never a URI: it may carry a password).
    fn peer(&self) -> String;
}

/// Why a session stopped consuming (always a failure: a healthy session consumes
/// until the router stops).
#[derive(Debug, thiserror::Error)]
pub enum Ended<E: std::error::Error + 'static> {
    #[error(transparent)]
    Session(E),
    #[error(transparent)]
    Ingest(#[from] IngestError),
    #[error("the event consumer panicked")]
    Panicked,
}

/// Runs `broker` until `stop` resolves (or the consumer panicked: then it logs and
/// returns, and the router keeps serving its last table).
pub async fn run<B: Broker, P: Publish + 'static>(
    mut broker: B,
    consumer: Consumer<P>,
    dead: DeadLetters,
    metrics: SourceMetrics,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let protocol = broker.protocol();
    let mut consumer = Some(consumer);
    let mut backoff = Backoff::default();
    let mut turn = 0usize;
    while let Some(c) = consumer.take() {
        let connected = tokio::select! {
            _ = &mut stop => return,
            s = broker.connect(turn) => s,
        };
        match connected {
            Ok(mut session) => {
                metrics.connected.set(1);
                backoff.reset();
                let peer = session.peer();
                tracing::info!(protocol, peer = %peer, "consuming routing events");
                let (c, ended) = tokio::select! {
                    _ = &mut stop => {
                        metrics.connected.set(0);
                        session.close().await;
                        return;
                    }
                    r = consume(&mut session, c, &dead, &metrics) => r,
                };
                metrics.connected.set(0);
                session.close().await;
                if matches!(ended, Ended::Panicked) {
                    tracing::error!(
                        protocol,
                        "the event consumer panicked; the source has stopped"
                    );
                    return;
                }
                tracing::warn!(protocol, peer = %peer, error = %ended, "broker session ended; reconnecting");
                consumer = c;
            }
            Err(e) => {
                tracing::warn!(protocol, error = %e, "no broker reachable; retrying");
                consumer = Some(c);
            }
        }
        turn = turn.wrapping_add(1);
        if !ingest::wait_to_reconnect(&mut backoff, &metrics, stop.as_mut()).await {
            return;
        }
    }
}

/// Consumes until the session fails. Returns the consumer (unless it panicked).
async fn consume<S: Session, P: Publish + 'static>(
    session: &mut S,
    mut consumer: Consumer<P>,
    dead: &DeadLetters,
    metrics: &SourceMetrics,
) -> (Option<Consumer<P>>, Ended<S::Error>) {
    loop {
        let first = match session.next().await {
            Ok(m) => m,
            Err(e) => return (Some(consumer), Ended::Session(e)),
        };
        let mut messages = vec![first];
        let mut failed = None;
        while messages.len() < ingest::MAX_BATCH {
            match session.next().now_or_never() {
                Some(Ok(m)) => messages.push(m),
                Some(Err(e)) => {
                    failed = Some(e);
                    break;
                }
                None => break,
            }
        }
        let now = Instant::now();
        let batch = messages.iter().map(|m| S::received(m, now)).collect();
        let (c, r) = ingest::ingest_off_thread(consumer, dead, metrics, batch).await;
        let Some(c) = c else {
            return (None, Ended::Panicked);
        };
        consumer = c;
        if let Err(e) = r {
            // Not acknowledged: closing the session makes the broker redeliver.
            return (Some(consumer), e.into());
        }
        if let Err(e) = session.ack(&messages).await {
            return (Some(consumer), Ended::Session(e));
        }
        if let Some(e) = failed {
            return (Some(consumer), Ended::Session(e));
        }
    }
}
