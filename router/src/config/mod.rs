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

use crate::members::health;
use crate::members::probe::{Check, StatusMatch};
use crate::table::balance::Balance;

pub use crate::request::headers::ForwardedSettings;
pub use crate::request::limits::Limits;
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
}

/// `acme`: where certificates come from for aliases that have none of their own.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AcmeConfig {
    /// The CA's directory URL (`https://`), e.g. Let's Encrypt's
    /// `https://acme-v02.api.letsencrypt.org/directory`; none: ACME is off.
    pub directory: Option<String>,
    /// Contact URLs for the account (`mailto:ops@example.com`).
    pub contact: Vec<String>,
    /// PEM roots for the CA's own HTTPS (a private CA); none: the system bundle.
    pub ca_file: Option<PathBuf>,
    /// How often the route table is looked over for aliases needing a certificate.
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
    /// Deadline of one request to the CA, body included.
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Deadline of one order, from its creation to its certificate.
    #[serde(with = "humantime_serde")]
    pub order_timeout: Duration,
    /// The first wait before an alias whose order failed is tried again; it
    /// doubles with each failure, up to a day.
    #[serde(with = "humantime_serde")]
    pub retry_after: Duration,
    /// How the CA validates: `http-01` (port 80, `listen.http`) or `tls-alpn-01`
    /// (port 443, `listen.https`: names validate where port 80 is closed).
    pub challenge: AcmeChallenge,
    /// A router pair: the other router's admin address (`host:port`), through
    /// which the two share one account, one order per alias, the challenge
    /// answers and the certificates (see `issuer`). Needs `acme.node` and
    /// `admin.token_file` (the same token on both).
    pub peer: Option<String>,
    /// This router's name in the pair, `a` or `b`: each alias is ordered by
    /// one of them; `a` creates the account.
    pub node: Option<AcmeNode>,
    /// How long the peer may not answer before this router orders for every
    /// alias (and takes over the peer's orders in flight).
    #[serde(with = "humantime_serde")]
    pub peer_timeout: Duration,
}

/// `acme.node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum AcmeNode {
    #[serde(rename = "a")]
    A,
    #[serde(rename = "b")]
    B,
}

/// `acme.challenge`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum AcmeChallenge {
    #[default]
    #[serde(rename = "http-01")]
    Http01,
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
}

impl Default for AcmeConfig {
    fn default() -> AcmeConfig {
        AcmeConfig {
            directory: None,
            contact: Vec::new(),
            ca_file: None,
            check_interval: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            order_timeout: Duration::from_secs(300),
            retry_after: Duration::from_secs(60),
            challenge: AcmeChallenge::Http01,
            peer: None,
            node: None,
            peer_timeout: Duration::from_secs(30),
        }
    }
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
    /// [`Http3Config`] and "HTTP/3" in `docs/routing.md`).
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

fn default_admin() -> Option<SocketAddr> {
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

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spi {
    #[serde(default)]
    pub source: SourceKind,
    pub spool: Option<SpoolConfig>,
    pub stomp: Option<StompConfig>,
    pub amqp: Option<AmqpConfig>,
    /// Which apps this router stores (sharding); all when absent.
    #[serde(default)]
    pub shard: spi_consumer::shard::Shard,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// A directory of event files (the embedded default).
    #[default]
    Spool,
    /// ActiveMQ over STOMP 1.2.
    Stomp,
    /// RabbitMQ over AMQP 0-9-1.
    Amqp,
    /// No event source: serve the saved state only.
    None,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpoolConfig {
    pub path: PathBuf,
    /// How often the directory is scanned.
    #[serde(default = "default_spool_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// Larger files are parked in `failed/` unread.
    #[serde(default = "default_spool_max_file_bytes")]
    pub max_file_bytes: u64,
    /// Files in `done/` (owner-only: they may hold keys) are removed after this.
    #[serde(default = "default_spool_done_retention", with = "humantime_serde")]
    pub done_retention: Duration,
    /// Files in `failed/` (with their reasons) are removed after this.
    #[serde(default = "default_spool_failed_retention", with = "humantime_serde")]
    pub failed_retention: Duration,
}

fn default_spool_max_file_bytes() -> u64 {
    spi_consumer::source::spool::SpoolLimits::default().max_file_bytes
}

fn default_spool_failed_retention() -> Duration {
    spi_consumer::source::spool::SpoolLimits::default().failed_retention
}

fn default_spool_done_retention() -> Duration {
    spi_consumer::source::spool::SpoolLimits::default().done_retention
}

/// The broker, for `spi.source: stomp`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StompConfig {
    /// Failover list, `host:port`, tried in order.
    pub hosts: Vec<String>,
    /// A queue per router (`/queue/routinginfo.router-a`) or a topic with a durable
    /// subscription (`/topic/routinginfo` plus `client_id` and `subscription_name`).
    pub destination: String,
    pub login: Option<String>,
    /// A file holding the passcode (first line), so that the secret is not in this file.
    pub passcode_file: Option<PathBuf>,
    pub client_id: Option<String>,
    /// Durable topic subscription name (ActiveMQ `activemq.subscriptionName`).
    pub subscription_name: Option<String>,
    /// Messages the broker may send ahead of acknowledgements.
    #[serde(default = "default_prefetch")]
    pub prefetch: u32,
    #[serde(default = "default_heartbeat", with = "humantime_serde")]
    pub heartbeat: Duration,
    /// For connecting and for each broker answer.
    #[serde(default = "default_connect_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The STOMP `host` header.
    #[serde(default = "default_vhost")]
    pub vhost: String,
    /// STOMP over TLS.
    pub tls: Option<StompTls>,
}

/// TLS to the broker: its CA, and our certificate if it asks for one.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StompTls {
    pub ca_file: PathBuf,
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Verify this name instead of the host of each `host:port`.
    pub server_name: Option<String>,
}

/// Client-facing TLS.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM chain served when no alias certificate matches the SNI name (normally the
    /// `*.<cloud_domain>` wildcard, which covers the HA names), and without SNI.
    pub default_cert: Option<PathBuf>,
    /// Its private key (PEM: PKCS#1, PKCS#8 or SEC1; may be encrypted).
    pub default_key: Option<PathBuf>,
    /// A file whose first line is the pass phrase of an encrypted `default_key`.
    pub default_key_pass_file: Option<PathBuf>,
    /// Secret shared by both routers of the pair (at least 32 random bytes) from
    /// which session-ticket keys are derived, so clients resume after failover.
    pub session_ticket_key_file: Option<PathBuf>,
    /// How often the ticket key changes (tickets live one to two periods).
    #[serde(with = "humantime_serde")]
    pub session_ticket_rotation: Duration,
    /// Session resumption at all (without a key file: this router's memory only).
    pub resumption: bool,
    /// A removed certificate whose alias stays is served this long, so that the
    /// broker's `remove_ssl` + `add_ssl` replacement leaves no gap.
    #[serde(with = "humantime_serde")]
    pub replace_grace: Duration,
    /// Answer plain HTTP for hosts that have a certificate with a redirect to HTTPS
    /// (301 for GET/HEAD, 308 otherwise).
    pub redirect_http: bool,
    /// Time a client has to finish its TLS handshake.
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
}

impl Default for TlsConfig {
    fn default() -> TlsConfig {
        TlsConfig {
            default_cert: None,
            default_key: None,
            default_key_pass_file: None,
            session_ticket_key_file: None,
            session_ticket_rotation: Duration::from_secs(3600),
            resumption: true,
            replace_grace: Duration::from_secs(10),
            redirect_http: false,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// TLS towards `ssl_to_gear` members.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// PEM bundle of the CAs that sign the members' certificates (default: the
    /// system bundle).
    pub ca_file: Option<PathBuf>,
    /// Check the member's certificate. `false` encrypts without authenticating.
    #[serde(default = "yes")]
    pub verify: bool,
}

impl Default for UpstreamTls {
    fn default() -> UpstreamTls {
        UpstreamTls {
            ca_file: None,
            verify: true,
        }
    }
}

/// Connections to members.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Idle pooled connections are closed after this; keep it below the gear
    /// haproxy's 10 s keep-alive timeout so we never reuse one it is closing.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// From request sent to response headers received.
    #[serde(with = "humantime_serde")]
    pub response_timeout: Duration,
    /// Requests in flight to one member at most (the gear haproxy accepts 128).
    pub max_connections_per_backend: usize,
    /// How long a request waits for a free slot on a full member before a 503.
    #[serde(with = "humantime_serde")]
    pub queue_timeout: Duration,
    /// The share (percent) of a member's slots one client address may hold; beyond
    /// it that address waits for one of its own slots (503 after `queue_timeout`)
    /// while others are still served. 100: no
    /// per-address limit (e.g. behind a CDN that is the only client address).
    pub source_share: u8,
    /// The share (percent) of a member's slots kept for client addresses that hold
    /// few of them (see `members::reserve`): one address, or a few, cannot take a
    /// member's every slot. 0: none.
    pub source_reserve: u8,
    /// Idle connections kept per member; unset: `max_connections_per_backend`
    /// (fewer than the requests in flight closes and reopens connections under
    /// steady load: 12 000 connects in 10 s at 128 clients and 64).
    pub max_idle_per_backend: Option<usize>,
    /// `p2c` (least outstanding of two random members) or `round_robin`.
    pub balance: Balance,
    /// TLS towards members that expect it.
    pub tls: UpstreamTls,
}

impl Default for UpstreamConfig {
    fn default() -> UpstreamConfig {
        UpstreamConfig {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(8),
            response_timeout: Duration::from_secs(60),
            max_connections_per_backend: 100,
            queue_timeout: Duration::from_secs(1),
            source_share: 100,
            source_reserve: 10,
            max_idle_per_backend: None,
            balance: Balance::default(),
            tls: UpstreamTls::default(),
        }
    }
}

/// Member health: active checks, passive ejection, what to do when all are down.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// Active checks of every member (down members are probed even when off).
    pub checks: bool,
    /// Path of the HTTP check (`GET`).
    pub path: String,
    /// Statuses that pass: classes (`2xx`) or codes (`401`).
    pub statuses: Vec<String>,
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Each interval varies by up to ± this, so checks drift apart.
    #[serde(with = "humantime_serde")]
    pub jitter: Duration,
    /// Passes in a row that bring a down member back.
    pub rise: u32,
    /// Failures in a row that take a member down.
    pub fall: u32,
    /// A new member gets no traffic until its first check passes.
    pub gate_new: bool,
    /// Connect failures or resets in a row that eject a member at once; 0 = off.
    pub passive_failures: u32,
    /// With every member of an app down, send to them anyway (else 503).
    pub fail_open: bool,
    /// Host header of HTTP checks; default: the app's name `<app>-<ns>.<cloud_domain>`.
    pub host: Option<String>,
    /// Keep gears awake: send HTTP checks to this port of the member's address (the
    /// node's front end, usually 80) so that the platform's idler sees traffic.
    pub keep_awake_port: Option<u16>,
}

impl Default for HealthConfig {
    fn default() -> HealthConfig {
        HealthConfig {
            checks: true,
            path: Check::default().path,
            statuses: default_check_statuses(),
            interval: health::HealthSettings::default().interval,
            timeout: Check::default().timeout,
            jitter: health::HealthSettings::default().jitter,
            rise: health::HealthSettings::default().rise,
            fall: health::HealthSettings::default().fall,
            gate_new: true,
            passive_failures: health::HealthSettings::default().passive_failures,
            fail_open: true,
            host: None,
            keep_awake_port: None,
        }
    }
}

impl HealthConfig {
    /// The checker's settings (call after [`Config::parse`] validated them).
    pub fn settings(&self) -> health::HealthSettings {
        health::HealthSettings {
            active: self.checks,
            check: Check {
                path: self.path.clone(),
                statuses: self
                    .statuses
                    .iter()
                    .filter_map(|s| StatusMatch::parse(s))
                    .collect(),
                timeout: self.timeout,
                host: self.host.clone(),
                keep_awake_port: self.keep_awake_port,
            },
            interval: self.interval,
            jitter: self.jitter,
            rise: self.rise,
            fall: self.fall,
            gate_new: self.gate_new,
            passive_failures: self.passive_failures,
        }
    }
}

// The defaults of `health.*` are the health module's (one source).
fn default_check_statuses() -> Vec<String> {
    Check::default()
        .statuses
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessLog {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default)]
    pub format: LogFormat,
}

impl Default for AccessLog {
    fn default() -> AccessLog {
        AccessLog {
            enabled: true,
            format: LogFormat::Text,
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
fn default_prefetch() -> u32 {
    10
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

impl UpstreamConfig {
    /// Slots of one member one client address may hold (at least one).
    pub fn max_per_source(&self) -> usize {
        let share = usize::from(self.source_share.min(100));
        (self.max_connections_per_backend * share)
            .div_ceil(100)
            .max(1)
    }

    /// Idle connections kept per member (`max_idle_per_backend`, else as many as
    /// it has request slots).
    pub fn max_idle(&self) -> usize {
        self.max_idle_per_backend
            .unwrap_or(self.max_connections_per_backend)
    }
}

pub use config_file::ConfigError;

/// A field's dotted path and what is wrong with it.
type Invalid = (&'static str, String);

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = config_file::read_text(path)?;
        Config::parse(&text, &path.display().to_string())
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
        self.validate_names()?;
        self.validate_spi()?;
        self.validate_limits()?;
        self.validate_tls()?;
        self.validate_health()?;
        self.validate_reconcile()?;
        self.validate_acme()?;
        Ok(())
    }

    /// `acme`: a directory over HTTPS, served where the CA will look.
    fn validate_acme(&self) -> Result<(), Invalid> {
        let a = &self.acme;
        let Some(directory) = &a.directory else {
            return Ok(());
        };
        if !directory.starts_with("https://") || directory.len() <= "https://".len() {
            return Err((
                "acme.directory",
                "the CA's directory URL, https://...".into(),
            ));
        }
        match a.challenge {
            AcmeChallenge::Http01 if self.listen.http.is_none() => {
                return Err((
                    "acme.challenge",
                    "http-01 answers are served on listen.http: it is needed".into(),
                ));
            }
            AcmeChallenge::TlsAlpn01 if self.listen.https.is_none() => {
                return Err((
                    "acme.challenge",
                    "tls-alpn-01 answers are served on listen.https: it is needed".into(),
                ));
            }
            _ => {}
        }
        if let Some(c) = a.contact.iter().find(|c| !c.starts_with("mailto:")) {
            return Err(("acme.contact", format!("{c:?}: contacts are mailto: URLs")));
        }
        for (field, d) in [
            ("acme.check_interval", a.check_interval),
            ("acme.request_timeout", a.request_timeout),
            ("acme.order_timeout", a.order_timeout),
            ("acme.retry_after", a.retry_after),
            ("acme.peer_timeout", a.peer_timeout),
        ] {
            if d < Duration::from_secs(1) {
                return Err((field, "must be at least 1s".into()));
            }
        }
        self.validate_acme_pair()
    }

    /// `acme.peer`: an admin address, this router's name, and a token the
    /// peer's `/acme/*` calls (which carry private keys) are guarded by.
    fn validate_acme_pair(&self) -> Result<(), Invalid> {
        let a = &self.acme;
        let Some(peer) = &a.peer else {
            return Ok(());
        };
        let port_ok = peer
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !port_ok {
            return Err((
                "acme.peer",
                format!("{peer:?}: the other router's admin address, host:port"),
            ));
        }
        if a.node.is_none() {
            return Err((
                "acme.node",
                "a pair (acme.peer) needs this router's name in it: a or b".into(),
            ));
        }
        if self.admin.token_file.is_none() || self.listen.admin.is_none() {
            return Err((
                "acme.peer",
                "a pair shares certificate keys through the admin API: it needs listen.admin and admin.token_file (the same token on both routers)".into(),
            ));
        }
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

    /// Where routing events come from.
    fn validate_spi(&self) -> Result<(), Invalid> {
        self.spi.shard.validate()?;
        if self.spi.source == SourceKind::Spool && self.spi.spool.is_none() {
            return Err((
                "spi.spool",
                "spi.source is spool, so spi.spool.path is required".into(),
            ));
        }
        if self.spi.source == SourceKind::Stomp {
            let Some(stomp) = &self.spi.stomp else {
                return Err((
                    "spi.stomp",
                    "spi.source is stomp, so spi.stomp is required".into(),
                ));
            };
            if stomp.hosts.is_empty() || stomp.hosts.iter().any(|h| !h.contains(':')) {
                return Err(("spi.stomp.hosts", "list the brokers as host:port".into()));
            }
            if !(stomp.destination.starts_with("/queue/")
                || stomp.destination.starts_with("/topic/"))
            {
                return Err((
                    "spi.stomp.destination",
                    "must start with /queue/ or /topic/".into(),
                ));
            }
            if let Some(tls) = &stomp.tls
                && tls.cert_file.is_some() != tls.key_file.is_some()
            {
                return Err(("spi.stomp.tls", "cert_file and key_file go together".into()));
            }
            if stomp.subscription_name.is_some() && stomp.client_id.is_none() {
                return Err((
                    "spi.stomp.subscription_name",
                    "a durable subscription needs spi.stomp.client_id".into(),
                ));
            }
        }
        if self.spi.source == SourceKind::Amqp {
            let Some(amqp) = &self.spi.amqp else {
                return Err((
                    "spi.amqp",
                    "spi.source is amqp, so spi.amqp is required".into(),
                ));
            };
            if amqp.uris.is_empty()
                || amqp
                    .uris
                    .iter()
                    .any(|u| !(u.starts_with("amqp://") || u.starts_with("amqps://")))
            {
                return Err(("spi.amqp.uris", "list the brokers as amqp:// URIs".into()));
            }
            if amqp.queue.is_empty() {
                return Err(("spi.amqp.queue", "name the router's queue".into()));
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

    /// `tls`.
    fn validate_tls(&self) -> Result<(), Invalid> {
        let t = &self.tls;
        if t.default_cert.is_some() != t.default_key.is_some() {
            let field = if t.default_cert.is_some() {
                "tls.default_key"
            } else {
                "tls.default_cert"
            };
            return Err((
                field,
                "tls.default_cert and tls.default_key go together".into(),
            ));
        }
        if self.tls.redirect_http && self.listen.https.is_none() {
            return Err((
                "tls.redirect_http",
                "redirecting to HTTPS needs listen.https".into(),
            ));
        }
        if self.listen.http3.is_some() && self.listen.https.is_none() {
            return Err((
                "listen.http3",
                "HTTP/3 is announced on HTTPS responses and shares its certificates: it needs listen.https".into(),
            ));
        }
        if self.http3.max_concurrent_streams == Some(0) {
            return Err(("http3.max_concurrent_streams", "must be at least 1".into()));
        }
        if t.session_ticket_rotation < Duration::from_secs(60) {
            return Err(("tls.session_ticket_rotation", "must be at least 1m".into()));
        }
        Ok(())
    }

    /// `health`.
    fn validate_health(&self) -> Result<(), Invalid> {
        let h = &self.health;
        if !h.path.starts_with('/') || h.path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err((
                "health.path",
                "must be an origin-form path such as /health".into(),
            ));
        }
        if h.statuses.is_empty() {
            return Err(("health.statuses", "list at least one status".into()));
        }
        if let Some(bad) = h.statuses.iter().find(|s| StatusMatch::parse(s).is_none()) {
            return Err((
                "health.statuses",
                format!("{bad:?} is neither a class like 2xx nor a code like 401"),
            ));
        }
        if h.rise == 0 || h.fall == 0 {
            let field = if h.rise == 0 {
                "health.rise"
            } else {
                "health.fall"
            };
            return Err((field, "must be at least 1".into()));
        }
        if h.timeout > h.interval {
            return Err((
                "health.timeout",
                "must not be longer than health.interval".into(),
            ));
        }
        if let Some(host) = &h.host
            && (host.is_empty() || host.bytes().any(|b| b <= b' ' || b == 0x7f))
        {
            return Err(("health.host", "must be a host name".into()));
        }
        for (field, d) in [
            ("health.interval", h.interval),
            ("health.timeout", h.timeout),
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
