//! Where events come from. Each source feeds message bodies to the
//! [`Consumer`](crate::consumer::Consumer) and acknowledges only what a commit made
//! durable:
//! - [`spool`]: files in a directory (the embedded default; no broker needed);
//!   one commit per directory scan;
//! - [`stomp`]: STOMP 1.2 to ActiveMQ (our client: session, frames, TLS);
//! - [`amqp`]: AMQP 0-9-1 to RabbitMQ (lapin).
//!
//! The broker sources share [`crate::ingest`]: one message made durable and live
//! before its ack, batched group commits, and the reconnect back-off.

pub mod amqp;
pub mod spool;
pub mod stomp;
