//! The router: HTTP routing by Host for OpenShift-style applications, fed by
//! routing-SPI events.
//!
//! Two paths meet at one `ArcSwap<RouteTable>`:
//! - **an event** (in `spi-consumer`: decoded, applied, persisted) is published by
//!   [`table::build`] into a new route table (and the certificate index);
//! - **a request** is accepted ([`request::connection::serve`]), routed by Host
//!   ([`request::phases::route`]), admitted by its app's policy ([`policy`]: limits,
//!   access rules, affinity), balanced over the route's members ([`table::balance`]),
//!   forwarded ([`request::phases::send`]; one retry decision, [`request::phases::retry`]) over a
//!   member connection ([`upstream`]), and answered ([`request::phases::body`], errors in [`request::phases::error`]).
//!
//! Dependencies run one way: `request → table → members → upstream → metrics`;
//! [`tls`] serves both ends; [`config`] knows only each module's settings types;
//! [`startup`] wires everything; [`admin`] reads the table and the members;
//! the `relay` crate carries tunnels and gives both `request` and `upstream` the
//! one "no progress for this long" deadline (`relay::stall`);
//! [`workers`] are the per-core runtimes the accept loops hand connections to.

pub mod admin;
pub mod config;
pub mod fds;
pub mod issuer;
pub mod keyed;
pub mod log_format;
pub mod log_limit;
pub mod members;
pub mod metrics;
pub mod pair;
pub mod policy;
pub mod quic;
pub mod reconcile;
pub mod request;
pub mod ring;
pub mod startup;
pub mod syslog;
pub mod table;
pub mod tcp;
pub mod tls;
pub mod upgrade;
pub mod upstream;
pub mod workers;

pub use startup::{Router, StartError};
