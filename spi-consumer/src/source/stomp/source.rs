//! The STOMP event source: ActiveMQ (or any STOMP 1.2 broker) through the shared
//! broker loop ([`crate::source::broker`]): decode, apply, park, save, publish, and
//! only then ACK; on a failure the session is dropped and re-opened on the next host
//! of the failover list, and the broker redelivers what was not acknowledged.

use std::future::Future;
use std::time::Instant;

use super::session::{Message, SessionConfig, StompError, StompSession};
use crate::consumer::Consumer;
use crate::deadletter::DeadLetters;
use crate::ingest::Received;
use crate::metrics::SourceMetrics;
use crate::publish::Publish;
use crate::source::broker;

/// Runs until `stop` resolves (or the consumer panicked).
pub async fn run<P: Publish + 'static>(
    config: SessionConfig,
    consumer: Consumer<P>,
    dead: DeadLetters,
    metrics: SourceMetrics,
    stop: impl Future<Output = ()>,
) {
    broker::run(Stomp(config), consumer, dead, metrics, stop).await
}

struct Stomp(SessionConfig);

impl broker::Broker for Stomp {
    type Session = StompSubscription;

    async fn connect(&mut self, turn: usize) -> Result<StompSubscription, StompError> {
        let session = StompSession::connect(&self.0, turn).await?;
        Ok(StompSubscription {
            session,
            timeout: self.0.timeout,
        })
    }

    fn protocol(&self) -> &'static str {
        "STOMP"
    }
}

struct StompSubscription {
    session: StompSession,
    /// How long a DISCONNECT may wait for its receipt.
    timeout: std::time::Duration,
}

impl broker::Session for StompSubscription {
    type Message = Message;
    type Error = StompError;

    async fn next(&mut self) -> Result<Message, StompError> {
        self.session.next_message().await
    }

    fn received(m: &Message, at: Instant) -> Received {
        Received {
            id: m.message_id.clone(),
            body: m.body.clone(),
            at,
        }
    }

    async fn ack(&mut self, batch: &[Message]) -> Result<(), StompError> {
        self.session.ack_all(batch).await
    }

    async fn close(self) {
        let _ = self.session.disconnect(self.timeout).await;
    }

    fn peer(&self) -> String {
        self.session.host.clone()
    }
}
