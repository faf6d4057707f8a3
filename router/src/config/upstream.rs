//! `upstream:`: connections to members.

use super::*;

/// Connections to members.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Idle pooled connections are closed after this; keep it below the gear
    /// haproxy's 10 s keep-alive timeout so we never reuse one it is closing.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// From request sent to response headers received.
    #[serde(with = "humantime_serde")]
    pub response_timeout: Duration,
    /// Requests in flight to one member at most (the gear haproxy accepts 128).
    pub max_connections_per_backend: usize,
    /// How long a request waits for a free slot on a full member before a 503.
    #[serde(with = "humantime_serde")]
    pub queue_timeout: Duration,
    /// The share (percent) of a member's slots one client address may hold; beyond
    /// it that address waits for one of its own slots (503 after `queue_timeout`)
    /// while others are still served. 100: no
    /// per-address limit (e.g. behind a CDN that is the only client address).
    pub source_share: u8,
    /// The share (percent) of a member's slots kept for client addresses that hold
    /// few of them (see `members::reserve`): one address, or a few, cannot take a
    /// member's every slot. 0: none.
    pub source_reserve: u8,
    /// Idle connections kept per member; unset: `max_connections_per_backend`
    /// (fewer than the requests in flight closes and reopens connections under
    /// steady load: 12 000 connects in 10 s at 128 clients and 64).
    pub max_idle_per_backend: Option<usize>,
    /// `p2c` (least outstanding of two random members) or `round_robin`.
    pub balance: Balance,
    /// A member that comes up takes its share of traffic over this long
    /// (`members::warm`); zero: at once.
    #[serde(with = "humantime_serde")]
    pub slow_start: Duration,
    /// TLS towards members that expect it.
    pub tls: UpstreamTls,
}

impl Default for UpstreamConfig {
    fn default() -> UpstreamConfig {
        UpstreamConfig {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(8),
            response_timeout: Duration::from_secs(60),
            max_connections_per_backend: 100,
            queue_timeout: Duration::from_secs(1),
            source_share: 100,
            source_reserve: 10,
            max_idle_per_backend: None,
            balance: Balance::default(),
            slow_start: Duration::ZERO,
            tls: UpstreamTls::default(),
        }
    }
}

impl UpstreamConfig {
    /// Slots of one member one client address may hold (at least one).
    pub fn max_per_source(&self) -> usize {
        let share = usize::from(self.source_share.min(100));
        (self.max_connections_per_backend * share)
            .div_ceil(100)
            .max(1)
    }

    /// Idle connections kept per member (`max_idle_per_backend`, else as many as
    /// it has request slots).
    pub fn max_idle(&self) -> usize {
        self.max_idle_per_backend
            .unwrap_or(self.max_connections_per_backend)
    }
}
