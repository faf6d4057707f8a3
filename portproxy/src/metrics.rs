//! Prometheus metrics and the `/metrics` listener.
//!
//! Labels are bounded by design: a mode (`gear`, `cluster`, `peer`), a direction, a
//! fixed reason or a file kind. Nothing is labelled by port, so 60k cluster ports cost
//! no series. Per-mode counters are resolved once here, not looked up per connection.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use prometheus::{
    Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry, TextEncoder,
};
// The `prometheus` crate's own registration macros: one statement a family.
use prometheus::{
    register_int_counter_vec_with_registry as counters,
    register_int_counter_with_registry as counter, register_int_gauge_vec_with_registry as gauges,
};
use tokio::net::TcpListener;

use relay::ByteCounters;

/// Where a relayed connection was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A gear port mapping (OpenShift).
    Gear,
    /// A cluster port (Simplenetes), client side.
    Cluster,
    /// The proxy port: a peer proxy asking for a cluster port of this host.
    Peer,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Gear, Mode::Cluster, Mode::Peer];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Gear => "gear",
            Mode::Cluster => "cluster",
            Mode::Peer => "peer",
        }
    }
}

/// The counters of one mode, resolved once.
#[derive(Clone)]
pub struct ModeMetrics {
    pub open: IntGauge,
    pub total: IntCounter,
    pub bytes: ByteCounters,
    pub connect_failures: IntCounter,
    pub idle_timeouts: IntCounter,
    pub client_errors: IntCounter,
    pub target_errors: IntCounter,
    pub listeners: IntGauge,
    pub bind_failures: IntCounter,
}

/// The families labelled by mode, from which each [`ModeMetrics`] is resolved.
struct ModeFamilies {
    open: IntGaugeVec,
    total: IntCounterVec,
    bytes: IntCounterVec,
    connect_failures: IntCounterVec,
    idle: IntCounterVec,
    relay_errors: IntCounterVec,
    listeners: IntGaugeVec,
    bind_failures: IntCounterVec,
}

impl ModeFamilies {
    /// The families whose series are per mode (gear, cluster, peer).
    fn new(r: &Registry) -> Result<ModeFamilies, prometheus::Error> {
        Ok(ModeFamilies {
            open: gauges!(
                "portproxy_connections_open",
                "Relayed connections open now",
                &["mode"],
                r
            )?,
            total: counters!(
                "portproxy_connections_total",
                "Connections accepted and admitted",
                &["mode"],
                r
            )?,
            bytes: counters!(
                "portproxy_bytes_total",
                "Bytes relayed; up = client to target",
                &["mode", "direction"],
                r
            )?,
            connect_failures: counters!(
                "portproxy_connect_failures_total",
                "Target connects that failed or timed out",
                &["mode"],
                r
            )?,
            idle: counters!(
                "portproxy_idle_timeouts_total",
                "Relays closed by the idle timeout",
                &["mode"],
                r
            )?,
            relay_errors: counters!(
                "portproxy_relay_errors_total",
                "Relays ended by an error; side = whose socket failed",
                &["mode", "side"],
                r
            )?,
            listeners: gauges!("portproxy_listeners", "Listening sockets", &["mode"], r)?,
            bind_failures: counters!(
                "portproxy_listener_bind_failures_total",
                "Ports that could not be bound",
                &["mode"],
                r
            )?,
        })
    }

    fn resolve(&self, mode: Mode) -> ModeMetrics {
        let l = mode.as_str();
        ModeMetrics {
            open: self.open.with_label_values(&[l]),
            total: self.total.with_label_values(&[l]),
            bytes: ByteCounters {
                up: self.bytes.with_label_values(&[l, "up"]),
                down: self.bytes.with_label_values(&[l, "down"]),
            },
            connect_failures: self.connect_failures.with_label_values(&[l]),
            idle_timeouts: self.idle.with_label_values(&[l]),
            client_errors: self.relay_errors.with_label_values(&[l, "client"]),
            target_errors: self.relay_errors.with_label_values(&[l, "target"]),
            listeners: self.listeners.with_label_values(&[l]),
            bind_failures: self.bind_failures.with_label_values(&[l]),
        }
    }
}

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    modes: [ModeMetrics; 3],
    /// `portproxy_rejected_total{reason}`: connections closed before any relay.
    pub rejected: IntCounterVec,
    /// `portproxy_proxy_protocol_rejects_total{reason}`.
    pub proxy_protocol_rejects: IntCounterVec,
    /// `portproxy_cluster_peer_answers_total{answer}`: what peer proxies answered us.
    pub peer_answers: IntCounterVec,
    /// `portproxy_cluster_busy_total`: BUSY answers this host sent.
    pub busy_sent: IntCounter,
    /// `portproxy_cluster_unrouted_total`: cluster-port connections no host took.
    pub unrouted: IntCounter,
    /// `portproxy_reloads_total{file}` and `portproxy_reload_errors_total{file}`.
    pub reloads: IntCounterVec,
    pub reload_errors: IntCounterVec,
    /// `portproxy_mappings{mode}`: gear mappings, cluster portmapping items.
    pub mappings: IntGaugeVec,
    /// `portproxy_accept_errors_total`: accept(2) failures (e.g. out of descriptors).
    pub accept_errors: IntCounter,
}

/// Creates the series of `values` at zero, so that alerts on them work from the
/// start (a missing series is not a zero to Prometheus).
fn zeroed(family: &IntCounterVec, values: &[&str]) {
    for v in values {
        family.with_label_values(&[v]);
    }
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let r = Registry::new();
        let modes = ModeFamilies::new(&r)?;
        let m = Metrics {
            modes: Mode::ALL.map(|mode| modes.resolve(mode)),
            rejected: counters!(
                "portproxy_rejected_total",
                "Connections closed before relaying, by reason",
                &["reason"],
                r
            )?,
            proxy_protocol_rejects: counters!(
                "portproxy_proxy_protocol_rejects_total",
                "Connections refused for their PROXY header",
                &["reason"],
                r
            )?,
            peer_answers: counters!(
                "portproxy_cluster_peer_answers_total",
                "Answers of peer proxies to our cluster-port requests",
                &["answer"],
                r
            )?,
            busy_sent: counter!(
                "portproxy_cluster_busy_total",
                "BUSY answers sent to peer proxies",
                r
            )?,
            unrouted: counter!(
                "portproxy_cluster_unrouted_total",
                "Cluster-port connections that no host took",
                r
            )?,
            reloads: counters!(
                "portproxy_reloads_total",
                "Files loaded and swapped in",
                &["file"],
                r
            )?,
            reload_errors: counters!(
                "portproxy_reload_errors_total",
                "Files refused (the old table stays)",
                &["file"],
                r
            )?,
            mappings: gauges!(
                "portproxy_mappings",
                "Mappings in the live table",
                &["mode"],
                r
            )?,
            accept_errors: counter!("portproxy_accept_errors_total", "accept(2) failures", r)?,
            registry: r,
        };
        // Series that alerts use exist from the start, at zero.
        zeroed(
            &m.rejected,
            &[
                "max_connections",
                "source_limit",
                "untrusted_peer",
                "no_route",
            ],
        );
        zeroed(&m.proxy_protocol_rejects, &["untrusted", "invalid"]);
        zeroed(
            &m.peer_answers,
            &["ok", "busy", "not_here", "error", "timeout"],
        );
        let files = ["proxy_conf", "hosts_conf", "portmappings_conf"];
        zeroed(&m.reloads, &files);
        zeroed(&m.reload_errors, &files);
        for mode in ["gear", "cluster"] {
            m.mappings.with_label_values(&[mode]);
        }
        Ok(m)
    }

    pub fn mode(&self, m: Mode) -> &ModeMetrics {
        &self.modes[m as usize]
    }

    /// The text exposition format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 * 1024);
        // Encoding our own registry into a Vec does not fail.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

/// Scrapes served at once; one beyond that is closed at once.
const MAX_SCRAPERS: usize = 16;

/// Serves `GET /metrics` (anything else: 404) on `listener` until the task is
/// dropped, through the one accept loop (`accept::run`: its back-off on a failed
/// accept, [`MAX_SCRAPERS`] slots).
pub async fn listen(listener: TcpListener, metrics: Metrics) {
    let errors = metrics.accept_errors.clone();
    let mut capped = accept::Capped::new(listener, MAX_SCRAPERS, move |stream, _, slot| {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let metrics = metrics.clone();
                async move {
                    let resp = if req.uri().path() == "/metrics" {
                        Response::builder()
                            .header("content-type", "text/plain; version=0.0.4")
                            .body(Full::new(Bytes::from(metrics.render())))
                    } else {
                        Response::builder()
                            .status(404)
                            .body(Full::new(Bytes::from_static(b"not found\n")))
                    };
                    Ok::<_, Infallible>(resp.unwrap_or_default())
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .header_read_timeout(std::time::Duration::from_secs(10))
                .timer(hyper_util::rt::TokioTimer::new())
                .serve_connection(io, svc)
                .await;
            drop(slot);
        });
    });
    accept::run(&mut capped, "metrics", &errors, std::future::pending()).await;
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
