//! `listen:` and `tcp:`: the addresses the router binds.

use super::*;

/// `tcp`: TCP balancing on external ports (see `router::tcp`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tcp {
    #[serde(default)]
    pub listen: Vec<crate::tcp::TcpPort>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Listen {
    /// Plain HTTP (HTTP/1.1 and h2 with prior knowledge).
    pub http: Option<SocketAddr>,
    /// HTTPS (TLS 1.2/1.3, h2 or HTTP/1.1 by ALPN); off unless set.
    pub https: Option<SocketAddr>,
    /// HTTP/3 over QUIC (UDP), usually the HTTPS address; off unless set (see
    /// [`Http3Config`](crate::quic::Http3Config) and "HTTP/3" in `docs/routing.md`).
    #[serde(default)]
    pub http3: Option<SocketAddr>,
    /// Health, readiness, metrics and the routes API. Keep it on loopback. Defaults
    /// to 127.0.0.1:9090 also when a `listen:` block leaves it out; `admin: null`
    /// turns it off. (No struct-wide default here: a `listen:` block that leaves
    /// out `http` means no plain listener.)
    #[serde(default = "default_admin")]
    pub admin: Option<SocketAddr>,
    /// For scrapers and load balancer checks: `/metrics`, `/healthz`, `/readyz`
    /// and nothing else (no route table, nothing that changes state), so it can
    /// face the network while `admin` stays on loopback. Off unless set.
    #[serde(default)]
    pub metrics: Option<SocketAddr>,
}

pub(super) fn default_admin() -> Option<SocketAddr> {
    Some(SocketAddr::from(([127, 0, 0, 1], 9090)))
}

impl Default for Listen {
    fn default() -> Listen {
        Listen {
            http: Some(SocketAddr::from(([0, 0, 0, 0], 80))),
            https: None,
            http3: None,
            admin: default_admin(),
            metrics: None,
        }
    }
}
