//! Connections to members: HTTP/1.1 over TCP, kept alive and reused, driven by the
//! request that uses them.
//!
//! Why not a spawned connection task behind a shared pool (hyper-util's client)? Each
//! request would then cross tasks twice (request to the connection task, response
//! back), which measured 26 µs of CPU per proxied request on this machine against
//! 18 µs when the request's own task drives the connection (bench/RESULTS.md). So an
//! [`Upstream`] is owned, never spawned:
//! - while waiting for the response head, [`Upstream::send`](conn::UpstreamState::send) drives the connection
//!   (it writes the request and its streamed body, and reads the response);
//! - while the response body streams, the body drives it ([`Lease`]);
//! - when the body has ended, the lease returns the connection to its member's idle
//!   list ([`Pool`]); a connection whose response was not read to
//!   the end is closed instead (HTTP/1 cannot be reused mid-message).
//!
//! Idle connections are not polled, so a member closing one is noticed when it is
//! next taken: [`Upstream::is_reusable`](conn::UpstreamState::is_reusable) polls it once (no syscall unless the socket
//! became readable) and drops it if it has closed. They are dropped once idle longer
//! than `upstream.idle_timeout`, which stays below the gear haproxy's 10 s so that we
//! close first. A request sent on a reused connection that closed before any response
//! byte may be sent once more (the proxy decides: idempotent requests only).
//!
//! The HTTP/1.1 framing is ours (`conn`, reading heads with `h1-codec` on
//! `httparse`), not hyper's client: its
//! per-request dispatch (a request channel, a response oneshot, a body channel) cost
//! 1.8 µs of the 14.3 µs a keep-alive request took (`bench/RESULTS.md`, "Steps of
//! 2026-11-24").
//!
//! Upgrades (WebSocket) take a fresh connection of their own and never return it;
//! hyper's client drives those, through the switch to the tunnel.
//!
//! Members that expect TLS (`ssl_to_gear`) get it here too: a [`MemberIo`] is either
//! the TCP stream or a rustls client stream over it, with SNI = the request's host.
//! Such a connection is reused only for the same host name.

//!
//! `conn` is one connection and its framing; `pool` keeps a member's idle ones and the
//! [`Lease`] that gives a connection back when its response has ended. Nothing here
//! knows about routes or member health: callers say what a failure means.

mod conn;
/// Public for the fuzz targets (`fuzz/`).
pub mod h2;
mod pool;
mod request_body;

pub use conn::{
    ConnectSettings, Encoded, ExchangeError, MemberHead, MemberIo, MemberTls, ResponseBodyError,
    SendError, Upstream, local_shortage,
};
pub use pool::{Lease, Pool, PoolSettings};
pub use request_body::{ClientBody, RequestBody, RequestBodyError, Rest, StreamBody};
