//! An upgraded connection (WebSocket): bytes both ways between client and member
//! until either side closes, or until nothing has moved either way for
//! `limits.tunnel_idle_timeout` (haproxy's `timeout tunnel`; OpenShift's router uses
//! 1 h). Without that deadline a tunnel nobody uses would hold its member connection
//! and its client connection's place for ever.
//!
//! While it lives the tunnel is counted on its member (`tunnels`, apart from the
//! request slots: see [`MemberSlot::into_tunnel`]) and holds the client connection's
//! [`Activity`] (which holds its place among `limits.max_connections`).

use std::sync::Arc;
use std::time::Duration;

use ::relay::{Copied, RelayError, Stream};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

use super::activity::Activity;
#[cfg(doc)]
use crate::members::MemberSlot;
use crate::members::TunnelSlot;

/// What an upgraded connection holds while its tunnel lives.
pub struct Tunnel {
    pub slot: TunnelSlot,
    pub member: Arc<str>,
    /// The client connection's activity (its place on the listener).
    pub connection: Arc<Activity>,
    pub idle_timeout: Duration,
    /// Its count against the app's `max_connections_per_client`, if limited.
    pub hold: Option<crate::policy::clients::ClientSlot>,
}

impl Tunnel {
    /// Waits for both upgrades, then relays until a side closes or the tunnel idles.
    pub async fn run(self, client: OnUpgrade, member: OnUpgrade) {
        let (c, m) = match tokio::try_join!(client, member) {
            Ok(both) => both,
            Err(e) => {
                tracing::debug!(member = %self.member, error = %e, "upgrade failed");
                return;
            }
        };
        relay(
            Copied(TokioIo::new(c)),
            Copied(TokioIo::new(m)),
            self.idle_timeout,
            &self.member,
        )
        .await;
        drop(self.connection);
        drop(self.hold);
    }
}

/// Relays bytes both ways until both sides have closed (each half-close passed on)
/// or nothing has moved either way for `idle_timeout`, through the one relay
/// ([`::relay`]: no buffer while idle, splice between plain TCP sockets). Shared by
/// upgraded connections, TLS passthrough and TCP ports.
pub async fn relay<A: Stream, B: Stream>(mut a: A, mut b: B, idle_timeout: Duration, member: &str) {
    match ::relay::relay(&mut a, &mut b, ::relay::Options::idle(idle_timeout)).await {
        Ok(totals) => tracing::debug!(member, up = totals.up, down = totals.down, "tunnel done"),
        Err(RelayError::Idle) => {
            tracing::debug!(member, "tunnel idle: closed (limits.tunnel_idle_timeout)");
        }
        Err(e) => tracing::debug!(member, error = %e, "tunnel ended"),
    }
}
