//! Certificates from an ACME CA (RFC 8555) for names the router serves.
//!
//! The protocol (JWS-signed requests, nonces, the order's state machine, the
//! CSR) is `instant-acme`'s: a well-kept client that Let's Encrypt's staging
//! and Pebble both run against, with ACME Renewal Information and order
//! resumption by URL (what a router pair needs when one of them fails
//! mid-order). What is ours is what a router must add around it:
//!
//! - **The account** ([`Client::open`]) lives in a directory the router owns
//!   (`account.json`, mode 0600: it holds the account's private key), created on
//!   first use and reused after every restart, so a router never opens a second
//!   account with the CA.
//! - **Every exchange with the CA is bounded** ([`http::Bounded`]): a deadline per
//!   request (connect, TLS, response and body) and a cap on the body's size, so
//!   a slow or hostile CA costs one failed order, never a stuck task or memory.
//! - **HTTP-01 answers** are published through [`Answers`] (the router's HTTP
//!   listener serves them) for the order's life and withdrawn when it ends,
//!   whatever its outcome.

pub mod ari;
pub mod http;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeStatus, ChallengeType, Identifier,
    NewAccount, NewOrder, Order, OrderStatus, RetryPolicy,
};

/// Where the CA is and how to talk to it.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The CA's directory URL (`https://`).
    pub directory: String,
    /// Contact URLs for the account (`mailto:ops@example.com`).
    pub contact: Vec<String>,
    /// PEM roots to trust for the CA's own HTTPS (a private CA, Pebble); `None`:
    /// the system bundle.
    pub ca_file: Option<PathBuf>,
    /// Deadline of one request to the CA, body included.
    pub request_timeout: Duration,
    /// Largest response body taken from the CA (a certificate chain is a few KiB).
    pub max_body: usize,
    /// How long an order may take, from its creation to its certificate.
    pub order_timeout: Duration,
    /// How the CA checks that the name is ours.
    pub challenge: Challenge,
}

/// The challenge an order answers (RFC 8555 §8.3, RFC 8737).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Challenge {
    /// `http://NAME/.well-known/acme-challenge/TOKEN` on port 80.
    #[default]
    Http01,
    /// A TLS handshake with ALPN `acme-tls/1` on port 443: a name validates where
    /// port 80 is closed.
    TlsAlpn01,
}

/// The ALPN protocol of TLS-ALPN-01 validation handshakes.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The certificate a TLS-ALPN-01 validation handshake for a name is given: self
/// signed, the name its only SAN, the key authorization's digest in the critical
/// acmeIdentifier extension (RFC 8737 §3).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AlpnCertificate {
    pub cert_der: Vec<u8>,
    /// PKCS#8.
    pub key_der: Vec<u8>,
}

impl AlpnCertificate {
    fn new(
        name: &str,
        key_authorization: &instant_acme::KeyAuthorization,
    ) -> Result<AlpnCertificate, AcmeError> {
        let bad = |e: rcgen::Error| AcmeError::AlpnCertificate(e.to_string());
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(bad)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(
            key_authorization.digest().as_ref(),
        )];
        let key = rcgen::KeyPair::generate().map_err(bad)?;
        let cert = params.self_signed(&key).map_err(bad)?;
        Ok(AlpnCertificate {
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        })
    }
}

impl Settings {
    /// `directory` with the defaults for the rest: 30 s a request, 1 MiB a body,
    /// 5 minutes an order.
    pub fn new(directory: impl Into<String>) -> Settings {
        Settings {
            directory: directory.into(),
            contact: Vec::new(),
            ca_file: None,
            request_timeout: Duration::from_secs(30),
            max_body: 1024 * 1024,
            order_timeout: Duration::from_secs(300),
            challenge: Challenge::Http01,
        }
    }
}

/// Why an account or an order failed.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("ACME account file {path}: {source}")]
    AccountFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("ACME account file {path} is not an account: {source}")]
    AccountJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("HTTPS to the ACME CA: {0}")]
    Tls(#[from] http::HttpError),
    #[error("ACME: {0}")]
    Protocol(#[from] instant_acme::Error),
    #[error("the CA offers no {kind:?} challenge for {name}")]
    NoChallenge { name: String, kind: Challenge },
    #[error("certificate signing request: {0}")]
    Csr(String),
    #[error("TLS-ALPN-01 certificate: {0}")]
    AlpnCertificate(String),
    #[error("authorization for {name} is {status:?}")]
    Authorization {
        name: String,
        status: AuthorizationStatus,
    },
    #[error("order for {name} ended {status:?}")]
    Order { name: String, status: OrderStatus },
    #[error("order for {0} took longer than its deadline")]
    OrderTimeout(String),
    #[error("{source} (the CA asks to wait {retry_after:?})")]
    RetryAfter {
        retry_after: Duration,
        source: Box<AcmeError>,
    },
}

impl AcmeError {
    /// The wait the CA asked for (`Retry-After` on a 429 or 503) before this failed.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            AcmeError::RetryAfter { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// `self`, with the wait the CA asked for while it was failing, if any.
    fn with_wait(self, said: &std::sync::Mutex<Option<Duration>>) -> AcmeError {
        match said.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(retry_after) => AcmeError::RetryAfter {
                retry_after,
                source: Box::new(self),
            },
            None => self,
        }
    }
}

/// What an answer-publishing call returns: done once the answer is served
/// where the CA will look (on this router and, in a pair, on its peer).
pub type Publishing<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// An order's answer to one challenge.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Answer {
    /// `http://NAME/.well-known/acme-challenge/TOKEN` answers `key_authorization`.
    Http01 {
        token: String,
        key_authorization: String,
    },
    /// `acme-tls/1` handshakes for `name` get `cert`.
    TlsAlpn01 { name: String, cert: AlpnCertificate },
}

/// How far an order got, as recorded for another router that may have to
/// take it over (a router pair): its URL at the CA from its creation on, and
/// the key it is finalized with from just before finalization.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct OrderRecord {
    pub url: String,
    /// PKCS#8 PEM; `None` until the order is finalized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_pem: Option<String>,
}

/// Publishes answers where the CA will look for them: HTTP-01's at
/// `http://NAME/.well-known/acme-challenge/TOKEN`, TLS-ALPN-01's on handshakes
/// for NAME with ALPN `acme-tls/1`. Each call is awaited before the CA is told
/// to look, so an implementation may put the answer on another router first.
pub trait Answers: Send + Sync {
    /// Serve `answer` from now on.
    fn publish<'a>(&'a self, answer: &'a Answer) -> Publishing<'a>;
    /// Stop serving `answer` (the order ended, however it ended).
    fn withdraw<'a>(&'a self, answer: &'a Answer) -> Publishing<'a>;
    /// The order for `name` got as far as `record`: called after its creation
    /// (before any answer) and before its finalization. Nothing by default.
    fn progress<'a>(&'a self, name: &'a str, record: &'a OrderRecord) -> Publishing<'a> {
        let _ = (name, record);
        Box::pin(async {})
    }
}

/// The path HTTP-01 answers are served under.
pub const CHALLENGE_PATH: &str = "/.well-known/acme-challenge/";

/// The answers of the orders in flight, for the listeners to serve: HTTP-01's
/// (token → key authorization) and TLS-ALPN-01's (name → certificate).
#[derive(Debug, Default)]
pub struct Challenges {
    http: std::sync::Mutex<std::collections::HashMap<String, String>>,
    alpn: std::sync::Mutex<std::collections::HashMap<String, AlpnCertificate>>,
}

impl Challenges {
    fn map(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, String>> {
        self.http.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn alpn_map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, AlpnCertificate>> {
        self.alpn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The TLS-ALPN-01 certificate for `name` (lower-case), if an order waits on it.
    pub fn alpn_certificate(&self, name: &str) -> Option<AlpnCertificate> {
        self.alpn_map().get(name).cloned()
    }

    /// How many answers are served (HTTP-01 and TLS-ALPN-01).
    pub fn len(&self) -> usize {
        self.map().len() + self.alpn_map().len()
    }

    /// Whether no order waits for an answer.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty() && self.alpn_map().is_empty()
    }

    /// The answer for a request path, if it asks for a token of an order in flight.
    pub fn answer(&self, path: &str) -> Option<String> {
        let token = path.strip_prefix(CHALLENGE_PATH)?;
        let map = self.map();
        if map.is_empty() {
            return None;
        }
        map.get(token).cloned()
    }
}

impl Challenges {
    /// Serves `answer` (sync: a map insert).
    pub fn insert(&self, answer: &Answer) {
        match answer {
            Answer::Http01 {
                token,
                key_authorization,
            } => {
                self.map().insert(token.clone(), key_authorization.clone());
            }
            Answer::TlsAlpn01 { name, cert } => {
                self.alpn_map().insert(name.clone(), cert.clone());
            }
        }
    }

    /// Stops serving `answer`.
    pub fn remove(&self, answer: &Answer) {
        match answer {
            Answer::Http01 { token, .. } => {
                self.map().remove(token);
            }
            Answer::TlsAlpn01 { name, .. } => {
                self.alpn_map().remove(name);
            }
        }
    }
}

impl Answers for Challenges {
    fn publish<'a>(&'a self, answer: &'a Answer) -> Publishing<'a> {
        self.insert(answer);
        Box::pin(async {})
    }

    fn withdraw<'a>(&'a self, answer: &'a Answer) -> Publishing<'a> {
        self.remove(answer);
        Box::pin(async {})
    }
}

/// An issued certificate.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The chain, leaf first (PEM).
    pub chain_pem: String,
    /// Its private key (PKCS#8 PEM), made for this order.
    pub key_pem: String,
    /// The order's URL at the CA.
    pub order_url: String,
}

/// An ACME account at one CA.
pub struct Client {
    account: Account,
    /// The CA's last `Retry-After` (see [`http::Bounded`]).
    said_retry_after: std::sync::Arc<Mutex<Option<Duration>>>,
    order_timeout: Duration,
    challenge: Challenge,
}

/// Whether `bytes` are an account as [`Client::open`] keeps it (what a pair's
/// router takes from its peer before it saves it).
pub fn is_account(bytes: &[u8]) -> bool {
    serde_json::from_slice::<AccountCredentials>(bytes).is_ok()
}

/// The account's file in the router's directory.
pub const ACCOUNT_FILE: &str = "account.json";

impl Client {
    /// The account kept in `dir` (`account.json`), or a new one at the CA,
    /// saved there (0600) before it is used.
    pub async fn open(settings: &Settings, dir: &Path) -> Result<Client, AcmeError> {
        let http = http::Bounded::new(settings)?;
        let said = http.said_retry_after.clone();
        Client::open_with(settings, dir, http)
            .await
            .map_err(|e| e.with_wait(&said))
    }

    async fn open_with(
        settings: &Settings,
        dir: &Path,
        http: http::Bounded,
    ) -> Result<Client, AcmeError> {
        let said_retry_after = http.said_retry_after.clone();
        let path = dir.join(ACCOUNT_FILE);
        let file_err = |source| AcmeError::AccountFile {
            path: path.clone(),
            source,
        };
        let account = match std::fs::read(&path) {
            Ok(bytes) => {
                let credentials: AccountCredentials =
                    serde_json::from_slice(&bytes).map_err(|source| AcmeError::AccountJson {
                        path: path.clone(),
                        source,
                    })?;
                Account::builder_with_http(Box::new(http))
                    .from_credentials(credentials)
                    .await?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let contact: Vec<&str> = settings.contact.iter().map(String::as_str).collect();
                let (account, credentials) = Account::builder_with_http(Box::new(http))
                    .create(
                        &NewAccount {
                            contact: &contact,
                            terms_of_service_agreed: true,
                            only_return_existing: false,
                        },
                        settings.directory.clone(),
                        None,
                    )
                    .await?;
                let json =
                    serde_json::to_vec(&credentials).map_err(|source| AcmeError::AccountJson {
                        path: path.clone(),
                        source,
                    })?;
                std::fs::create_dir_all(dir).map_err(file_err)?;
                durable_file::write(&path, &json).map_err(file_err)?;
                tracing::info!(account = %account.id(), file = %path.display(), "ACME account created");
                account
            }
            Err(e) => return Err(file_err(e)),
        };
        Ok(Client {
            account,
            said_retry_after,
            order_timeout: settings.order_timeout,
            challenge: settings.challenge,
        })
    }

    /// The account's URL at the CA.
    pub fn account_id(&self) -> &str {
        self.account.id()
    }

    /// Orders a certificate for `name`, answering through `answers` for the
    /// order's life; within `Settings::order_timeout`. With `resume`, the order
    /// another router recorded (a pair's failover) is taken over where it
    /// stands instead, so the CA sees one order; a new one only when it can no
    /// longer lead to a certificate.
    pub async fn issue(
        &self,
        name: &str,
        answers: &dyn Answers,
        resume: Option<OrderRecord>,
    ) -> Result<Issued, AcmeError> {
        let published = Published {
            answers,
            list: Mutex::new(Vec::new()),
        };
        self.said_retry_after
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let result = tokio::time::timeout(self.order_timeout, self.order(name, &published, resume))
            .await
            .map_err(|_| AcmeError::OrderTimeout(name.to_string()))
            .and_then(|r| r);
        let list = std::mem::take(&mut *published.list.lock().unwrap_or_else(|p| p.into_inner()));
        for answer in &list {
            answers.withdraw(answer).await;
        }
        result.map_err(|e| e.with_wait(&self.said_retry_after))
    }

    /// The order `resume` names if it can still lead to a certificate with a
    /// key we have, else a new one, recorded through `answers` before use.
    async fn open_order(
        &self,
        name: &str,
        answers: &dyn Answers,
        resume: Option<OrderRecord>,
    ) -> Result<(Order, Option<String>), AcmeError> {
        if let Some(record) = resume {
            match self.account.order(record.url.clone()).await {
                Ok(mut order) => {
                    let status = order.state().status;
                    let usable = match status {
                        OrderStatus::Pending | OrderStatus::Ready => true,
                        OrderStatus::Processing | OrderStatus::Valid => record.key_pem.is_some(),
                        OrderStatus::Invalid => false,
                    };
                    if usable {
                        tracing::info!(name, url = %record.url, ?status, "ACME order taken over");
                        return Ok((order, record.key_pem));
                    }
                    tracing::info!(name, url = %record.url, ?status, "ACME order cannot be taken over; a new one");
                }
                Err(e) => {
                    tracing::info!(name, url = %record.url, error = %e, "ACME order cannot be read; a new one");
                }
            }
        }
        let identifiers = [Identifier::Dns(name.to_string())];
        let order = self.account.new_order(&NewOrder::new(&identifiers)).await?;
        let record = OrderRecord {
            url: order.url().to_string(),
            key_pem: None,
        };
        answers.progress(name, &record).await;
        Ok((order, None))
    }

    async fn order(
        &self,
        name: &str,
        published: &Published<'_>,
        resume: Option<OrderRecord>,
    ) -> Result<Issued, AcmeError> {
        let (mut order, key_pem) = self.open_order(name, published.answers, resume).await?;
        let retries = poll_policy(self.order_timeout);
        let key_pem = match (order.state().status, key_pem) {
            (OrderStatus::Processing | OrderStatus::Valid, Some(key_pem)) => key_pem,
            _ => {
                self.answer(name, &mut order, published).await?;
                // The CA validates at its own pace (Pebble waits up to 15 s on purpose).
                let status = order.poll_ready(&retries).await?;
                if status != OrderStatus::Ready {
                    return Err(AcmeError::Order {
                        name: name.to_string(),
                        status,
                    });
                }
                self.finalize(name, &mut order, published.answers).await?
            }
        };
        let chain_pem = order.poll_certificate(&retries).await?;
        Ok(Issued {
            chain_pem,
            key_pem,
            order_url: order.url().to_string(),
        })
    }

    /// Publishes the answer of each pending authorization and tells the CA to
    /// look (unless it already looks: a taken-over order).
    async fn answer(
        &self,
        name: &str,
        order: &mut Order,
        published: &Published<'_>,
    ) -> Result<(), AcmeError> {
        let mut authorizations = order.authorizations();
        while let Some(authz) = authorizations.next().await {
            let mut authz = authz?;
            match authz.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                status => {
                    return Err(AcmeError::Authorization {
                        name: name.to_string(),
                        status,
                    });
                }
            }
            let kind = match self.challenge {
                Challenge::Http01 => ChallengeType::Http01,
                Challenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
            };
            let mut challenge = authz
                .challenge(kind)
                .ok_or_else(|| AcmeError::NoChallenge {
                    name: name.to_string(),
                    kind: self.challenge,
                })?;
            let answer = match self.challenge {
                Challenge::Http01 => Answer::Http01 {
                    token: challenge.token.clone(),
                    key_authorization: challenge.key_authorization().as_str().to_string(),
                },
                Challenge::TlsAlpn01 => Answer::TlsAlpn01 {
                    name: name.to_string(),
                    cert: AlpnCertificate::new(name, &challenge.key_authorization())?,
                },
            };
            published.add(answer).await;
            if challenge.status == ChallengeStatus::Pending {
                challenge.set_ready().await?;
            }
        }
        Ok(())
    }

    /// A new key, recorded with the order before the CA sees its CSR (a router
    /// taking the order over then has the key of the certificate it fetches).
    async fn finalize(
        &self,
        name: &str,
        order: &mut Order,
        answers: &dyn Answers,
    ) -> Result<String, AcmeError> {
        let bad = |e: rcgen::Error| AcmeError::Csr(e.to_string());
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(bad)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let key = rcgen::KeyPair::generate().map_err(bad)?;
        let csr = params.serialize_request(&key).map_err(bad)?;
        let key_pem = key.serialize_pem();
        let record = OrderRecord {
            url: order.url().to_string(),
            key_pem: Some(key_pem.clone()),
        };
        answers.progress(name, &record).await;
        order.finalize_csr(csr.der()).await?;
        Ok(key_pem)
    }
}

/// How an order is polled while the CA validates and issues: from 250 ms,
/// each wait 1.3 times the last (honouring the CA's `Retry-After`), until the
/// order's deadline. `instant-acme`'s default doubles, so a validation done at
/// 5 s is seen at 7.75 s and one done at 8 s at 15.75 s; at 1.3 the poll after
/// it comes at most about a third of the time later, for a dozen polls over 15 s.
fn poll_policy(deadline: Duration) -> RetryPolicy {
    RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .backoff(1.3)
        .timeout(deadline)
}

/// The answers an order published, withdrawn by [`Client::issue`] when it
/// ends, however it ends.
struct Published<'a> {
    answers: &'a dyn Answers,
    list: Mutex<Vec<Answer>>,
}

impl Published<'_> {
    async fn add(&self, answer: Answer) {
        self.answers.publish(&answer).await;
        self.list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_published_tokens_under_the_challenge_path_are_answered() {
        let c = Challenges::default();
        assert_eq!(c.answer("/.well-known/acme-challenge/abc"), None);
        let answer = Answer::Http01 {
            token: "abc".into(),
            key_authorization: "abc.thumb".into(),
        };
        c.insert(&answer);
        assert_eq!(
            c.answer("/.well-known/acme-challenge/abc").as_deref(),
            Some("abc.thumb")
        );
        assert_eq!(c.answer("/.well-known/acme-challenge/abd"), None);
        assert_eq!(c.answer("/abc"), None, "only under the challenge path");
        c.remove(&answer);
        assert_eq!(c.answer("/.well-known/acme-challenge/abc"), None);
    }
}
