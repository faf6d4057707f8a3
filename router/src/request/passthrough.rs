//! TLS passthrough ("SNI proxy"): on the HTTPS listener, a ClientHello whose server
//! name belongs to an app whose members terminate TLS themselves (endpoint protocol
//! `tls` without `https`/`wss`) is not answered by the router. Its bytes, and every
//! byte after them, are relayed untouched to one of that app's members, chosen by the
//! route's balancer: the gear holds the key and presents its own certificate.
//!
//! The path is the request path's, for bytes: accepted ([`super::accept`]) → routed
//! (the SNI name in the live table) → balanced (the route's pick, one other member if
//! the first cannot be reached, since nothing was sent yet) → forwarded (a raw TCP
//! connection and [`super::tunnel::relay`], under `limits.tunnel_idle_timeout`). The
//! member's slot becomes a tunnel count as for WebSocket. Failures close the
//! connection (there is no HTTP to answer in) and are counted in
//! `router_tls_passthrough_total{result}` and, for member faults, against the member.

use std::net::IpAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::Proxy;
use super::activity::Activity;
use crate::members::{Full, InFlight};
use crate::metrics::UpstreamError;
use crate::table::{Route, Target};

impl Proxy {
    /// The passthrough route for a ClientHello's server name, if it has one.
    pub fn passthrough_route(&self, sni: &str) -> Option<Arc<Route>> {
        let table = self.table.load();
        if table.passthrough == 0 {
            return None;
        }
        table.lookup(sni).filter(|r| r.passthrough).cloned()
    }

    /// Relays the client's TLS connection (`hello`: the bytes read so far) to a
    /// member of `route` until either side closes or it idles.
    pub async fn pass_through(
        &self,
        route: Arc<Route>,
        client: TcpStream,
        hello: Vec<u8>,
        peer: IpAddr,
        connection: Arc<Activity>,
    ) {
        let metrics = &self.metrics.passthrough;
        let Some(first) = route.pick().cloned() else {
            metrics.with_label_values(&["no_member"]).inc();
            return;
        };
        let (target, (slot, mut member)) = match self.dial_member(&first, peer).await {
            Ok(up) => (first, up),
            Err(e) => match route.pick_other(&first.member).cloned() {
                Some(other) => match self.dial_member(&other, peer).await {
                    Ok(up) => (other, up),
                    Err(e) => return self.passthrough_failed(e),
                },
                None => return self.passthrough_failed(e),
            },
        };
        if member.write_all(&hello).await.is_err() {
            target.member.health.record_failure();
            return self.passthrough_failed(UpstreamError::Reset);
        }
        target.member.health.record_success();
        metrics.with_label_values(&["relayed"]).inc();
        let _tunnel = slot.into_tunnel();
        let _ = client.set_nodelay(true);
        super::tunnel::relay(
            client,
            member,
            self.tunnel_idle_timeout,
            &target.member.addr,
        )
        .await;
        drop(connection);
    }

    /// A slot on `target` and a raw TCP connection to it (passthrough and TCP
    /// ports); a member's fault is recorded against it.
    pub(crate) async fn dial_member(
        &self,
        target: &Target,
        peer: IpAddr,
    ) -> Result<(InFlight, TcpStream), UpstreamError> {
        let member = &target.member;
        let slot = member
            .acquire(self.queue_timeout, Some(peer))
            .await
            .map_err(|full| match full {
                Full::Member => UpstreamError::Busy,
                Full::Source => UpstreamError::SourceShare,
            })?;
        match member.pool.dial(self.upstream).await {
            Ok(stream) => Ok((slot, stream)),
            Err(e) => {
                let kind = e.kind();
                if kind.members_fault() {
                    member.health.record_failure();
                }
                Err(kind)
            }
        }
    }

    fn passthrough_failed(&self, kind: UpstreamError) {
        self.metrics.upstream_error(kind);
        self.metrics
            .passthrough
            .with_label_values(&["member_failed"])
            .inc();
    }
}
