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
    Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
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

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new();
        let open = IntGaugeVec::new(
            Opts::new("portproxy_connections_open", "Relayed connections open now"),
            &["mode"],
        )?;
        let total = IntCounterVec::new(
            Opts::new(
                "portproxy_connections_total",
                "Connections accepted and admitted",
            ),
            &["mode"],
        )?;
        let bytes = IntCounterVec::new(
            Opts::new(
                "portproxy_bytes_total",
                "Bytes relayed; up = client to target",
            ),
            &["mode", "direction"],
        )?;
        let connect_failures = IntCounterVec::new(
            Opts::new(
                "portproxy_connect_failures_total",
                "Target connects that failed or timed out",
            ),
            &["mode"],
        )?;
        let idle = IntCounterVec::new(
            Opts::new(
                "portproxy_idle_timeouts_total",
                "Relays closed by the idle timeout",
            ),
            &["mode"],
        )?;
        let relay_errors = IntCounterVec::new(
            Opts::new(
                "portproxy_relay_errors_total",
                "Relays ended by an error; side = whose socket failed",
            ),
            &["mode", "side"],
        )?;
        let listeners = IntGaugeVec::new(
            Opts::new("portproxy_listeners", "Listening sockets"),
            &["mode"],
        )?;
        let bind_failures = IntCounterVec::new(
            Opts::new(
                "portproxy_listener_bind_failures_total",
                "Ports that could not be bound",
            ),
            &["mode"],
        )?;
        let rejected = IntCounterVec::new(
            Opts::new(
                "portproxy_rejected_total",
                "Connections closed before relaying, by reason",
            ),
            &["reason"],
        )?;
        let proxy_protocol_rejects = IntCounterVec::new(
            Opts::new(
                "portproxy_proxy_protocol_rejects_total",
                "Connections refused for their PROXY header",
            ),
            &["reason"],
        )?;
        let peer_answers = IntCounterVec::new(
            Opts::new(
                "portproxy_cluster_peer_answers_total",
                "Answers of peer proxies to our cluster-port requests",
            ),
            &["answer"],
        )?;
        let busy_sent = IntCounter::new(
            "portproxy_cluster_busy_total",
            "BUSY answers sent to peer proxies",
        )?;
        let unrouted = IntCounter::new(
            "portproxy_cluster_unrouted_total",
            "Cluster-port connections that no host took",
        )?;
        let reloads = IntCounterVec::new(
            Opts::new("portproxy_reloads_total", "Files loaded and swapped in"),
            &["file"],
        )?;
        let reload_errors = IntCounterVec::new(
            Opts::new(
                "portproxy_reload_errors_total",
                "Files refused (the old table stays)",
            ),
            &["file"],
        )?;
        let mappings = IntGaugeVec::new(
            Opts::new("portproxy_mappings", "Mappings in the live table"),
            &["mode"],
        )?;
        let accept_errors = IntCounter::new("portproxy_accept_errors_total", "accept(2) failures")?;
        for c in [
            Box::new(open.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(total.clone()),
            Box::new(bytes.clone()),
            Box::new(connect_failures.clone()),
            Box::new(idle.clone()),
            Box::new(relay_errors.clone()),
            Box::new(listeners.clone()),
            Box::new(bind_failures.clone()),
            Box::new(rejected.clone()),
            Box::new(proxy_protocol_rejects.clone()),
            Box::new(peer_answers.clone()),
            Box::new(busy_sent.clone()),
            Box::new(unrouted.clone()),
            Box::new(reloads.clone()),
            Box::new(reload_errors.clone()),
            Box::new(mappings.clone()),
            Box::new(accept_errors.clone()),
        ] {
            registry.register(c)?;
        }
        let modes = Mode::ALL.map(|m| {
            let l = m.as_str();
            ModeMetrics {
                open: open.with_label_values(&[l]),
                total: total.with_label_values(&[l]),
                bytes: ByteCounters {
                    up: bytes.with_label_values(&[l, "up"]),
                    down: bytes.with_label_values(&[l, "down"]),
                },
                connect_failures: connect_failures.with_label_values(&[l]),
                idle_timeouts: idle.with_label_values(&[l]),
                client_errors: relay_errors.with_label_values(&[l, "client"]),
                target_errors: relay_errors.with_label_values(&[l, "target"]),
                listeners: listeners.with_label_values(&[l]),
                bind_failures: bind_failures.with_label_values(&[l]),
            }
        });
        // Series that alerts use exist from the start, at zero.
        for r in [
            "max_connections",
            "source_limit",
            "untrusted_peer",
            "no_route",
        ] {
            rejected.with_label_values(&[r]);
        }
        for r in ["untrusted", "invalid"] {
            proxy_protocol_rejects.with_label_values(&[r]);
        }
        for a in ["ok", "busy", "not_here", "error", "timeout"] {
            peer_answers.with_label_values(&[a]);
        }
        for f in ["proxy_conf", "hosts_conf", "portmappings_conf"] {
            reloads.with_label_values(&[f]);
            reload_errors.with_label_values(&[f]);
        }
        for m in ["gear", "cluster"] {
            mappings.with_label_values(&[m]);
        }
        Ok(Metrics {
            registry,
            modes,
            rejected,
            proxy_protocol_rejects,
            peer_answers,
            busy_sent,
            unrouted,
            reloads,
            reload_errors,
            mappings,
            accept_errors,
        })
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

/// Serves `GET /metrics` (anything else: 404) on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Metrics) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
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
        });
    }
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
