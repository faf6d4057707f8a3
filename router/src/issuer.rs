//! Certificates from an ACME CA for aliases that have none of their own.
//!
//! An alias gets one when its app asks (`acme: true` in its settings or in
//! `app_defaults`), it is in the route table, and no certificate was uploaded
//! for it (`add_ssl` always wins). Nothing a client sends starts an order: the
//! names ordered are the table's aliases only, never an SNI or a Host.
//!
//! [`Manager`] looks the table over every `acme.check_interval` and orders, one
//! alias at a time, through the `acme` crate: the account in
//! `state_dir/acme/account.json`, HTTP-01 answered by the HTTP listener from
//! `acme::Challenges` before routing. An issued certificate is saved in
//! `state_dir/acme/certs/ALIAS.json` (0600) before it is served, and loaded from
//! there at start. It is ordered again at two thirds of its lifetime; a failed
//! order is tried again after `acme.retry_after`, doubling with each failure up
//! to a day, while the certificate in service (if any) stays. An alias that
//! leaves the table or whose app turns ACME off stops being served its ACME
//! certificate at once; its saved key is deleted [`KEEP_GONE`] later (a remove
//! and add of the alias in between keeps it).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use serde::{Deserialize, Serialize};

use acme::Challenges;

use crate::config::{AcmeChallenge, AcmeConfig};
use crate::metrics::TlsMetrics;
use crate::table::RouteTable;
use crate::tls::keys;
use crate::tls::store::CertIndex;

/// How long the saved key of an alias that left stays on disk.
pub const KEEP_GONE: Duration = Duration::from_secs(3600);
/// The longest wait before an alias whose orders fail is tried again.
const MAX_RETRY: Duration = Duration::from_secs(24 * 3600);

/// An issued certificate as saved.
#[derive(Serialize, Deserialize)]
struct Saved {
    chain_pem: String,
    key_pem: String,
    /// When it was issued (seconds since the epoch): renewal is due at two thirds
    /// of its lifetime from here.
    issued_at: i64,
    order_url: String,
}

/// What the manager knows of one alias.
struct Held {
    not_after: i64,
    issued_at: i64,
}

/// Orders, renews and serves ACME certificates (see the module doc).
pub struct Manager {
    config: AcmeConfig,
    dir: PathBuf,
    table: Arc<ArcSwap<RouteTable>>,
    certs: Arc<Mutex<CertIndex>>,
    challenges: Arc<Challenges>,
    provider: Arc<CryptoProvider>,
    metrics: TlsMetrics,
    held: HashMap<String, Held>,
    /// Failed aliases: failures in a row, and not before when to try again.
    failed: HashMap<String, (u32, Instant)>,
    /// Aliases that left, and since when.
    gone: HashMap<String, Instant>,
}

impl Manager {
    pub fn new(
        config: AcmeConfig,
        state_dir: &Path,
        table: Arc<ArcSwap<RouteTable>>,
        certs: Arc<Mutex<CertIndex>>,
        (challenges, provider, metrics): (Arc<Challenges>, Arc<CryptoProvider>, TlsMetrics),
    ) -> Manager {
        Manager {
            config,
            dir: state_dir.join("acme"),
            table,
            certs,
            challenges,
            provider,
            metrics,
            held: HashMap::new(),
            failed: HashMap::new(),
            gone: HashMap::new(),
        }
    }

    fn index(&self) -> std::sync::MutexGuard<'_, CertIndex> {
        self.certs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves the certificates saved by earlier runs.
    pub fn restore(&mut self) {
        let Ok(dir) = std::fs::read_dir(self.dir.join("certs")) else {
            return;
        };
        for entry in dir.flatten() {
            let path = entry.path();
            let Some(alias) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
                .filter(|a| valid_alias(a))
                .map(str::to_string)
            else {
                continue;
            };
            self.reload_saved(&alias);
        }
    }

    /// Loads and serves a certificate (a key that does not load: logged, counted).
    fn serve(&mut self, alias: &str, saved: &Saved) {
        match keys::load(&saved.chain_pem, &saved.key_pem, None, &self.provider) {
            Ok(loaded) => {
                self.held.insert(
                    alias.to_string(),
                    Held {
                        not_after: loaded.not_after,
                        issued_at: saved.issued_at,
                    },
                );
                self.index().set_acme(alias, Some(loaded));
                self.metrics.acme_certificates.set(self.held.len() as i64);
            }
            Err(e) => {
                self.metrics.certificate_error(e.reason());
                tracing::warn!(alias = %alias, error = %e, "ACME certificate does not load; not served");
            }
        }
    }

    /// Looks the table over every `check_interval` until the task is dropped.
    pub async fn run(mut self) {
        let settings = acme::Settings {
            contact: self.config.contact.clone(),
            ca_file: self.config.ca_file.clone(),
            request_timeout: self.config.request_timeout,
            order_timeout: self.config.order_timeout,
            challenge: match self.config.challenge {
                AcmeChallenge::Http01 => acme::Challenge::Http01,
                AcmeChallenge::TlsAlpn01 => acme::Challenge::TlsAlpn01,
            },
            ..acme::Settings::new(self.config.directory.clone().unwrap_or_default())
        };
        let mut client: Option<acme::Client> = None;
        loop {
            tokio::time::sleep(self.config.check_interval).await;
            let wanted = self.wanted();
            self.forget_gone(&wanted);
            for alias in &wanted {
                if !self.held.contains_key(alias) {
                    self.reload_saved(alias);
                }
            }
            let due: Vec<String> = wanted.into_iter().filter(|a| self.due(a)).collect();
            for alias in due {
                if client.is_none() {
                    match acme::Client::open(&settings, &self.dir).await {
                        Ok(c) => client = Some(c),
                        Err(e) => {
                            self.failed_order(&alias, &e);
                            continue;
                        }
                    }
                }
                if let Some(c) = client.as_ref() {
                    self.order(c, &alias).await;
                }
            }
        }
    }

    /// Serves `alias`'s saved certificate, if it has one (it came back).
    fn reload_saved(&mut self, alias: &str) {
        let path = self.dir.join("certs").join(format!("{alias}.json"));
        if let Some(saved) = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Saved>(&b).ok())
        {
            self.serve(alias, &saved);
        }
    }

    /// The aliases that should have an ACME certificate now.
    fn wanted(&self) -> HashSet<String> {
        let table = self.table.load();
        let certs = self.index().live().load_full();
        let mut out = HashSet::new();
        for route in table.routes() {
            let on = table
                .policy_for(&route.app)
                .is_some_and(|p| p.effective.acme == Some(true));
            if !on {
                continue;
            }
            out.extend(
                route
                    .aliases
                    .iter()
                    .map(|a| a.to_ascii_lowercase())
                    .filter(|a| valid_alias(a) && !certs.has_upload(a)),
            );
        }
        out
    }

    /// Whether `alias` needs an order now: none held, or two thirds of its
    /// lifetime gone, and no failure waiting out its back-off.
    fn due(&self, alias: &str) -> bool {
        if self
            .failed
            .get(alias)
            .is_some_and(|(_, after)| Instant::now() < *after)
        {
            return false;
        }
        match self.held.get(alias) {
            None => true,
            Some(h) => {
                let renew_at = h.issued_at + (h.not_after - h.issued_at) * 2 / 3;
                unix_now() >= renew_at
            }
        }
    }

    async fn order(&mut self, client: &acme::Client, alias: &str) {
        tracing::info!(alias = %alias, "ACME order");
        let answers = Answering {
            http: &self.challenges,
            certs: &self.certs,
            provider: &self.provider,
        };
        match client.issue(alias, &answers).await {
            Ok(issued) => {
                let saved = Saved {
                    chain_pem: issued.chain_pem,
                    key_pem: issued.key_pem,
                    issued_at: unix_now(),
                    order_url: issued.order_url,
                };
                if let Err(e) = self.save(alias, &saved) {
                    tracing::warn!(alias = %alias, error = %e, "ACME certificate not saved; served until restart");
                }
                self.serve(alias, &saved);
                self.failed.remove(alias);
                self.metrics.acme_failures(alias, 0);
                self.metrics.acme_order(true);
                tracing::info!(alias = %alias, "ACME certificate issued and served");
            }
            Err(e) => self.failed_order(alias, &e),
        }
    }

    /// An order for `alias` failed (or no account to order with): counted, and
    /// tried again after a back-off that doubles with each failure in a row.
    fn failed_order(&mut self, alias: &str, e: &acme::AcmeError) {
        self.metrics.acme_order(false);
        let n = self.failed.get(alias).map_or(0, |(n, _)| *n) + 1;
        let wait = (self.config.retry_after * 2u32.saturating_pow(n - 1)).min(MAX_RETRY);
        self.failed
            .insert(alias.to_string(), (n, Instant::now() + wait));
        self.metrics.acme_failures(alias, n);
        tracing::warn!(
            alias = %alias, error = %e, failures = n, retry_in = ?wait,
            "ACME order failed; the certificate in service (if any) stays"
        );
    }

    fn save(&self, alias: &str, saved: &Saved) -> std::io::Result<()> {
        let dir = self.dir.join("certs");
        std::fs::create_dir_all(&dir)?;
        let json = serde_json::to_vec(saved).map_err(std::io::Error::other)?;
        durable_file::write(&dir.join(format!("{alias}.json")), &json)
    }

    /// Stops serving aliases no longer wanted; deletes their saved keys
    /// [`KEEP_GONE`] after they left.
    fn forget_gone(&mut self, wanted: &HashSet<String>) {
        let now = Instant::now();
        for alias in unwanted(&self.held, wanted) {
            self.held.remove(&alias);
            self.index().set_acme(&alias, None);
            self.gone.entry(alias).or_insert(now);
        }
        for alias in unwanted(&self.failed, wanted) {
            self.failed.remove(&alias);
            self.metrics.acme_failures(&alias, 0);
        }
        self.gone.retain(|alias, since| {
            if wanted.contains(alias) {
                return false;
            }
            if now.duration_since(*since) < KEEP_GONE {
                return true;
            }
            let _ = std::fs::remove_file(self.dir.join("certs").join(format!("{alias}.json")));
            false
        });
        self.metrics.acme_certificates.set(self.held.len() as i64);
    }
}

/// Where an order's answers go: HTTP-01's to the HTTP listener's
/// [`Challenges`], TLS-ALPN-01's certificates to the live certificates (served
/// only to `acme-tls/1` handshakes).
struct Answering<'a> {
    http: &'a Challenges,
    certs: &'a Mutex<CertIndex>,
    provider: &'a Arc<CryptoProvider>,
}

impl Answering<'_> {
    fn index(&self) -> std::sync::MutexGuard<'_, CertIndex> {
        self.certs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl acme::Answers for Answering<'_> {
    fn publish(&self, token: &str, key_authorization: &str) {
        self.http.publish(token, key_authorization);
    }

    fn withdraw(&self, token: &str) {
        self.http.withdraw(token);
    }

    fn publish_alpn(&self, name: &str, cert: &acme::AlpnCertificate) {
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_der.clone().into());
        match self.provider.key_provider.load_private_key(key) {
            Ok(signing) => {
                let chain = vec![rustls::pki_types::CertificateDer::from(
                    cert.cert_der.clone(),
                )];
                let key = Arc::new(rustls::sign::CertifiedKey::new(chain, signing));
                self.index().set_alpn_challenge(name, Some(key));
            }
            Err(e) => tracing::warn!(name = %name, error = %e, "TLS-ALPN-01 key does not load"),
        }
    }

    fn withdraw_alpn(&self, name: &str) {
        self.index().set_alpn_challenge(name, None);
    }
}

/// The aliases `map` holds that are not `wanted` any more.
fn unwanted<V>(map: &HashMap<String, V>, wanted: &HashSet<String>) -> Vec<String> {
    map.keys()
        .filter(|a| !wanted.contains(*a))
        .cloned()
        .collect()
}

/// A name that is safe as a file name and as an ACME identifier.
fn valid_alias(a: &str) -> bool {
    !a.is_empty()
        && a.len() <= 253
        && !a.starts_with('.')
        && a.contains('.')
        && a.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(dir: &Path) -> (Manager, Arc<Mutex<CertIndex>>) {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let certs = Arc::new(Mutex::new(CertIndex::new(
            None,
            provider.clone(),
            TlsMetrics::detached(),
            Duration::from_secs(10),
        )));
        let manager = Manager::new(
            AcmeConfig::default(),
            dir,
            Arc::new(ArcSwap::from_pointee(RouteTable::default())),
            certs.clone(),
            (Arc::default(), provider, TlsMetrics::detached()),
        );
        (manager, certs)
    }

    fn saved(dir: &Path, alias: &str, chain_pem: &str, key_pem: &str) {
        let saved = Saved {
            chain_pem: chain_pem.into(),
            key_pem: key_pem.into(),
            issued_at: unix_now(),
            order_url: "https://ca.example/order/1".into(),
        };
        std::fs::create_dir_all(dir.join("acme/certs")).expect("dir");
        std::fs::write(
            dir.join(format!("acme/certs/{alias}.json")),
            serde_json::to_vec(&saved).expect("json"),
        )
        .expect("write");
    }

    #[test]
    fn a_saved_certificate_is_served_at_start_unless_its_key_is_not_its_own() {
        let dir = std::env::temp_dir().join(format!("issuer-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let leaf = |name: &str| {
            let key = rcgen::KeyPair::generate().expect("key");
            let cert = rcgen::CertificateParams::new(vec![name.to_string()])
                .expect("params")
                .self_signed(&key)
                .expect("cert");
            (cert.pem(), key.serialize_pem())
        };
        let (good_cert, good_key) = leaf("good.example.com");
        let (bad_cert, _) = leaf("bad.example.com");
        let (_, other_key) = leaf("other.example.com");
        saved(&dir, "good.example.com", &good_cert, &good_key);
        // A chain whose key is another's (a broken CA, or a file tampered with).
        saved(&dir, "bad.example.com", &bad_cert, &other_key);
        // Garbage, and a name that is no alias: ignored.
        std::fs::write(dir.join("acme/certs/junk.example.com.json"), b"{not json").expect("w");
        std::fs::write(dir.join("acme/certs/..json"), b"{}").expect("w");
        let (mut m, certs) = manager(&dir);
        m.restore();
        let live = certs.lock().expect("lock").live().load_full();
        assert_eq!(live.source("good.example.com"), "acme");
        assert!(live.for_name(Some("good.example.com")).is_some());
        assert_eq!(
            live.source("bad.example.com"),
            "default",
            "a key not its own is never served"
        );
        assert_eq!(live.source("junk.example.com"), "default");
        assert_eq!(m.held.len(), 1);
        // Due: not yet (issued now, lifetime ahead), unless it was never held.
        assert!(!m.due("good.example.com"));
        assert!(m.due("bad.example.com"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_plain_dns_names_are_ordered_or_become_file_names() {
        assert!(valid_alias("shop.example.com"));
        assert!(valid_alias("a-b.c1.example"));
        for bad in [
            "",
            "localhost",
            ".example.com",
            "../etc.passwd",
            "Shop.example.com",
            "a/b.c",
            "*.example.com",
        ] {
            assert!(!valid_alias(bad), "{bad:?}");
        }
    }
}
