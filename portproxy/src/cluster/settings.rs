//! `cluster:` in the configuration: Simplenetes cluster mode's settings.

use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

/// Simplenetes cluster mode.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The Simplenetes `proxy.conf` (which names `hosts.conf` and `portmappings.conf`);
    /// relative to this file's directory unless absolute.
    pub proxy_conf: PathBuf,
    /// How often the three files are looked at (any change is also picked up on SIGHUP).
    #[serde(default = "default_reload_interval", with = "humantime_serde")]
    pub reload_interval: Duration,
    /// Per peer host: connect plus the one-line answer (the JS proxy's 3 s).
    #[serde(default = "default_peer_timeout", with = "humantime_serde")]
    pub peer_timeout: Duration,
    /// How long a trusted source may take to send its PROXY header when the target
    /// wants one (then ours is sent); 1/3 of it when the target wants none.
    #[serde(default = "default_header_timeout", with = "humantime_serde")]
    pub header_timeout: Duration,
    /// Sources whose PROXY header is honoured, besides the hosts of `hosts.conf`
    /// (e.g. the ingress). From anyone else a PROXY header is refused.
    #[serde(default)]
    pub trusted_sources: Vec<IpNet>,
    /// Accept peer-proxy connections only from the hosts of `hosts.conf` and
    /// `trusted_sources` (a host reaching itself comes from its own address).
    #[serde(default = "yes")]
    pub peers_from_hosts_only: bool,
}

fn default_reload_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_peer_timeout() -> Duration {
    Duration::from_secs(3)
}
fn default_header_timeout() -> Duration {
    Duration::from_secs(3)
}
fn yes() -> bool {
    true
}
