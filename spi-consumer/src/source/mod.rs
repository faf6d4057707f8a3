//! Where events come from. Each source feeds message bodies to the
//! [`Consumer`](crate::consumer::Consumer) and acknowledges only what a commit made
//! durable:
//! - [`spool`]: files in a directory (the embedded default; no broker needed);
//!   one commit per directory scan;
//! - [`stomp`]: STOMP 1.2 to ActiveMQ (our client: session, frames, TLS);
//! - [`amqp`]: AMQP 0-9-1 to RabbitMQ (lapin).
//!
//! The broker sources run one loop, [`broker`]: reconnect with back-off, group
//! commits through [`crate::ingest`], acknowledgements only after a durable save.

pub mod amqp;
pub mod broker;
pub mod spool;
pub mod stomp;
