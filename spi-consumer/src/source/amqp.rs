//! The AMQP 0-9-1 event source (RabbitMQ), with lapin.
//!
//! A durable queue per router, optionally bound to an exchange the broker publishes
//! to; manual acknowledgements; a prefetch limit (`basic.qos`). Every delivery goes
//! through [`crate::ingest`] and is acknowledged only once applied and durable. If
//! that fails, or the connection drops, the channel is closed without acknowledging,
//! so RabbitMQ requeues the message; the source reconnects with backoff (100 ms
//! doubling to 30 s), rotating through its list of broker URIs.

use std::future::Future;

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

use crate::consumer::Consumer;
use crate::deadletter::DeadLetters;
use crate::ingest::{self, Backoff, IngestError, Received};
use crate::metrics::SourceMetrics;
use crate::publish::Publish;

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

fn default_prefetch() -> u16 {
    10
}

#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("AMQP: {0}")]
    Amqp(#[from] lapin::Error),
    #[error(transparent)]
    Ingest(#[from] IngestError),
    #[error("the broker cancelled the consumer")]
    Cancelled,
    #[error("the consumer panicked")]
    Panicked,
}

/// Runs until `stop` resolves.
pub async fn run<P: Publish + 'static>(
    config: AmqpConfig,
    consumer: Consumer<P>,
    dead: DeadLetters,
    metrics: SourceMetrics,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut consumer = Some(consumer);
    let mut backoff = Backoff::default();
    let mut turn = 0usize;
    while let Some(c) = consumer.take() {
        let Some(uri) = config.uris.get(turn % config.uris.len().max(1)) else {
            tracing::error!("no AMQP URI configured; the AMQP source has stopped");
            return;
        };
        let (c, ended) = tokio::select! {
            _ = &mut stop => return,
            r = session(uri, &config, c, &dead, &metrics, &mut backoff) => r,
        };
        metrics.connected.set(0);
        // Never log the URI: it may carry a password.
        tracing::warn!(error = %ended,  "AMQP session ended; reconnecting");
        if matches!(ended, Ended::Panicked) {
            tracing::error!("the event consumer panicked; the AMQP source has stopped");
            return;
        }
        consumer = c;
        turn = turn.wrapping_add(1);
        if !ingest::wait_to_reconnect(&mut backoff, &metrics, stop.as_mut()).await {
            return;
        }
    }
}

/// One connection: consume until something fails. Returns the consumer.
async fn session<P: Publish + 'static>(
    uri: &str,
    config: &AmqpConfig,
    mut consumer: Consumer<P>,
    dead: &DeadLetters,
    metrics: &SourceMetrics,
    backoff: &mut Backoff,
) -> (Option<Consumer<P>>, Ended) {
    let conn = match Connection::connect(uri, ConnectionProperties::default()).await {
        Ok(c) => c,
        Err(e) => return (Some(consumer), e.into()),
    };
    let mut deliveries = match subscribe(&conn, config).await {
        Ok(d) => d,
        Err(e) => return (Some(consumer), e.into()),
    };
    metrics.connected.set(1);
    backoff.reset();
    tracing::info!(queue = %config.queue, "consuming from AMQP");
    // Group commit, as in the STOMP source: the first delivery, then whatever has
    // already arrived, one save, then the acknowledgements.
    while let Some(first) = deliveries.next().await {
        let mut batch = vec![first];
        while batch.len() < ingest::MAX_BATCH {
            match deliveries.next().now_or_never() {
                Some(Some(d)) => batch.push(d),
                _ => break,
            }
        }
        let mut ok = Vec::with_capacity(batch.len());
        let mut failed = None;
        for d in batch {
            match d {
                Ok(d) => ok.push(d),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let now = std::time::Instant::now();
        let received = ok
            .iter()
            .map(|d| Received {
                id: format!("amqp-{}", d.delivery_tag),
                body: Bytes::from(d.data.clone()),
                at: now,
            })
            .collect();
        let (c, r) = ingest::ingest_off_thread(consumer, dead, metrics, received).await;
        let Some(c) = c else {
            return (None, Ended::Panicked);
        };
        consumer = c;
        if let Err(e) = r {
            // Unacknowledged: closing the connection makes RabbitMQ requeue them.
            let _ = conn.close(0, "cannot ingest".into()).await;
            return (Some(consumer), e.into());
        }
        for d in &ok {
            if let Err(e) = d.ack(BasicAckOptions::default()).await {
                return (Some(consumer), e.into());
            }
        }
        if let Some(e) = failed {
            return (Some(consumer), e.into());
        }
    }
    (Some(consumer), Ended::Cancelled)
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
