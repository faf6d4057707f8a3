//! `acme:`: where certificates come from for aliases that have none of their
//! own, for one router or a pair; the configuration file reads it
//! (`crate::config`), which also checks it.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

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
    pub node: Option<crate::pair::Node>,
    /// How long the peer may not answer before this router orders for every
    /// alias (and takes over the peer's orders in flight).
    #[serde(with = "humantime_serde")]
    pub peer_timeout: Duration,
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
