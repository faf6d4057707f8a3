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
    /// The listener's kill switch: the grace is over (see [`close_cleanly`]).
    pub kill: Option<tokio::sync::watch::Receiver<bool>>,
}

/// How long a tunnel closed by the kill switch waits for its client's end
/// (see [`close_cleanly`]), and the listener's drain for its tunnels.
pub const LINGER: Duration = Duration::from_secs(1);

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
        let (mut c, mut m) = (Copied(TokioIo::new(c)), Copied(TokioIo::new(m)));
        let relayed = relay(&mut c, &mut m, self.idle_timeout, &self.member);
        match self.kill {
            Some(mut kill) => tokio::select! {
                () = relayed => {}
                () = crate::request::connection::listener::stopped(&mut kill) => {
                    close_cleanly(c.0, m.0).await;
                }
            },
            None => relayed.await,
        }
        drop(self.connection);
        drop(self.hold);
    }
}

/// A tunnel the kill switch ends (the grace is over, the process is about to
/// end): each side is told the stream ended (FIN; close_notify too over TLS),
/// and what the client still sends is read and dropped until it closes its
/// side, for at most [`LINGER`]. Closed with bytes unread, or left to the
/// process's end, the socket would answer them with a reset (found by the
/// pair's planned-move test: a WebSocket sending every 20 ms was reset at the
/// grace's end about one run in ten).
async fn close_cleanly<C, M>(mut client: C, mut member: M)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    M: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let _ = tokio::time::timeout(LINGER, async {
        let _ = tokio::join!(client.shutdown(), member.shutdown());
        let mut scratch = [0u8; 2048];
        while let Ok(n) = client.read(&mut scratch).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// Relays bytes both ways until both sides have closed (each half-close passed on)
/// or nothing has moved either way for `idle_timeout`, through the one relay
/// ([`::relay`]: no buffer while idle, splice between plain TCP sockets). Shared by
/// upgraded connections, TLS passthrough and TCP ports.
pub async fn relay<A: Stream, B: Stream>(
    a: &mut A,
    b: &mut B,
    idle_timeout: Duration,
    member: &str,
) {
    match ::relay::relay(a, b, ::relay::Options::idle(idle_timeout)).await {
        Ok(totals) => tracing::debug!(member, up = totals.up, down = totals.down, "tunnel done"),
        Err(RelayError::Idle) => {
            tracing::debug!(member, "tunnel idle: closed (limits.tunnel_idle_timeout)");
        }
        Err(e) => tracing::debug!(member, error = %e, "tunnel ended"),
    }
}
