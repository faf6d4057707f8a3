//! `spi:`: where routing events come from (spool, STOMP, AMQP), and its checks.

use super::*;

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

pub(super) fn default_spool_max_file_bytes() -> u64 {
    spi_consumer::source::spool::SpoolLimits::default().max_file_bytes
}

pub(super) fn default_spool_failed_retention() -> Duration {
    spi_consumer::source::spool::SpoolLimits::default().failed_retention
}

pub(super) fn default_spool_done_retention() -> Duration {
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

impl Config {
    /// Where routing events come from.
    pub(super) fn validate_spi(&self) -> Result<(), Invalid> {
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
}
