//! `limits:` in the configuration: what protects the listeners against clients.
//! Every bound is on by default, with the reason beside it (`docs/security.md`,
//! `docs/configuration.md`).

use std::time::Duration;

/// Protections of the listeners against clients.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Open client connections at most; beyond, new ones wait in the kernel backlog.
    pub max_connections: usize,
    /// Request line plus headers, in bytes (larger: 431). At least 8192.
    pub max_header_bytes: usize,
    /// Header fields per request (more: 431).
    pub max_headers: usize,
    /// Time a client has to send a complete request head (slowloris).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed (h1 and h2
    /// keep-alive). Before its first request a connection gets
    /// `header_read_timeout` instead.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// A write to a client that makes no progress for this long closes the
    /// connection (the client stopped reading).
    #[serde(with = "humantime_serde")]
    pub send_timeout: Duration,
    /// h2: a PING after this long without a frame from the client...
    #[serde(with = "humantime_serde")]
    pub h2_keepalive_interval: Duration,
    /// ...which must be answered within this, or the connection is closed.
    #[serde(with = "humantime_serde")]
    pub h2_keepalive_timeout: Duration,
    /// h2 streams one connection may have open at once: each may hold a member's
    /// request slot, so this bounds the share of a member one connection can take
    /// (keep it well below `upstream.max_connections_per_backend`).
    pub h2_max_concurrent_streams: u32,
    /// A request body is read up to this many bytes (or to its end) before the
    /// request takes a member's slot, within `header_read_timeout` (slow bodies
    /// then never hold a member: see [`crate::request::phases::upload`]).
    pub body_buffer_bytes: usize,
    /// Past that, a request body that makes no progress for this long ends the
    /// request with 408 (nginx's `client_body_timeout`).
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
    /// An upgraded connection (WebSocket) with no byte either way for this long is
    /// closed (haproxy's `timeout tunnel`).
    #[serde(with = "humantime_serde")]
    pub tunnel_idle_timeout: Duration,
    /// Open connections to the admin listener at most (it has the same head
    /// timeout and size limits as the client listeners).
    pub max_admin_connections: usize,
    /// Connections one client source (an IPv4 address, an IPv6 /64) may hold on
    /// one listener; unset: a quarter of `max_connections`. Beyond, its new
    /// connections are closed at once: one source cannot take a listener.
    pub max_connections_per_source: Option<usize>,
    /// The prefix an IPv4 client is keyed by in every per-client count (per
    /// source, a member's share and reserve, the apps' `rate_limit` and
    /// `max_connections_per_client`): 32, the address (see `per_source::key`).
    pub client_ipv4_prefix: u8,
    /// The same for IPv6: 64, since one host may hold a whole /64.
    pub client_ipv6_prefix: u8,
}

impl Limits {
    /// `max_connections_per_source`, or a quarter of `max_connections` (at least
    /// one): a NAT'd office of a few hundred browsers (6 connections each) stays
    /// under it, a single attacking address leaves three quarters to others.
    pub fn per_source(&self) -> usize {
        self.max_connections_per_source
            .unwrap_or(self.max_connections / 4)
            .max(1)
    }

    /// How client addresses are keyed (checked when the configuration loads).
    pub fn client_keys(&self) -> per_source::KeyRule {
        per_source::KeyRule::new(self.client_ipv4_prefix, self.client_ipv6_prefix)
            .unwrap_or_default()
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 10_000,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(10),
            max_admin_connections: 256,
            idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            h2_keepalive_interval: Duration::from_secs(30),
            h2_keepalive_timeout: Duration::from_secs(10),
            h2_max_concurrent_streams: 32,
            body_buffer_bytes: 16 * 1024,
            body_timeout: Duration::from_secs(30),
            tunnel_idle_timeout: Duration::from_secs(3600),
            max_connections_per_source: None,
            client_ipv4_prefix: 32,
            client_ipv6_prefix: 64,
        }
    }
}
