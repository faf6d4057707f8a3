//! The router's configuration file (YAML).
//!
//! Key names follow the OpenShift routing daemon's settings where it has one;
//! they are a contract with operators' files: extend, never rename. Unknown keys are
//! errors (a typo must not silently fall back to a default), and every error names
//! the file, the line and the field: `router.yaml:7: listen.http: invalid socket address`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::members::health as member_health;

mod acme;
mod pair;
pub use crate::issuer::settings::{AcmeChallenge, AcmeConfig};
pub use crate::pair::{Node, PairSettings};
mod health;
pub use health::HealthConfig;
mod listen;
pub use listen::{Listen, Tcp};
mod spi;
pub use spi::{SourceKind, Spi, SpoolConfig, StompConfig, StompTls};
mod tls;
pub use tls::{TlsConfig, UpstreamTls};
mod upstream;
use crate::members::probe::{Check, StatusMatch};
use crate::table::balance::Balance;
pub use upstream::UpstreamConfig;

pub use crate::request::connection::client_conn::ForwardedSettings;
pub use crate::request::connection::limits::Limits;
/// `spi.amqp`: the AMQP source's own settings type.
pub use spi_consumer::source::amqp::AmqpConfig;

/// Everything the router needs to start.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The cloud domain of the HA names: `<prefix><app>-<ns><suffix>.<cloud_domain>`.
    pub cloud_domain: String,
    #[serde(default = "default_ha_prefix")]
    pub ha_dns_prefix: String,
    #[serde(default)]
    pub ha_dns_suffix: String,
    /// Also answer the plain application name `<app>-<ns>.<cloud_domain>`.
    #[serde(default = "yes")]
    pub app_dns: bool,
    /// Route wildcard aliases (`*.customer.com`, one label deep) from the SPI:
    /// off, as OpenShift's `wildcardPolicy` admission is (a wildcard takes every
    /// name under a domain, one tenant's claim on a namespace).
    #[serde(default)]
    pub wildcard_aliases: bool,
    /// A directory of `NNN.html` pages for the router's own answers (see
    /// `policy::pages`); none: one line of text.
    #[serde(default)]
    pub error_pages: Option<std::path::PathBuf>,
    /// Endpoint types that become members (`ENDPOINT_TYPES` of the routing daemon).
    #[serde(default = "default_endpoint_types")]
    pub endpoint_types: Vec<String>,
    #[serde(default)]
    pub listen: Listen,
    /// Client-facing TLS (for `listen.https`).
    #[serde(default)]
    pub tls: TlsConfig,
    /// The HTTP/3 listener's settings (`listen.http3` turns it on).
    #[serde(default)]
    pub http3: crate::quic::Http3Config,
    /// Where the routing state is kept (mode 0700: it holds private keys).
    pub state_dir: PathBuf,
    #[serde(default)]
    pub spi: Spi,
    #[serde(default)]
    pub upstream: UpstreamConfig,
    #[serde(default)]
    pub health: HealthConfig,
    #[serde(default)]
    pub limits: Limits,
    /// How long in-flight requests may take to finish after SIGTERM/SIGINT.
    #[serde(default = "default_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
    #[serde(default)]
    pub access_log: AccessLog,
    /// RFC 7239 `Forwarded` and the trust rule for the client's forwarding headers.
    #[serde(default)]
    pub forwarded: ForwardedSettings,
    /// Threads serving client connections; 0 = one per CPU. More than one: a
    /// single-threaded runtime per thread, each connection on one of them for its
    /// life (see [`crate::workers`]).
    #[serde(default)]
    pub worker_threads: usize,
    /// `true`: tokio's work-stealing runtime for everything instead of one runtime
    /// per worker thread (the router's model before 2026-11-25).
    #[serde(default)]
    pub work_stealing: bool,
    /// TCP ports mapped to apps' non-HTTP endpoints.
    #[serde(default)]
    pub tcp: Tcp,
    /// The admin API's own settings (its address is `listen.admin`).
    #[serde(default)]
    pub admin: crate::admin::AdminSettings,
    /// Checking the saved state against the broker's REST API; off when absent.
    pub reconcile: Option<crate::reconcile::ReconcileSettings>,
    /// Settings for every app without its own (see `router::policy`; an app's own,
    /// `PUT /apps/{app}/settings`, win field by field).
    #[serde(default)]
    pub app_defaults: crate::policy::settings::AppSettings,
    /// HSTS an app's settings must carry for names under these domains
    /// (see `router::policy::hsts`): refused at `PUT` otherwise.
    #[serde(default)]
    pub hsts_required: Vec<crate::policy::hsts::RequiredHsts>,
    /// The load balancers in front that send a PROXY header (v1 or v2) first
    /// on the HTTP and HTTPS listeners: from these a header is required and
    /// its client is the client; from any other address none is read.
    #[serde(default)]
    pub proxy_protocol: ProxyProtocol,
    /// Traffic per app: how many apps have series of their own (see
    /// `router::metrics::apps`).
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// The secret affinity cookies are hashed with; both routers of a pair read
    /// the same file. Without it: `state_dir/affinity.key`, made once.
    #[serde(default)]
    pub affinity_key_file: Option<PathBuf>,
    /// Certificates from an ACME CA for the aliases of apps that ask for them
    /// (`app_defaults.acme` or an app's own `acme: true`); off without `directory`.
    #[serde(default)]
    pub acme: AcmeConfig,
    /// The router pair's link (see `crate::pair`): what an operator puts on
    /// either router applies on both.
    #[serde(default)]
    pub pair: PairSettings,
    /// Spans out over OTLP (see the `spans` crate); off without `endpoint`.
    #[serde(default)]
    pub traces: spans::TracesConfig,
    /// How responses are compressed for apps that have it on (see
    /// `crate::request::phases::compress`).
    #[serde(default)]
    pub compression: compress::CompressionConfig,
}

/// `metrics`: the bound on per-app series (see `router::metrics::apps`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Apps with series of their own, chosen by recent traffic; the rest are
    /// summed into `app="_other"`. 1 000 apps are 14 000 series: at 100 000 apps
    /// one series set each would be 1.4 million per router.
    #[serde(default = "default_max_apps")]
    pub max_apps: usize,
    /// An app without a request for this long gives its place back.
    #[serde(default = "default_app_idle", with = "humantime_serde")]
    pub app_idle: Duration,
}

impl Default for MetricsConfig {
    fn default() -> MetricsConfig {
        MetricsConfig {
            max_apps: default_max_apps(),
            app_idle: default_app_idle(),
        }
    }
}

impl MetricsConfig {
    pub fn limits(&self) -> crate::metrics::apps::ExportLimits {
        crate::metrics::apps::ExportLimits {
            max_apps: self.max_apps,
            idle: self.app_idle,
        }
    }
}

fn default_max_apps() -> usize {
    crate::metrics::apps::ExportLimits::default().max_apps
}

fn default_app_idle() -> Duration {
    crate::metrics::apps::ExportLimits::default().idle
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLog {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub format: LogFormat,
    /// The lines to stderr; `false` with `syslog`: to syslog only.
    #[serde(default = "yes")]
    pub stderr: bool,
    /// Access lines to syslog too (see `router::syslog`).
    #[serde(default)]
    pub syslog: Option<crate::syslog::SyslogSettings>,
    /// The syslog line: a template or a preset (see `router::log_format`).
    #[serde(default = "httplog")]
    pub template: String,
    /// Fields and cookies a template may name, each cut at `length` bytes.
    #[serde(default)]
    pub capture: crate::syslog::Capture,
}

fn httplog() -> String {
    "httplog".into()
}

impl Default for AccessLog {
    fn default() -> AccessLog {
        AccessLog {
            enabled: true,
            format: LogFormat::Text,
            stderr: true,
            syslog: None,
            template: httplog(),
            capture: crate::syslog::Capture::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

fn yes() -> bool {
    true
}
fn default_ha_prefix() -> String {
    "ha-".into()
}
fn default_endpoint_types() -> Vec<String> {
    vec!["load_balancer".into()]
}
fn default_grace() -> Duration {
    Duration::from_secs(30)
}
fn default_spool_interval() -> Duration {
    Duration::from_secs(1)
}
/// As many as one group commit takes (`spi_consumer::ingest::MAX_BATCH`): with
/// 10 in flight, each fsync and table publish served at most 10 events, and a
/// router at 100 000 apps spent 88 µs of CPU per event and took 6 300 events a
/// second; with 256, 24 µs and 33 000 (`bench-events --replay`, bench/RESULTS.md
/// "Issue 52: routing events end to end, no broker in the figure"). A crash redelivers what was not acknowledged (applying it
/// again changes nothing).
fn default_prefetch() -> u32 {
    spi_consumer::ingest::MAX_BATCH as u32
}
fn default_heartbeat() -> Duration {
    Duration::from_secs(5)
}
fn default_vhost() -> String {
    "localhost".into()
}
fn default_connect_timeout() -> Duration {
    Duration::from_secs(10)
}

/// More worker threads than this is a typo (each is a thread with its own runtime).
const MAX_WORKER_THREADS: usize = 1024;

pub use config_file::ConfigError;

/// A field's dotted path and what is wrong with it.
type Invalid = (&'static str, String);

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = config_file::read_text(path)?;
        Config::parse(&text, &path.display().to_string())
    }

    /// How members are checked and eased in (`health.*`, `upstream.slow_start`).
    pub fn member_health(&self) -> crate::members::health::HealthSettings {
        crate::members::health::HealthSettings {
            slow_start: self.upstream.slow_start,
            ..self.health.settings()
        }
    }

    /// Parses and validates configuration text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let config: Config = config_file::from_yaml(text, file)?;
        config
            .validate()
            .map_err(|(path, message)| ConfigError::at_yaml_field(text, file, path, message))?;
        config.app_defaults.check().map_err(|e| {
            let path = format!("app_defaults.{}", e.field);
            ConfigError::at_yaml_field(text, file, &path, e.problem)
        })?;
        Ok(config)
    }

    /// Checks what types alone cannot; returns the field's dotted path and the problem.
    fn validate(&self) -> Result<(), Invalid> {
        self.validate_access_log()?;
        for c in &self.proxy_protocol.trusted {
            if crate::policy::settings::parse_cidr(c).is_none() {
                return Err((
                    "proxy_protocol.trusted",
                    format!("{c:?} is no address or CIDR"),
                ));
            }
        }
        for p in &self.hsts_required {
            p.check().map_err(|e| ("hsts_required", e))?;
        }
        self.validate_names()?;
        self.validate_spi()?;
        self.validate_limits()?;
        self.validate_tls()?;
        self.validate_health()?;
        self.validate_reconcile()?;
        self.validate_acme()?;
        self.validate_pair()?;
        Ok(())
    }

    /// The domain, the HA name parts, endpoint types, listeners and TCP ports.
    fn validate_names(&self) -> Result<(), Invalid> {
        let host_like = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        };
        if !host_like(&self.cloud_domain) {
            return Err((
                "cloud_domain",
                "must be a DNS domain such as example.com".into(),
            ));
        }
        if !self.ha_dns_prefix.is_empty() && !host_like(&self.ha_dns_prefix) {
            return Err((
                "ha_dns_prefix",
                "may only hold letters, digits, '-' and '.'".into(),
            ));
        }
        if !self.ha_dns_suffix.is_empty() && !host_like(&self.ha_dns_suffix) {
            return Err((
                "ha_dns_suffix",
                "may only hold letters, digits, '-' and '.'".into(),
            ));
        }
        if self.endpoint_types.is_empty() {
            return Err((
                "endpoint_types",
                "must name at least one endpoint type".into(),
            ));
        }
        if self.listen.http.is_none() {
            return Err(("listen.http", "a listener is required".into()));
        }
        for p in &self.tcp.listen {
            if p.cartridge.is_none() && p.endpoint.is_none() {
                return Err((
                    "tcp.listen",
                    format!(
                        "{}: name a cartridge (e.g. mysql-5.5) or an endpoint type or protocol (e.g. database, mysql)",
                        p.address
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `limits`, `upstream`, `forwarded`, `worker_threads`.
    fn validate_limits(&self) -> Result<(), Invalid> {
        if self.limits.max_header_bytes < 8192 {
            return Err(("limits.max_header_bytes", "must be at least 8192".into()));
        }
        if !self.forwarded.by_is_valid() {
            return Err((
                "forwarded.by",
                "empty, `ip`, or an obfuscated name: `_` then letters, digits, `.`, `_`, `-`"
                    .into(),
            ));
        }
        if self.limits.max_connections == 0 {
            return Err(("limits.max_connections", "must be at least 1".into()));
        }
        if self.worker_threads > MAX_WORKER_THREADS {
            return Err((
                "worker_threads",
                format!("must be from 0 (one per CPU) to {MAX_WORKER_THREADS}"),
            ));
        }
        if self.limits.h2_max_concurrent_streams == 0 {
            return Err((
                "limits.h2_max_concurrent_streams",
                "must be at least 1".into(),
            ));
        }
        if self.limits.max_admin_connections == 0 {
            return Err(("limits.max_admin_connections", "must be at least 1".into()));
        }
        let (v4, v6) = (
            self.limits.client_ipv4_prefix,
            self.limits.client_ipv6_prefix,
        );
        if let Err(e) = per_source::KeyRule::new(v4, 64) {
            return Err(("limits.client_ipv4_prefix", e.to_string()));
        }
        if let Err(e) = per_source::KeyRule::new(32, v6) {
            return Err(("limits.client_ipv6_prefix", e.to_string()));
        }
        if self.upstream.max_connections_per_backend == 0 {
            return Err((
                "upstream.max_connections_per_backend",
                "must be at least 1".into(),
            ));
        }
        if !(1..=100).contains(&self.upstream.source_share) {
            return Err(("upstream.source_share", "a percentage from 1 to 100".into()));
        }
        self.traces.check()?;
        self.compression.check()?;
        if self.upstream.slow_start > Duration::from_secs(3600) {
            return Err(("upstream.slow_start", "at most 1h".into()));
        }
        if self.upstream.source_reserve > 50 {
            return Err((
                "upstream.source_reserve",
                "a percentage from 0 to 50 (the rest of the slots is for busy addresses)".into(),
            ));
        }
        for (field, d) in [
            ("upstream.connect_timeout", self.upstream.connect_timeout),
            ("upstream.response_timeout", self.upstream.response_timeout),
            (
                "limits.header_read_timeout",
                self.limits.header_read_timeout,
            ),
        ] {
            if d.is_zero() {
                return Err((field, "must be longer than 0s".into()));
            }
        }
        Ok(())
    }

    /// `reconcile`.
    fn validate_reconcile(&self) -> Result<(), Invalid> {
        let Some(r) = &self.reconcile else {
            return Ok(());
        };
        let url = r.url.parse::<http::Uri>().ok();
        if !url
            .is_some_and(|u| matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some())
        {
            return Err((
                "reconcile.url",
                "must be an http:// or https:// URL such as https://broker.example.com/broker/rest"
                    .into(),
            ));
        }
        if r.timeout.is_zero() {
            return Err(("reconcile.timeout", "must be longer than 0s".into()));
        }
        if r.concurrency == 0 || r.concurrency > 64 {
            return Err(("reconcile.concurrency", "must be from 1 to 64".into()));
        }
        if r.user.is_some() != r.password_file.is_some() {
            return Err((
                "reconcile.user",
                "reconcile.user and reconcile.password_file go together".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

impl Config {
    /// `access_log`: the syslog sink, the template against the captures.
    fn validate_access_log(&self) -> Result<(), Invalid> {
        let a = &self.access_log;
        if let Some(s) = &a.syslog {
            s.check()?;
        }
        if a.enabled && !a.stderr && a.syslog.is_none() {
            return Err((
                "access_log.stderr",
                "false sends the lines to syslog only, and access_log.syslog is not set (enabled: false turns them off)".into(),
            ));
        }
        crate::log_format::Template::parse(&a.template, &a.capture.names())
            .map_err(|e| ("access_log.template", e))?;
        let c = &a.capture;
        if c.request.len() + c.response.len() + c.cookies.len() > 32 {
            return Err(("access_log.capture", "at most 32 names in all".into()));
        }
        if !(1..=1024).contains(&c.length) {
            return Err(("access_log.capture.length", "1 to 1024 bytes".into()));
        }
        Ok(())
    }
}

/// `proxy_protocol:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyProtocol {
    /// Addresses or CIDRs of the load balancers that send the header.
    #[serde(default)]
    pub trusted: Vec<String>,
}

impl ProxyProtocol {
    /// The trusted networks.
    pub fn networks(&self) -> Vec<ipnet::IpNet> {
        self.trusted
            .iter()
            .filter_map(|c| crate::policy::settings::parse_cidr(c))
            .collect()
    }
}
