//! TLS passthrough ("SNI proxy"): on the HTTPS listener, a ClientHello whose server
//! name belongs to an app whose members terminate TLS themselves (endpoint protocol
//! `tls` without `https`/`wss`) is not answered by the router. Its bytes, and every
//! byte after them, are relayed untouched to one of that app's members, chosen by the
//! route's balancer: the gear holds the key and presents its own certificate.
//!
//! The path is the request path's, for bytes: accepted ([`super::serve`]) → routed
//! (the SNI name in the live table) → balanced (the route's pick, one other member if
//! the first cannot be reached, since nothing was sent yet) → forwarded (a raw TCP
//! connection and [`super::tunnel::relay`] (splice between the two sockets), under `limits.tunnel_idle_timeout`). The
//! member's slot becomes a tunnel count as for WebSocket. Failures close the
//! connection (there is no HTTP to answer in) and are counted in
//! `router_tls_passthrough_total{result}` and, for member faults, against the member.

use std::sync::Arc;

use per_source::ClientKey;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::activity::Activity;
use crate::members::{Member, MemberSlot};
use crate::metrics::UpstreamError;
use crate::request::Proxy;
use crate::request::phases::checkout::TcpCheckout;
use crate::request::phases::retry::Replay;
use crate::table::{Route, Target};

impl Proxy {
    /// The passthrough route for a ClientHello's server name, if it has one.
    pub fn passthrough_route(&self, sni: &str) -> Option<Arc<Route>> {
        let table = self.table.load();
        if table.passthrough() == 0 {
            return None;
        }
        table.lookup(sni).filter(|r| r.passthrough).cloned()
    }

    /// Relays the client's TLS connection (`hello`: the bytes read so far) to a
    /// member of `route` until either side closes or it idles.
    pub async fn pass_through(
        &self,
        route: Arc<Route>,
        mut client: TcpStream,
        hello: Vec<u8>,
        peer: ClientKey,
        connection: Arc<Activity>,
    ) {
        let metrics = &self.metrics.passthrough;
        let pick = |not: Option<&Member>| route.pick_from(&route.members, not).cloned();
        let (target, slot, mut member) = match self.dial_picked(pick, peer).await {
            Ok(dialed) => dialed,
            Err(Dial::NoMember) => {
                metrics.with_label_values(&["no_member"]).inc();
                return;
            }
            Err(Dial::Failed) => {
                metrics.with_label_values(&["member_failed"]).inc();
                return;
            }
        };
        if member.write_all(&hello).await.is_err() {
            target.member.health.record_failure();
            self.metrics.upstream_error(UpstreamError::Reset);
            metrics.with_label_values(&["member_failed"]).inc();
            return;
        }
        target.member.health.record_success();
        metrics.with_label_values(&["relayed"]).inc();
        let _tunnel = slot.into_tunnel();
        let _ = client.set_nodelay(true);
        super::tunnel::relay(
            &mut client,
            &mut member,
            self.tunnel_idle_timeout,
            &target.member.addr,
        )
        .await;
        drop(connection);
    }

    /// A member chosen by `pick` (given the member to avoid, if any), a slot on it
    /// and a raw TCP connection to it, for passthrough and TCP ports: the HTTP
    /// path's checkout ([`crate::request::phases::checkout`]), so another member is tried when the
    /// first cannot be reached (nothing was sent) by the same retry decision.
    /// Every failure is counted in `router_upstream_errors_total`, and against
    /// the member when it is the member's fault.
    pub(crate) async fn dial_picked(
        &self,
        pick: impl Fn(Option<&Member>) -> Option<Target>,
        peer: ClientKey,
    ) -> Result<(Target, MemberSlot, TcpStream), Dial> {
        let first = pick(None).ok_or(Dial::NoMember)?;
        let other = |not: &Member| pick(Some(not));
        let how = TcpCheckout { source: peer };
        let (target, (slot, stream)) = self
            .checkout_or_else(first, (Replay::Connection, other), how)
            .await
            .map_err(|_| Dial::Failed)?;
        Ok((target, slot, stream))
    }
}

/// Why [`Proxy::dial_picked`] gave no connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dial {
    /// No member to pick.
    NoMember,
    /// The members tried could not be reached (counted already).
    Failed,
}
