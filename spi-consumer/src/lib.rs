//! The OpenShift routing SPI, from the broker's messages to a durable routing state.
//!
//! - [`event`]: decode one message body (Psych YAML) into a typed event;
//! - [`state`]: the routing state and the idempotent rules that apply an event;
//! - [`persist`]: the state on disk, saved atomically before anything is acknowledged;
//! - [`consumer`]: the decode → apply → persist → publish discipline every source uses;
//! - [`deadletter`]: undecodable messages parked on disk with the reason;
//! - [`ingest`]: what every broker source does with one message before acknowledging it;
//! - [`spool`]: the spool-directory source (the embedded default, no broker needed);
//! - [`stomp`]: the STOMP 1.2 client for ActiveMQ;
//! - [`amqp`]: the AMQP 0-9-1 source for RabbitMQ (lapin);
//! - [`metrics`]: Prometheus counters for all of the above.
//!
//! Turning the state into a route table is the router's job: this crate knows nothing
//! of HTTP.

pub mod amqp;
pub mod consumer;
pub mod deadletter;
pub mod event;
pub mod ingest;
pub mod metrics;
pub mod persist;
pub mod spool;
pub mod state;
pub mod stomp;

#[cfg(any(test, feature = "test-util"))]
pub mod fixtures;

pub use consumer::{Consumer, Disposition, Publish};
pub use event::{AppId, CertBundle, Endpoint, RoutingEvent};
pub use persist::Store;
pub use spool::Spool;
pub use state::{App, AppKey, RoutingState};
