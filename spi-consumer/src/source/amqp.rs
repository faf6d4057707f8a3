//! The AMQP 0-9-1 event source (RabbitMQ), with lapin.
//!
//! A durable queue per router, optionally bound to an exchange the broker publishes
//! to; manual acknowledgements; a prefetch limit (`basic.qos`). Every delivery goes
//! through the shared broker loop ([`crate::source::broker`]) and is acknowledged
//! only once applied and durable. If that fails, or the connection drops, the
//! connection is closed without acknowledging, so RabbitMQ requeues the message; the
//! source reconnects with backoff (100 ms doubling to 30 s), rotating through its
//! list of broker URIs.

use std::future::Future;
use std::time::Instant;

use bytes::Bytes;
use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

use crate::consumer::Consumer;
use crate::deadletter::DeadLetters;
use crate::ingest::Received;
use crate::metrics::SourceMetrics;
use crate::publish::Publish;
use crate::source::broker;

/// What to consume: the router's `spi.amqp` section, as written.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AmqpConfig {
    /// `amqp://user:pass@host:5672/%2f`, tried in turn. They may hold a password:
    /// keep the file that names them readable by the router only.
    pub uris: Vec<String>,
    /// A durable queue per router (declared if missing).
    pub queue: String,
    /// Bind the queue to this exchange (it must exist), if set.
    pub exchange: Option<String>,
    #[serde(default = "default_routing_key")]
    pub routing_key: String,
    /// Messages the broker may send before the first is acknowledged.
    #[serde(default = "default_prefetch")]
    pub prefetch: u16,
}

fn default_routing_key() -> String {
    "#".into()
}

/// As many as one group commit takes: see `spi.stomp.prefetch`'s default.
fn default_prefetch() -> u16 {
    crate::ingest::MAX_BATCH as u16
}

/// Runs until `stop` resolves (or the consumer panicked).
pub async fn run<P: Publish + 'static>(
    config: AmqpConfig,
    consumer: Consumer<P>,
    dead: DeadLetters,
    metrics: SourceMetrics,
    stop: impl Future<Output = ()>,
) {
    broker::run(Amqp(config), consumer, dead, metrics, stop).await
}

struct Amqp(AmqpConfig);

/// Why an AMQP session ended.
#[derive(Debug, thiserror::Error)]
pub enum AmqpError {
    #[error("AMQP: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("no AMQP URI configured")]
    NoUri,
    #[error("the broker cancelled the consumer")]
    Cancelled,
}

impl broker::Broker for Amqp {
    type Session = AmqpSubscription;

    async fn connect(&mut self, turn: usize) -> Result<AmqpSubscription, AmqpError> {
        let uris = &self.0.uris;
        let uri = uris.get(turn % uris.len().max(1)).ok_or(AmqpError::NoUri)?;
        let conn = Connection::connect(uri, ConnectionProperties::default()).await?;
        let deliveries = subscribe(&conn, &self.0).await?;
        Ok(AmqpSubscription {
            conn,
            deliveries,
            queue: self.0.queue.clone(),
        })
    }

    fn protocol(&self) -> &'static str {
        "AMQP"
    }
}

struct AmqpSubscription {
    conn: Connection,
    deliveries: lapin::Consumer,
    queue: String,
}

impl broker::Session for AmqpSubscription {
    type Message = Delivery;
    type Error = AmqpError;

    async fn next(&mut self) -> Result<Delivery, AmqpError> {
        match self.deliveries.next().await {
            Some(d) => Ok(d?),
            None => Err(AmqpError::Cancelled),
        }
    }

    fn received(d: &Delivery, at: Instant) -> Received {
        Received {
            id: format!("amqp-{}", d.delivery_tag),
            body: Bytes::from(d.data.clone()),
            at,
        }
    }

    async fn ack(&mut self, batch: &[Delivery]) -> Result<(), AmqpError> {
        for d in batch {
            d.ack(BasicAckOptions::default()).await?;
        }
        Ok(())
    }

    async fn close(self) {
        // Unacknowledged deliveries are requeued by RabbitMQ.
        let _ = self.conn.close(0, "router closing".into()).await;
    }

    fn peer(&self) -> String {
        // Never the URI: it may carry a password.
        format!("queue {}", self.queue)
    }
}

async fn subscribe(
    conn: &Connection,
    config: &AmqpConfig,
) -> Result<lapin::Consumer, lapin::Error> {
    let channel = conn.create_channel().await?;
    channel
        .basic_qos(config.prefetch.max(1), BasicQosOptions::default())
        .await?;
    channel
        .queue_declare(
            config.queue.as_str().into(),
            QueueDeclareOptions::durable(),
            FieldTable::default(),
        )
        .await?;
    if let Some(exchange) = &config.exchange {
        channel
            .queue_bind(
                config.queue.as_str().into(),
                exchange.as_str().into(),
                config.routing_key.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
    }
    channel
        .basic_consume(
            config.queue.as_str().into(),
            "router".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
}
