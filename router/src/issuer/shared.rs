//! ACME's certificates and answers, as the issuer (`crate::issuer`) and the
//! admin API's `/acme/*` calls share them: the saved
//! certificates (`state_dir/acme/certs`, and an index of them by issue time for
//! the peer's catch-up), the answers served to the CA, the orders the pair's
//! other router has in flight, and the certificates it put here.
//!
//! Everything a peer puts here is checked before it is kept: a certificate must
//! load and its key must be its own; an answer must parse. Nothing
//! here talks to the network; the issuer's `peer` does.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::crypto::CryptoProvider;
use serde::{Deserialize, Serialize};

use ::acme::{Answer, Challenges, OrderRecord};

use crate::tls::keys;
use crate::tls::store::CertIndex;

/// The most certificates one catch-up answer carries (a page; the peer asks
/// for the next one after the last it got).
pub const PAGE: usize = 100;

/// A name that is safe as a file name and as an ACME identifier.
pub fn valid_alias(a: &str) -> bool {
    !a.is_empty()
        && a.len() <= 253
        && !a.starts_with('.')
        && a.contains('.')
        && a.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

/// The most answers served at once: four orders of this router and the
/// peer's, with room for answers an orderer that died left behind.
pub const MAX_ANSWERS: usize = 1024;

/// An issued certificate as saved (and as put on the peer).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IssuedCert {
    pub chain_pem: String,
    pub key_pem: String,
    /// When it was issued (seconds since the epoch): renewal is due at two
    /// thirds of its lifetime from here, and of two copies the later wins.
    pub issued_at: i64,
    pub order_url: String,
}

/// One entry of a catch-up page: the alias and its certificate.
#[derive(Debug, Serialize, Deserialize)]
pub struct Entry {
    pub alias: String,
    #[serde(flatten)]
    pub saved: IssuedCert,
}

/// Why a certificate from the peer was not kept.
#[derive(Debug, thiserror::Error)]
pub enum PeerCertRefused {
    #[error("{0}: not an alias name")]
    Name(String),
    #[error("{alias}: {reason}")]
    Certificate { alias: String, reason: String },
    #[error("{alias}: not saved: {source}")]
    Io {
        alias: String,
        source: std::io::Error,
    },
}

/// What became of an account the peer put here.
#[derive(Debug, PartialEq, Eq)]
pub enum AccountTaken {
    /// This router had none: it has the peer's now.
    Saved,
    /// This router has the same one.
    Same,
}

/// Why an account the peer put here was not kept.
#[derive(Debug, thiserror::Error)]
pub enum AccountRefused {
    #[error("not an ACME account")]
    NotAnAccount,
    #[error(
        "this router has another ACME account (delete one router's state_dir/acme/account.json to share one)"
    )]
    Another,
    #[error("not saved: {0}")]
    Io(std::io::Error),
}

/// The state shared by the issuer and the admin API (see the module doc).
pub struct Shared {
    /// `state_dir/acme`.
    dir: PathBuf,
    challenges: Arc<Challenges>,
    certs: Arc<Mutex<CertIndex>>,
    provider: Arc<CryptoProvider>,
    /// Saved certificates by (issue time, alias): what a catch-up page lists.
    index: Mutex<BTreeSet<(i64, String)>>,
    /// Orders the peer has in flight, by alias, and when each was last
    /// recorded: taken over if it goes away.
    orders: Mutex<HashMap<String, (OrderRecord, std::time::Instant)>>,
    /// This router's own orders, by alias, as far as each got: an order that
    /// failed (the CA unreachable, a refused nonce too often, a deadline) is
    /// resumed by its next try, not placed again. Dropped when its alias is
    /// issued or leaves; at most one an alias the table wants.
    own: Mutex<HashMap<String, OrderRecord>>,
    /// Aliases whose certificate the peer put here since the issuer last looked.
    arrived: Mutex<Vec<String>>,
    /// Wakes the issuer when something arrived.
    pub wake: tokio::sync::Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// The ACME account (`account.json`) as saved, if there is one yet.
    pub fn account(&self) -> Option<Vec<u8>> {
        std::fs::read(self.dir().join(::acme::ACCOUNT_FILE)).ok()
    }

    /// The peer's account, kept if this router has none; the same one is
    /// fine; another one is refused (two accounts would order twice).
    pub fn take_account(&self, body: &[u8]) -> Result<AccountTaken, AccountRefused> {
        if !::acme::is_account(body) {
            return Err(AccountRefused::NotAnAccount);
        }
        let path = self.dir().join(::acme::ACCOUNT_FILE);
        match std::fs::read(&path) {
            Ok(ours) if ours == body => Ok(AccountTaken::Same),
            Ok(_) => Err(AccountRefused::Another),
            Err(_) => {
                std::fs::create_dir_all(self.dir())
                    .and_then(|()| durable_file::write(&path, body))
                    .map_err(AccountRefused::Io)?;
                tracing::info!("ACME account put here by the peer");
                Ok(AccountTaken::Saved)
            }
        }
    }

    pub fn new(
        state_dir: &Path,
        challenges: Arc<Challenges>,
        certs: Arc<Mutex<CertIndex>>,
        provider: Arc<CryptoProvider>,
    ) -> Shared {
        Shared {
            dir: state_dir.join("acme"),
            challenges,
            certs,
            provider,
            index: Mutex::default(),
            orders: Mutex::default(),
            own: Mutex::default(),
            arrived: Mutex::default(),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// `state_dir/acme`: the account and `certs/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }

    fn cert_path(&self, alias: &str) -> PathBuf {
        self.dir.join("certs").join(format!("{alias}.json"))
    }

    /// `alias`'s saved certificate, if any (and readable).
    pub fn load(&self, alias: &str) -> Option<IssuedCert> {
        std::fs::read(self.cert_path(alias))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }

    /// Notes `alias`'s saved certificate in the index (at start, for each file).
    pub fn indexed(&self, alias: &str, issued_at: i64) {
        let mut index = lock(&self.index);
        index.retain(|(_, a)| a != alias);
        index.insert((issued_at, alias.to_string()));
    }

    /// Saves `saved` as `alias`'s certificate (0600), unless the one saved is
    /// as recent; whether it was saved.
    pub fn save(&self, alias: &str, saved: &IssuedCert) -> std::io::Result<bool> {
        if self
            .load(alias)
            .is_some_and(|old| old.issued_at > saved.issued_at || old.chain_pem == saved.chain_pem)
        {
            return Ok(false);
        }
        std::fs::create_dir_all(self.dir.join("certs"))?;
        let json = serde_json::to_vec(saved).map_err(std::io::Error::other)?;
        durable_file::write(&self.cert_path(alias), &json)?;
        self.indexed(alias, saved.issued_at);
        Ok(true)
    }

    /// Deletes `alias`'s saved certificate and key.
    pub fn delete(&self, alias: &str) {
        let _ = std::fs::remove_file(self.cert_path(alias));
        lock(&self.index).retain(|(_, a)| a != alias);
    }

    /// A certificate the peer issued for `alias`: checked (it loads, its key
    /// is its own), saved if newer than ours, and handed to the issuer to serve.
    pub fn accept(&self, alias: &str, saved: &IssuedCert) -> Result<bool, PeerCertRefused> {
        if !valid_alias(alias) {
            return Err(PeerCertRefused::Name(alias.to_string()));
        }
        let loaded =
            keys::load(&saved.chain_pem, &saved.key_pem, None, &self.provider).map_err(|e| {
                PeerCertRefused::Certificate {
                    alias: alias.to_string(),
                    reason: e.to_string(),
                }
            })?;
        let saved_now = self
            .save(alias, saved)
            .map_err(|source| PeerCertRefused::Io {
                alias: alias.to_string(),
                source,
            })?;
        // The peer's order for it, if one is recorded, has ended.
        lock(&self.orders).remove(alias);
        if saved_now {
            // Served at once (the issuer may be busy with an order of its own);
            // the issuer checks at its next look that the alias still wants it.
            self.install(alias, Some(loaded));
            lock(&self.arrived).push(alias.to_string());
            self.wake.notify_one();
        }
        Ok(saved_now)
    }

    /// The aliases whose certificates arrived since the last call.
    pub fn take_arrived(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.arrived))
    }

    /// Up to [`PAGE`] saved certificates issued after `after` (`(issued_at,
    /// alias)`, exclusive), oldest first: the peer's catch-up.
    pub fn page(&self, after: &(i64, String)) -> Vec<Entry> {
        let keys: Vec<(i64, String)> = lock(&self.index)
            .range((
                std::ops::Bound::Excluded(after.clone()),
                std::ops::Bound::Unbounded,
            ))
            .take(PAGE)
            .cloned()
            .collect();
        keys.into_iter()
            .filter_map(|(_, alias)| {
                let saved = self.load(&alias)?;
                Some(Entry { alias, saved })
            })
            .collect()
    }

    /// Whether [`MAX_ANSWERS`] are served already (a peer's answer is then
    /// refused).
    pub fn answers_full(&self) -> bool {
        self.challenges.len() >= MAX_ANSWERS
    }

    /// Serves `answer` to the CA from this router.
    pub fn publish(&self, answer: &Answer) {
        self.challenges.insert(answer);
        if let Answer::TlsAlpn01 { name, cert } = answer {
            let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_der.clone().into());
            match self.provider.key_provider.load_private_key(key) {
                Ok(signing) => {
                    let chain = vec![rustls::pki_types::CertificateDer::from(
                        cert.cert_der.clone(),
                    )];
                    let key = Arc::new(rustls::sign::CertifiedKey::new(chain, signing));
                    lock(&self.certs).set_alpn_challenge(name, Some(key));
                }
                Err(e) => {
                    tracing::warn!(name = %name, error = %e, "TLS-ALPN-01 key does not load")
                }
            }
        }
    }

    /// Stops serving `answer`.
    pub fn withdraw(&self, answer: &Answer) {
        self.challenges.remove(answer);
        if let Answer::TlsAlpn01 { name, .. } = answer {
            lock(&self.certs).set_alpn_challenge(name, None);
        }
    }

    /// Serves `loaded` as `alias`'s ACME certificate (`None`: no longer).
    pub fn install(&self, alias: &str, loaded: Option<keys::Loaded>) {
        lock(&self.certs).set_acme(alias, loaded);
    }

    /// The live certificates.
    pub fn live(&self) -> Arc<arc_swap::ArcSwap<crate::tls::store::Certs>> {
        lock(&self.certs).live()
    }

    /// The peer's order for `alias` got as far as `record` (`None`: it
    /// ended); false if [`MAX_ANSWERS`] orders are recorded already.
    pub fn peer_order(&self, alias: &str, record: Option<OrderRecord>) -> bool {
        let mut orders = lock(&self.orders);
        match record {
            Some(_) if orders.len() >= MAX_ANSWERS && !orders.contains_key(alias) => false,
            Some(r) => {
                orders.insert(alias.to_string(), (r, std::time::Instant::now()));
                true
            }
            None => {
                orders.remove(alias);
                true
            }
        }
    }

    /// The peer's order for `alias`, to take over (it is gone), unless it was
    /// recorded more than `max_age` ago (past the orderer's own deadline: a
    /// record left behind, whose order ended one way or another).
    pub fn take_peer_order(
        &self,
        alias: &str,
        max_age: std::time::Duration,
    ) -> Option<OrderRecord> {
        lock(&self.orders)
            .remove(alias)
            .filter(|(_, at)| at.elapsed() < max_age)
            .map(|(r, _)| r)
    }

    /// This router's order for `alias` got as far as `record`.
    pub fn own_order(&self, alias: &str, record: &OrderRecord) {
        lock(&self.own).insert(alias.to_string(), record.clone());
    }

    /// This router's last order for `alias`, to resume (the CA says whether
    /// it still can lead to a certificate).
    pub fn resume_own_order(&self, alias: &str) -> Option<OrderRecord> {
        lock(&self.own).get(alias).cloned()
    }

    /// `alias`'s order ended for good (issued, or the alias is gone).
    pub fn end_own_order(&self, alias: &str) {
        lock(&self.own).remove(alias);
    }

    /// The peer's orders in flight: alias and URL (not their keys).
    pub fn peer_orders(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = lock(&self.orders)
            .iter()
            .map(|(a, (r, _))| (a.clone(), r.url.clone()))
            .collect();
        out.sort();
        out
    }
}
