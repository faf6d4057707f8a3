//! The node TCP port proxy.
//!
//! One program, two modes that a node may run alone or together:
//!
//! - **gear** (OpenShift): a durable table `public port → gear ip:port`, changed by the
//!   operator CLI (`portproxy add|remove|remove-uid|show|allocate`) over a local admin
//!   socket; each mapping is one listener on the node's public address.
//! - **cluster** (Simplenetes): `proxy.conf`, `hosts.conf` and `portmappings.conf`,
//!   one listener per cluster port plus the proxy port that peer proxies talk to, wire
//!   compatible with the deployed JavaScript proxy.
//!
//! The life of a connection, in module order:
//! accepted (`gear::listener`, `cluster::ports`, `cluster::peer`) → admitted
//! (`limits`: global cap) → target chosen (`gear::table` lookup, or `cluster::route`
//! over the hosts with the `cluster::wire` handshake) → PROXY header expected, stripped,
//! passed or added (`proxy_protocol`) → bytes relayed both ways (the `relay` crate).
//!
//! The update paths never touch a connection: `gear::admin` changes the table (persisted
//! by `gear::store` before the answer), `cluster::reload` swaps whole parsed tables
//! (`cluster::files`) and diffs the listener set.
//!
//! Modules depend one way, with no cycle: `config` (the file) → the settings types
//! of `gear`, `cluster` and `limits`; `gear`, `cluster` → `server` (accept loops and
//! the relay) → `limits`, `metrics`; `numbers` (ports written plainly) at the bottom.

pub mod cluster;
pub mod config;
pub mod gear;
pub mod limits;
pub mod metrics;
pub mod numbers;
/// The PROXY protocol (its own crate, shared with the router).
///
/// **Trust rule.** A PROXY header is honoured only from a trusted source: the hosts
/// of `hosts.conf` and the networks of `cluster.trusted_sources` (e.g. the
/// ingress). From any other source a connection whose first bytes are a PROXY
/// header is refused and counted
/// (`portproxy_proxy_protocol_rejects_total{reason="untrusted"}`), so a pod can
/// never forge a client address for a `sendProxy` target. Unlike the JS proxy we
/// never guess on untrusted sockets.
pub use proxy_protocol;
pub mod server;
