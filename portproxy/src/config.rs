//! The portproxy's own configuration file (YAML, `/etc/portproxy/portproxy.yaml`).
//!
//! Same conventions as the router's: unknown keys are errors and every error reads
//! `file:line: field: problem`. A section present turns its mode on: `gear:` for the
//! OpenShift port mappings, `cluster:` for Simplenetes cluster ports; both may be on.
//! The Simplenetes files themselves (`proxy.conf` …) keep their own formats and are
//! parsed by `cluster::files`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use config_file::ConfigError;
use serde::Deserialize;

use crate::cluster::ClusterConfig;
use crate::gear::GearConfig;
use crate::limits::Limits;

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
        if let Err(e) = per_source::KeyRule::new(self.limits.client_ipv4_prefix, 64) {
            return Err(("limits.client_ipv4_prefix", e.to_string()));
        }
        if let Err(e) = per_source::KeyRule::new(32, self.limits.client_ipv6_prefix) {
            return Err(("limits.client_ipv6_prefix", e.to_string()));
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

#[cfg(test)]
mod tests;
