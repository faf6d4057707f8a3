//! Connections from the load balancers in front (`proxy_protocol.trusted`):
//! each starts with a PROXY header (v1 or v2, read by the `proxy-protocol`
//! crate, nothing after it consumed) naming the client, who is then the client
//! for everything the router does per client: allow and deny, rate and
//! at-once limits, the per-source connection cap, `X-Forwarded-For` and
//! `Forwarded`, the access log, spans.
//!
//! A trusted source that sends no header, an invalid one, or none within
//! `limits.header_read_timeout` is closed (haproxy's `accept-proxy`: a
//! receiver must not guess). From any other address no header is read: a
//! header sent by one is just bytes, and the request it starts is a 400.
//! The load balancer's own connections count under no per-source cap (it
//! carries many clients); each client's do, once its header names it.

use std::net::IpAddr;
use std::sync::Arc;

use super::client_conn::ClientConn;

/// Whether `peer` is one of `trusted`.
pub fn is_trusted(trusted: &[ipnet::IpNet], peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    !trusted.is_empty() && trusted.iter().any(|n| n.contains(&peer))
}

/// Reads the header of a trusted source's connection and makes its client
/// the connection's (`conn`, not shared yet); the client's per-source slot
/// (from `sources`), or why the connection ends.
pub async fn take_header(
    stream: &mut tokio::net::TcpStream,
    conn: &mut Arc<ClientConn>,
    sources: &Arc<per_source::PerSource>,
    (deadline, forwarded): (std::time::Duration, &super::client_conn::ForwardedSettings),
) -> Result<Option<per_source::SourceSlot>, String> {
    let until = tokio::time::Instant::now() + deadline;
    let client = proxy_protocol::expect::read_required(stream, until)
        .await
        .map_err(|e| e.to_string())?;
    let Some(client) = client else {
        // A header naming no client: the load balancer's own check.
        return Ok(None);
    };
    let moved = Arc::make_mut(conn);
    *moved = moved.clone().moved_to(client.ip(), forwarded);
    let slot = sources
        .slot(moved.key())
        .ok_or("the client holds limits.max_connections_per_source")?;
    Ok(Some(slot))
}
