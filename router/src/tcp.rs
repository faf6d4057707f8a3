//! TCP balancing on external ports (PEP 005: "the router's responsibility to provide
//! external TCP port mapping"): each `tcp.listen` entry is a router port mapped by
//! the operator to one app's non-HTTP endpoints (a `mysql` cartridge, a `tcp`
//! endpoint), chosen by cartridge name and/or endpoint type or protocol.
//!
//! The path of a connection, like a request's: accepted (this module's listener,
//! bounded by `limits.max_connections` per port) → routed (the app in the live table,
//! which keeps each rule's members up to date from the routing events, see
//! [`crate::table::build`]) → balanced (the app's balancer over those members, health
//! checked by TCP connect; one other member if the first cannot be reached, since
//! nothing was sent yet) → forwarded (an optional PROXY protocol header, then bytes
//! both ways with half-closes passed on, ended after `limits.tunnel_idle_timeout`
//! without a byte). A connection with nowhere to go, or from a client source that
//! holds `limits.max_connections_per_source` of the port already, is closed at once
//! and counted in `router_tcp_connections_total{listener, result}`.

use std::net::SocketAddr;
use std::sync::Arc;

use per_source::{ClientKey, SourceSlot};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::members::Member;
use crate::metrics::UpstreamError;
use crate::request::Proxy;
use crate::request::connection::listener::{Gate, Live, stopped};
use crate::request::connection::passthrough::Dial;
use crate::table::TcpMatch;
use proxy_protocol::Version;

/// One `tcp.listen` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpPort {
    /// Where the router listens, e.g. `0.0.0.0:33306`.
    pub address: SocketAddr,
    /// The app (name and namespace, as in its HA name).
    pub app: String,
    pub namespace: String,
    /// The endpoint's cartridge port name (`public_port_name`), e.g. `mysql-5.5`.
    #[serde(default)]
    pub cartridge: Option<String>,
    /// An endpoint type (`database`) or protocol (`mysql`, `tcp`) it must list.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// A PROXY protocol header towards the member: `none` (default), `v1`, `v2`.
    #[serde(default)]
    pub proxy_protocol: ProxyProtocol,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    #[default]
    None,
    V1,
    V2,
}

impl TcpPort {
    /// Which endpoints of which app this port goes to (what the table keeps).
    pub fn matcher(&self) -> TcpMatch {
        TcpMatch {
            app: spi_consumer::AppKey {
                name: self.app.to_ascii_lowercase().into(),
                namespace: self.namespace.to_ascii_lowercase().into(),
            },
            cartridge: self.cartridge.clone(),
            endpoint: self.endpoint.clone(),
        }
    }
}

/// Serves `port` (rule number `rule` in `tcp.listen`) until `stop` turns true;
/// relays already running go on to their end.
pub async fn listen(
    listener: TcpListener,
    rule: usize,
    port: TcpPort,
    live: Live,
    mut stop: watch::Receiver<bool>,
) {
    let name: Arc<str> = Arc::from(listener.local_addr().unwrap_or(port.address).to_string());
    let gate = Gate::new(&live);
    let errors = gate
        .current
        .proxy
        .metrics
        .accept_errors
        .with_label_values(&[&name]);
    let mut tcp = PortListener {
        listener,
        gate,
        live,
        rule,
        port: Arc::new(port),
        name: name.clone(),
    };
    accept::run(&mut tcp, &name, &errors, stopped(&mut stop)).await;
}

/// A `tcp.listen` port's steps of the one accept loop (`accept::run`): at the cap
/// a client waits for a slot (no connection is evicted for it: a relay is not
/// idle the way a keep-alive connection is).
struct PortListener {
    listener: TcpListener,
    gate: Gate,
    live: Live,
    rule: usize,
    port: Arc<TcpPort>,
    name: Arc<str>,
}

impl accept::Listener for PortListener {
    type Source = TcpListener;
    type Passed = SourceSlot;

    fn source(&mut self) -> &mut TcpListener {
        &mut self.listener
    }

    fn gate(&mut self, client: TcpStream, peer: SocketAddr) -> Option<(TcpStream, SourceSlot)> {
        // A reload: its limit and proxy settings from this connection on.
        self.gate.refresh(&self.live);
        // Its source holds its share of the port: closed at once.
        let Some(source) = self.gate.pass(peer.ip()) else {
            let metrics = &self.gate.current.proxy.metrics;
            metrics
                .tcp
                .with_label_values(&[&self.name, "source_limit"])
                .inc();
            return None;
        };
        Some((client, source))
    }

    fn slots(&self) -> Arc<tokio::sync::Semaphore> {
        self.gate.slots.sem.clone()
    }

    fn full(&mut self, client: TcpStream, _: &Self::Passed) -> Option<TcpStream> {
        Some(client)
    }

    fn serve(
        &mut self,
        client: TcpStream,
        peer: SocketAddr,
        source: Self::Passed,
        slot: tokio::sync::OwnedSemaphorePermit,
    ) {
        let (proxy, port, name) = (
            self.gate.current.proxy.clone(),
            self.port.clone(),
            self.name.clone(),
        );
        let rule = self.rule;
        tokio::spawn(async move {
            let result = relay(&proxy, rule, &port, client, (peer, source.source())).await;
            proxy.metrics.tcp.with_label_values(&[&name, result]).inc();
            drop((slot, source));
        });
    }
}

/// One client connection, from routing to the end of the relay; the result label.
async fn relay(
    proxy: &Proxy,
    rule: usize,
    port: &TcpPort,
    mut client: TcpStream,
    (peer, key): (SocketAddr, ClientKey),
) -> &'static str {
    let _ = client.set_nodelay(true);
    let local = client.local_addr().unwrap_or(port.address);
    let Some((route, targets)) = proxy.table.load().tcp_targets(&port.matcher().app, rule) else {
        return "no_member";
    };
    let pick = |not: Option<&Member>| route.pick_from(&targets, not).cloned();
    let (target, slot, mut member) = match proxy.dial_picked(pick, key).await {
        Ok(dialed) => dialed,
        Err(Dial::NoMember) => return "no_member",
        Err(Dial::Failed) => return "member_failed",
    };
    let header = match port.proxy_protocol {
        ProxyProtocol::None => None,
        ProxyProtocol::V1 => Some(Version::V1),
        ProxyProtocol::V2 => Some(Version::V2),
    };
    if let Some(version) = header {
        let bytes = proxy_protocol::header::encode(version, peer, local);
        if member.write_all(&bytes).await.is_err() {
            target.member.health.record_failure();
            proxy.metrics.upstream_error(UpstreamError::Reset);
            return "member_failed";
        }
    }
    target.member.health.record_success();
    let _tunnel = slot.into_tunnel();
    crate::request::connection::tunnel::relay(
        &mut client,
        &mut member,
        proxy.tunnel_idle_timeout,
        &target.member.addr,
    )
    .await;
    "relayed"
}
