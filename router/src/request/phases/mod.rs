//! One request's life: its phases, in order, and what they share.
//!
//! A request is served by [`Proxy::answer`](crate::request::Proxy::answer): its [`context::Context`] (what its
//! phases share) is made, the attempt loop ([`attempt`]) runs its phases in
//! order, each a function in the file named after it, and the log phase
//! ([`log`]) attaches what its end records:
//! 1. **route** ([`route`]): `CONNECT` refused (405) and an ambiguous length
//!    (400); the Host header (HTTP/1.1) or `:authority` (h2), lower-cased, port
//!    and trailing dot stripped; none or malformed → 400; over TLS, a host whose
//!    certificate is not the one the connection presented → 421; one load of
//!    the live table; unknown host → 404; the app's policy and the member its
//!    affinity cookie names; plain HTTP for a host with a certificate → 301/308;
//! 2. **admit** ([`admit`]): the app's policy admits the client (403, 429, 503);
//! 3. **checkout** ([`checkout`]): a member picked (the cookie's, else the
//!    balancer's, see [`crate::table::balance`]; none → 503), a free in-flight
//!    slot on it (waiting briefly; none → 503) and an idle or new connection.
//!    If that fails, nothing was sent: an idempotent request tries once more
//!    on another member;
//! 4. **send** ([`send`]): the same method, path and query, Host and headers
//!    (minus hop-by-hop, plus `X-Forwarded-*`), its body read ahead up to
//!    `limits.body_buffer_bytes` before a member is involved (see [`upload`];
//!    too slow → 408, malformed → 400), on a kept-alive HTTP/1.1 connection (see
//!    [`crate::upstream`]) or an h2 stream; refused/reset → 502, connect or
//!    response-header timeout → 504. Connection failures and resets count
//!    towards the member's passive ejection (see [`crate::members::health`]);
//! 5. **retry decision** ([`retry`]): an idempotent request without a body
//!    whose member closed before any response byte is sent once more (on a new
//!    connection, or on another member);
//! 6. **respond** ([`respond`]): the member's response streamed back (minus
//!    hop-by-hop headers); a `101 Switching Protocols` becomes a byte tunnel
//!    between the two upgraded connections (WebSocket);
//! 7. **log** ([`log`]): the head's time and member for the access line, and
//!    the completion that counts the request when its body is done.
//!
//! Every error becomes a response in one place, [`error::ProxyError::response`]. If the
//! client goes away mid-request, the connection (hyper's, or the own HTTP/1.1
//! path in [`crate::request::connection::h1`]) drops this future: on HTTP/1 that closes the
//! member connection (it is not reused), on h2 it resets only that stream.

pub mod access_log;
pub mod admit;
pub mod attempt;
pub mod body;
pub mod checkout;
pub mod context;
pub mod error;
pub mod h2_member;
pub mod headers;
pub mod log;
pub mod respond;
pub mod retry;
pub mod route;
pub mod send;
pub mod trace;
pub mod upload;
