//! The OpenShift routing SPI, from the broker's messages to a durable routing state.
//!
//! An event's path, one module a step:
//! - [`decode`]: one message body (Psych YAML) → a typed, validated event;
//! - [`apply`]: the routing state and the idempotent rules that apply an event;
//! - [`persist`]: the state on disk, saved durably before anything is acknowledged;
//! - [`publish`]: the sink that receives each durable change (the router's table).
//!
//! [`consumer`] runs that path for a batch and says when a source may acknowledge;
//! [`source`] holds the sources (the spool directory, STOMP for ActiveMQ, AMQP for
//! RabbitMQ), which share [`ingest`] (one message → durable → ack, reconnect
//! back-off); [`deadletter`] parks what cannot be decoded, with the reason;
//! [`redact`] takes private keys out of the spool's processed copies;
//! [`metrics`] counts all of it and imports nothing.
//!
//! Turning the state into a route table is the router's job: this crate knows nothing
//! of HTTP.

pub mod apply;
pub mod consumer;
pub mod deadletter;
pub mod decode;
pub mod ingest;
pub mod metrics;
pub mod persist;
pub mod publish;
pub mod redact;
pub mod shard;
pub mod source;

#[cfg(any(test, feature = "test-util"))]
pub mod fixtures;

pub use apply::{App, AppKey, AppKeyRef, RoutingState};
pub use consumer::{Consumer, Disposition};
pub use decode::{AppId, CertBundle, Endpoint, RoutingEvent};
pub use persist::Store;
pub use publish::Publish;
pub use source::spool::Spool;
