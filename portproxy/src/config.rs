//! The portproxy's own configuration file (YAML, `/etc/portproxy/portproxy.yaml`).
//!
//! Same conventions as the router's: unknown keys are errors and every error reads
//! `file:line: field: problem`. A section present turns its mode on: `gear:` for the
//! OpenShift port mappings, `cluster:` for Simplenetes cluster ports; both may be on.
//! The Simplenetes files themselves (`proxy.conf` …) keep their own formats and are
//! parsed by `cluster::files`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config_file::ConfigError;
use ipnet::IpNet;
use serde::Deserialize;

use crate::gear::alloc::Allocation;
use crate::proxy_protocol::Version;

/// Everything the daemon needs to start.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where durable state lives (the gear mapping table).
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// The operator CLI's Unix socket (mode 0600: whoever can write it changes mappings).
    #[serde(default = "default_admin_socket")]
    pub admin_socket: PathBuf,
    /// Prometheus `/metrics` over HTTP; off unless set. Keep it on loopback.
    #[serde(default)]
    pub metrics: Option<SocketAddr>,
    #[serde(default)]
    pub limits: Limits,
    /// How long open connections may run after SIGTERM/SIGINT before they are cut.
    #[serde(default = "default_shutdown_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
    #[serde(default)]
    pub log_format: LogFormat,
    pub gear: Option<GearConfig>,
    pub cluster: Option<ClusterConfig>,
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Bounds that hold for every mode.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Relayed connections open at once, all modes together; past it a new client
    /// connection is closed at once (counted as `rejected{reason="max_connections"}`).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// TCP connect to a target (a gear, a host port, a peer proxy's own connect).
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// A relayed connection with no byte in either direction for this long is closed.
    #[serde(default = "default_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Connections one client source (an IPv4 address, an IPv6 /64) may have open,
    /// all ports together; unset: half of `max_connections`. Past it, its new
    /// connections are closed at once (`rejected{reason="source_limit"}`).
    #[serde(default)]
    pub max_connections_per_source: Option<usize>,
    /// Sources without that cap: the routers in front, which carry every client's
    /// traffic to this node (and, in cluster mode, `cluster.trusted_sources` and
    /// peer proxies, always).
    #[serde(default)]
    pub unlimited_sources: Vec<IpNet>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: default_max_connections(),
            connect_timeout: default_connect_timeout(),
            idle_timeout: default_idle_timeout(),
            max_connections_per_source: None,
            unlimited_sources: Vec::new(),
        }
    }
}

impl Limits {
    /// `max_connections_per_source`, or half of `max_connections` (at least one):
    /// one source can never take the node's every relay, and a router in front
    /// that is not listed in `unlimited_sources` still gets half.
    pub fn per_source(&self) -> usize {
        self.max_connections_per_source
            .unwrap_or(self.max_connections / 2)
            .max(1)
    }

    /// Lowers `max_connections` to what `nofile` descriptors hold: two per relay
    /// (client and target), after a reserve for listeners, the state files, the
    /// admin socket and the metrics listener (`listeners` plus an eighth of the
    /// limit, at least 64). Returns the number it was lowered from, if it was.
    pub fn fit(&mut self, nofile: u64, listeners: usize) -> Option<usize> {
        let nofile = usize::try_from(nofile).unwrap_or(usize::MAX);
        let reserve = listeners + (nofile / 8).max(64);
        let fits = (nofile.saturating_sub(reserve) / 2).max(1);
        (self.max_connections > fits).then(|| std::mem::replace(&mut self.max_connections, fits))
    }
}

/// OpenShift gear mode.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GearConfig {
    /// The node's public address the mapped ports listen on (`PUBLIC_IP`).
    #[serde(default = "default_gear_bind")]
    pub bind: IpAddr,
    /// Public ports that may be mapped (`PORT_BEGIN`–65535).
    #[serde(default = "default_gear_ports")]
    pub ports: PortRange,
    /// Networks a mapping may point into; gears live on loopback.
    #[serde(default = "default_allowed_targets")]
    pub allowed_targets: Vec<IpNet>,
    /// How long a removed mapping's open connections may keep running.
    #[serde(default = "default_drain_grace", with = "humantime_serde")]
    pub drain_grace: Duration,
    /// Send a PROXY header to gears (`none`, `v1`, `v2`); OpenShift gears expect none.
    #[serde(default)]
    pub send_proxy: SendProxy,
    /// The node.conf numbers behind `portproxy allocate` (same on every node of a
    /// district).
    #[serde(default)]
    pub allocation: Allocation,
}

/// A target's PROXY header wish, as YAML (`none`, `v1`, `v2`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SendProxy {
    #[default]
    None,
    V1,
    V2,
}

impl SendProxy {
    pub fn version(self) -> Option<Version> {
        match self {
            SendProxy::None => None,
            SendProxy::V1 => Some(Version::V1),
            SendProxy::V2 => Some(Version::V2),
        }
    }
}

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

/// An inclusive port range written `A-B` (or one port `N`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortRange(pub RangeInclusive<u16>);

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PortRange, D::Error> {
        let s = String::deserialize(d)?;
        PortRange::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl PortRange {
    pub fn parse(s: &str) -> Result<PortRange, String> {
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let a = strict_port(a.trim())?;
        let b = strict_port(b.trim())?;
        if a > b {
            return Err(format!("range {a}-{b} is reversed"));
        }
        Ok(PortRange(a..=b))
    }

    pub fn contains(&self, port: u16) -> bool {
        self.0.contains(&port)
    }
}

/// A TCP port 1..=65535 written in plain decimal: no sign, no leading zero, no
/// trailing junk (the JS proxy's `parseInt` took `30000abc` as 30000).
pub fn strict_port(s: &str) -> Result<u16, String> {
    let n = strict_u32(s)?;
    match u16::try_from(n) {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(format!("port {s} is out of range 1-65535")),
    }
}

/// A non-negative decimal integer that fits in u32, written plainly.
pub fn strict_u32(s: &str) -> Result<u32, String> {
    if s.is_empty() {
        return Err("empty number".into());
    }
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("`{s}` is not a decimal number"));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(format!("`{s}` has a leading zero"));
    }
    s.parse::<u32>().map_err(|_| format!("`{s}` is too large"))
}

// === impl Config ===

impl Config {
    /// Reads and validates a configuration file. A relative `cluster.proxy_conf` is
    /// relative to this file's directory (as `proxy.conf`'s own paths are to it).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = config_file::read_text(path)?;
        let mut config = Config::parse(&text, &path.display().to_string())?;
        if let Some(c) = config.cluster.as_mut()
            && c.proxy_conf.is_relative()
        {
            c.proxy_conf = path.parent().unwrap_or(Path::new(".")).join(&c.proxy_conf);
        }
        Ok(config)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let config: Config = config_file::from_yaml(text, file)?;
        config
            .validate()
            .map_err(|(path, message)| ConfigError::at_yaml_field(text, file, path, message))?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.gear.is_none() && self.cluster.is_none() {
            return Err((
                "gear",
                "neither `gear:` nor `cluster:` is set: nothing to do".into(),
            ));
        }
        if self.limits.max_connections == 0 {
            return Err(("limits.max_connections", "must be at least 1".into()));
        }
        for (field, d) in [
            ("limits.connect_timeout", self.limits.connect_timeout),
            ("limits.idle_timeout", self.limits.idle_timeout),
        ] {
            if d.is_zero() {
                return Err((field, "must be longer than 0s".into()));
            }
        }
        if let Some(g) = &self.gear {
            if *g.ports.0.start() < 1024 {
                return Err(("gear.ports", "must not reach below 1024".into()));
            }
            if g.allowed_targets.is_empty() {
                return Err((
                    "gear.allowed_targets",
                    "must name at least one network".into(),
                ));
            }
            g.allocation
                .validate()
                .map_err(|(f, m)| (f, m.to_string()))?;
        }
        if let Some(c) = &self.cluster {
            for (field, d) in [
                ("cluster.peer_timeout", c.peer_timeout),
                ("cluster.header_timeout", c.header_timeout),
                ("cluster.reload_interval", c.reload_interval),
            ] {
                if d.is_zero() {
                    return Err((field, "must be longer than 0s".into()));
                }
            }
        }
        Ok(())
    }
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/portproxy")
}
fn default_admin_socket() -> PathBuf {
    PathBuf::from("/run/portproxy/admin.sock")
}
fn default_shutdown_grace() -> Duration {
    Duration::from_secs(30)
}
fn default_max_connections() -> usize {
    30_000
}
fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_idle_timeout() -> Duration {
    Duration::from_secs(600)
}
fn default_gear_bind() -> IpAddr {
    IpAddr::V4(Ipv4Addr::UNSPECIFIED)
}
fn default_gear_ports() -> PortRange {
    PortRange(35531..=65535)
}
fn default_allowed_targets() -> Vec<IpNet> {
    vec![IpNet::V4(
        ipnet::Ipv4Net::new(Ipv4Addr::new(127, 0, 0, 0), 8).unwrap_or_default(),
    )]
}
fn default_drain_grace() -> Duration {
    Duration::from_secs(30)
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

#[cfg(test)]
mod tests;
