//! The live certificates: SNI name → certified key, swapped whole with `ArcSwap` like
//! the route table, so a handshake reads them with one atomic load and no lock.
//!
//! [`CertIndex`] is the writer. It follows the routing state: when an app changes,
//! its aliases' certificates are loaded (only the ones whose PEM changed) and the
//! next [`Certs`] is published. Two rules protect clients:
//!
//! - **A bad certificate never replaces a good one.** A key that does not load (DSA,
//!   wrong pass phrase, not matching its certificate...) is logged with its reason and
//!   counted; the alias keeps the certificate it had, if any.
//! - **No window without a certificate during a replacement.** The broker replaces a
//!   certificate with `remove_ssl` then `add_ssl`. A certificate removed while its
//!   alias stays is kept for `tls.replace_grace` (default 10 s): if the new one
//!   arrives in time, handshakes go from the old certificate straight to the new
//!   one. Removing the alias (or the app) removes its certificate at once.
//!
//! The maps are persistent (`imbl`), so publishing after one change costs O(log n)
//! whatever the number of certificates.
//!
//! **Restored certificates load on their first handshake.** At start the saved state
//! may hold 100 000 alias certificates; parsing every key before serving took 6.5 s
//! and 10 KiB per alias. Those certificates were checked when they arrived, so the
//! first update after start ([`CertIndex::restoring`]) keeps each as its PEM in a
//! [`CertSlot`] and loads it when a client first asks for it by SNI (a few hundred
//! µs, once); a key that fails then is logged and counted, and that alias gets the
//! default certificate, as if it had been refused on arrival. Their expiry gauges
//! are filled by a background thread that reads only each leaf's notAfter.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use spi_consumer::decode::CertBundle;
use spi_consumer::{AppKey, RoutingState};

use crate::metrics::TlsMetrics;
use crate::tls::keys;

/// The wildcard name one label up from `host` (`a.b.c` → `*.b.c`), if it has
/// a label to take off and two left: the alias whose certificate (and, in
/// the route table, whose route) a name under a wildcard gets.
pub fn wildcard_of(host: &str) -> Option<String> {
    let (first, rest) = host.split_once('.')?;
    (!first.is_empty() && first != "*" && rest.contains('.')).then(|| format!("*.{rest}"))
}

/// What handshakes see.
#[derive(Clone, Debug, Default)]
pub struct Certs {
    by_name: imbl::HashMap<Arc<str>, Arc<CertSlot>>,
    /// Certificates from the ACME CA (`crate::issuer`), for aliases with none of
    /// their own: an uploaded one (`add_ssl`) always wins.
    acme: imbl::HashMap<Arc<str>, Arc<CertifiedKey>>,
    /// TLS-ALPN-01 validation certificates of ACME orders in flight, served only
    /// to handshakes asking for ALPN `acme-tls/1`.
    alpn_challenges: imbl::HashMap<Arc<str>, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
    /// How many of `by_name` and `acme` are wildcard aliases (`*.domain`): with
    /// none, a name without a certificate costs no second lookup.
    wildcards: usize,
    /// Loads restored certificates on their first handshake.
    loader: Option<Arc<Loader>>,
}

impl Certs {
    /// The certificate for an SNI name (lower-case): the alias's own, else the
    /// wildcard alias's one label up, else the default.
    pub fn for_name(&self, name: Option<&str>) -> Option<Arc<CertifiedKey>> {
        name.and_then(|n| self.own_key(n).or_else(|| self.own_key(&self.wildcard(n)?)))
            .or_else(|| self.default.clone())
    }

    /// Counts a wildcard alias in or out (`changed`: an entry was added or
    /// removed for `alias`).
    fn counted(&mut self, alias: &str, changed: bool, by: isize) {
        if changed && alias.starts_with("*.") {
            self.wildcards = self.wildcards.saturating_add_signed(by);
        }
    }

    /// The certificate of exactly `name`, if it has one.
    fn own_key(&self, n: &str) -> Option<Arc<CertifiedKey>> {
        self.by_name
            .get(n)
            .and_then(|slot| slot.key(n, self.loader.as_deref()))
            .or_else(|| self.acme.get(n).cloned())
    }

    /// The wildcard alias one label up from `name`, when there are wildcard
    /// certificates at all and `name` has none of its own.
    fn wildcard(&self, name: &str) -> Option<String> {
        if self.wildcards == 0 || self.has_exactly(name) {
            return None;
        }
        wildcard_of(name)
    }

    /// Whether `name` has a certificate of its own (its own or its wildcard
    /// alias's; not the default; a restored one whose key failed to load
    /// counts as none).
    pub fn has_own(&self, name: &str) -> bool {
        self.has_exactly(name) || self.wildcard(name).is_some_and(|w| self.has_exactly(&w))
    }

    fn has_exactly(&self, name: &str) -> bool {
        self.by_name.get(name).is_some_and(|slot| !slot.failed()) || self.acme.contains_key(name)
    }

    /// The alias whose certificate `name` gets: its own, or its wildcard's.
    fn owner(&self, name: &str) -> Option<String> {
        if self.has_exactly(name) {
            return Some(name.to_string());
        }
        self.wildcard(name).filter(|w| self.has_exactly(w))
    }

    /// The TLS-ALPN-01 certificate for `name`, while an ACME order waits on it.
    pub fn alpn_challenge(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.alpn_challenges.get(name).cloned()
    }

    /// Whether `name` is served a certificate from the ACME CA (none uploaded).
    pub fn has_acme(&self, name: &str) -> bool {
        !self.by_name.contains_key(name) && self.acme.contains_key(name)
    }

    /// Where `name`'s certificate comes from: `upload`, `acme` or `default`.
    pub fn source(&self, name: &str) -> &'static str {
        if self.by_name.contains_key(name) {
            "upload"
        } else if self.acme.contains_key(name) {
            "acme"
        } else {
            "default"
        }
    }

    /// Whether `name` has a certificate uploaded for it (`add_ssl`), which an
    /// ACME one never replaces.
    pub fn has_upload(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn has_default(&self) -> bool {
        self.default.is_some()
    }

    /// What a connection made with this SNI name presented.
    pub fn served_for(&self, sni: &str) -> Served {
        let sni = sni.to_ascii_lowercase();
        match self.owner(&sni) {
            Some(alias) => Served::Own(Arc::from(alias)),
            None => Served::Default,
        }
    }

    /// Whether a connection that presented `served` may carry a request for `name`
    /// (lower-case): only if `name` would get the same certificate.
    pub fn serves(&self, served: &Served, name: &str) -> bool {
        match served {
            Served::Own(alias) if **alias == *name => true,
            Served::Own(alias) => {
                alias.starts_with("*.") && self.owner(name).as_deref() == Some(&**alias)
            }
            Served::Default => !self.has_own(name),
        }
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Every certificate loaded now, with the alias it is served for
    /// (`default` for the default): uploaded ones (a restored one once its
    /// first handshake loaded it), ACME ones where none is uploaded, the
    /// default. What the OCSP stapler keeps answers for.
    pub fn loaded(&self) -> impl Iterator<Item = (Arc<str>, Arc<CertifiedKey>)> + '_ {
        let uploaded = self
            .by_name
            .iter()
            .filter_map(|(a, slot)| Some((a.clone(), slot.key.get()?.clone()?)));
        let acme = self
            .acme
            .iter()
            .filter(|(a, _)| !self.by_name.contains_key(*a))
            .map(|(a, k)| (a.clone(), k.clone()));
        let default = self
            .default
            .iter()
            .map(|k| (Arc::from("default"), k.clone()));
        uploaded.chain(acme).chain(default)
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// The certificate a TLS connection presented, by where it came from (not by the
/// key itself, so that a certificate replaced while the connection lives does not
/// make its own alias misdirected).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// The alias's own certificate.
    Own(Arc<str>),
    /// The default (normally the `*.<cloud_domain>` wildcard).
    Default,
}

/// The rustls side: picks the certificate for each handshake, with its OCSP
/// staple when it has one (see [`crate::tls::ocsp`]).
#[derive(Debug)]
pub struct SniResolver {
    pub live: Arc<ArcSwap<Certs>>,
    pub staples: Arc<crate::tls::ocsp::Staples>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let certs = self.live.load();
        let key = match hello.server_name() {
            Some(name) if name.bytes().any(|b| b.is_ascii_uppercase()) => {
                certs.for_name(Some(&name.to_ascii_lowercase()))
            }
            name => certs.for_name(name),
        }?;
        Some(self.staples.staple(key))
    }
}

/// One alias's certificate: loaded, or (restored at start) its PEM until the first
/// handshake that asks for it.
pub struct CertSlot {
    key: OnceLock<Option<Arc<CertifiedKey>>>,
    /// The PEM of a restored certificate until it is loaded (shared with the
    /// routing state, not copied).
    pem: Mutex<Option<Arc<CertBundle>>>,
}

impl std::fmt::Debug for CertSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertSlot")
            .field("loaded", &self.key.get().is_some())
            .finish()
    }
}

impl CertSlot {
    fn loaded(key: Arc<CertifiedKey>) -> CertSlot {
        CertSlot {
            key: OnceLock::from(Some(key)),
            pem: Mutex::new(None),
        }
    }

    fn deferred(bundle: Arc<CertBundle>) -> CertSlot {
        CertSlot {
            key: OnceLock::new(),
            pem: Mutex::new(Some(bundle)),
        }
    }

    fn pem(&self) -> std::sync::MutexGuard<'_, Option<Arc<CertBundle>>> {
        self.pem.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key, loading a restored one now (once; concurrent handshakes wait).
    fn key(&self, alias: &str, loader: Option<&Loader>) -> Option<Arc<CertifiedKey>> {
        self.key
            .get_or_init(|| {
                let bundle = self.pem().take()?;
                loader?.load(alias, &bundle)
            })
            .clone()
    }

    /// A restored key that was tried and did not load.
    fn failed(&self) -> bool {
        matches!(self.key.get(), Some(None))
    }

    /// The leaf's notAfter of a certificate not loaded yet.
    fn pending_expiry(&self) -> Option<i64> {
        if self.key.get().is_some() {
            return None;
        }
        keys::not_after(&self.pem().as_ref()?.certificate_pem).ok()
    }
}

/// What loading a restored certificate needs.
pub struct Loader {
    provider: Arc<CryptoProvider>,
    metrics: TlsMetrics,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Loader")
    }
}

impl Loader {
    fn load(&self, alias: &str, b: &CertBundle) -> Option<Arc<CertifiedKey>> {
        let loaded = keys::load(
            &b.certificate_pem,
            &b.private_key_pem,
            b.pass_phrase.as_deref(),
            &self.provider,
        );
        match loaded {
            Ok(l) => {
                self.metrics.set_expiry(alias, l.not_after);
                tracing::debug!(alias = %alias, "restored certificate loaded on its first handshake");
                Some(l.key)
            }
            Err(e) => {
                self.metrics.certificate_error(e.reason());
                tracing::warn!(
                    alias = %alias, reason = e.reason(), error = %e,
                    "restored certificate rejected on its first handshake; serving the default"
                );
                None
            }
        }
    }
}

struct AliasCert {
    /// The app that owns the alias.
    app: AppKey,
    fingerprint: u64,
}

/// The writer of [`Certs`].
pub struct CertIndex {
    live: Arc<ArcSwap<Certs>>,
    current: Certs,
    entries: HashMap<String, AliasCert>,
    /// The aliases with a certificate, per app: an app's change costs its own
    /// aliases, never a scan of every certificate.
    by_app: HashMap<AppKey, BTreeSet<String>>,
    /// Certificates removed while their alias stays, and when they go.
    pending: HashMap<String, Instant>,
    provider: Arc<CryptoProvider>,
    metrics: TlsMetrics,
    replace_grace: Duration,
    /// The next update restores the saved state: its certificates load lazily.
    restoring: bool,
    /// Restored certificates whose expiry gauges are still to be read (see
    /// [`read_restored_expiry`](Self::read_restored_expiry)).
    expiry_unread: bool,
    /// The notAfter of each ACME certificate (its expiry gauge when no uploaded
    /// certificate shows instead).
    acme_expiry: HashMap<String, i64>,
    /// The OCSP staples served with these certificates (written by the
    /// stapler, `crate::tls::ocsp::stapler`).
    staples: Arc<crate::tls::ocsp::Staples>,
}

impl CertIndex {
    pub fn new(
        default: Option<Arc<CertifiedKey>>,
        provider: Arc<CryptoProvider>,
        metrics: TlsMetrics,
        replace_grace: Duration,
    ) -> CertIndex {
        let current = Certs {
            wildcards: 0,
            by_name: imbl::HashMap::new(),
            acme: imbl::HashMap::new(),
            alpn_challenges: imbl::HashMap::new(),
            default,
            loader: Some(Arc::new(Loader {
                provider: provider.clone(),
                metrics: metrics.clone(),
            })),
        };
        CertIndex {
            live: Arc::new(ArcSwap::from_pointee(current.clone())),
            current,
            entries: HashMap::new(),
            by_app: HashMap::new(),
            pending: HashMap::new(),
            provider,
            metrics,
            replace_grace,
            restoring: false,
            expiry_unread: false,
            acme_expiry: HashMap::new(),
            staples: Arc::default(),
        }
    }

    /// The next update is the saved state at start: its certificates were checked
    /// when they arrived and are loaded on their first handshake (see the module doc).
    pub fn restoring(mut self) -> CertIndex {
        self.restoring = true;
        self
    }

    /// The map handshakes read.
    pub fn live(&self) -> Arc<ArcSwap<Certs>> {
        self.live.clone()
    }

    /// The OCSP staples handshakes serve with these certificates.
    pub fn staples(&self) -> Arc<crate::tls::ocsp::Staples> {
        self.staples.clone()
    }

    /// Follows the state for the apps in `changed`, then publishes.
    pub fn update(&mut self, state: &RoutingState, changed: &BTreeSet<AppKey>, now: Instant) {
        let restoring = std::mem::take(&mut self.restoring);
        for key in changed {
            let app = state.app(key);
            let want: Vec<(&String, &Arc<CertBundle>)> = app
                .map(|a| {
                    a.certificates
                        .iter()
                        .filter(|(alias, _)| a.aliases.contains(*alias))
                        .collect()
                })
                .unwrap_or_default();
            for (alias, bundle) in &want {
                if restoring {
                    self.defer(key, alias, bundle);
                } else {
                    self.put(key, alias, bundle);
                }
            }
            let had: Vec<String> = self
                .by_app
                .get(key)
                .into_iter()
                .flatten()
                .filter(|alias| !want.iter().any(|(a, _)| *a == *alias))
                .cloned()
                .collect();
            for alias in had {
                let alias_stays = app.is_some_and(|a| a.aliases.contains(&alias));
                if alias_stays && !self.replace_grace.is_zero() {
                    self.pending
                        .entry(alias)
                        .or_insert(now + self.replace_grace);
                } else {
                    self.remove(&alias);
                }
            }
        }
        self.purge_before(now);
        self.publish();
        self.expiry_unread |= restoring && !self.current.by_name.is_empty();
    }

    /// Fills the restored certificates' expiry gauges from their leaves alone, on a
    /// thread of its own (the keys stay unparsed until a handshake needs them). The
    /// caller starts it once the route table is published, so that at start it
    /// does not take the core the table is being built on.
    pub fn read_restored_expiry(&mut self) {
        if !std::mem::take(&mut self.expiry_unread) {
            return;
        }
        let slots = self.current.by_name.clone();
        let metrics = self.metrics.clone();
        let spawned = std::thread::Builder::new()
            .name("cert-expiry".into())
            .spawn(move || {
                for (alias, slot) in slots.iter() {
                    if let Some(not_after) = slot.pending_expiry() {
                        metrics.set_expiry(alias, not_after);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the certificate expiry reader");
        }
    }

    /// Registers a restored certificate without loading it.
    fn defer(&mut self, app: &AppKey, alias: &str, bundle: &Arc<CertBundle>) {
        let fingerprint = fingerprint(bundle);
        let slot = Arc::new(CertSlot::deferred(bundle.clone()));
        let new = self
            .current
            .by_name
            .insert(Arc::from(alias), slot)
            .is_none();
        self.current.counted(alias, new, 1);
        self.list(app, alias, fingerprint);
    }

    fn list(&mut self, app: &AppKey, alias: &str, fingerprint: u64) {
        let previous = self.entries.insert(
            alias.to_string(),
            AliasCert {
                app: app.clone(),
                fingerprint,
            },
        );
        // An alias that moved to another app leaves the old app's list.
        if let Some(p) = previous.filter(|p| p.app != *app) {
            self.unlist(&p.app, alias);
        }
        self.by_app
            .entry(app.clone())
            .or_default()
            .insert(alias.to_string());
        self.pending.remove(alias);
    }

    /// Replaces the default certificate (a reload); handshakes from now on get it.
    pub fn set_default(&mut self, default: Option<Arc<CertifiedKey>>) {
        self.current.default = default;
        self.publish();
    }

    /// Drops certificates whose replacement grace has passed; run periodically.
    pub fn purge(&mut self, now: Instant) {
        if self.purge_before(now) {
            self.publish();
        }
    }

    fn purge_before(&mut self, now: Instant) -> bool {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(a, _)| a.clone())
            .collect();
        for alias in &due {
            tracing::info!(alias = %alias, "certificate removed (no replacement arrived)");
            self.remove(alias);
        }
        !due.is_empty()
    }

    fn put(&mut self, app: &AppKey, alias: &str, bundle: &CertBundle) {
        let fingerprint = fingerprint(bundle);
        if self
            .entries
            .get(alias)
            .is_some_and(|e| e.fingerprint == fingerprint)
        {
            self.pending.remove(alias);
            return;
        }
        match keys::load(
            &bundle.certificate_pem,
            &bundle.private_key_pem,
            bundle.pass_phrase.as_deref(),
            &self.provider,
        ) {
            Ok(loaded) => {
                self.metrics.set_expiry(alias, loaded.not_after);
                let slot = Arc::new(CertSlot::loaded(loaded.key));
                let new = self
                    .current
                    .by_name
                    .insert(Arc::from(alias), slot)
                    .is_none();
                self.current.counted(alias, new, 1);
                self.list(app, alias, fingerprint);
                tracing::info!(app = %app, alias = %alias, "certificate loaded");
            }
            Err(e) => {
                self.metrics.certificate_error(e.reason());
                let kept = self.entries.contains_key(alias);
                tracing::warn!(
                    app = %app, alias = %alias, reason = e.reason(), error = %e,
                    previous_kept = kept,
                    "certificate rejected"
                );
            }
        }
    }

    fn remove(&mut self, alias: &str) {
        self.pending.remove(alias);
        if let Some(e) = self.entries.remove(alias) {
            self.unlist(&e.app, alias);
            let gone = self.current.by_name.remove(alias).is_some();
            self.current.counted(alias, gone, -1);
            match self.acme_expiry.get(alias) {
                Some(not_after) => self.metrics.set_expiry(alias, *not_after),
                None => self.metrics.forget_expiry(alias),
            }
        }
    }

    /// Serves `loaded` (an ACME certificate) for `alias` unless it has an uploaded
    /// one; `None`: no ACME certificate for it any more.
    pub fn set_acme(&mut self, alias: &str, loaded: Option<keys::Loaded>) {
        match loaded {
            Some(l) => {
                let new = self.current.acme.insert(Arc::from(alias), l.key).is_none();
                self.current.counted(alias, new, 1);
                self.acme_expiry.insert(alias.to_string(), l.not_after);
                if !self.current.by_name.contains_key(alias) {
                    self.metrics.set_expiry(alias, l.not_after);
                }
            }
            None => {
                let gone = self.current.acme.remove(alias).is_some();
                self.current.counted(alias, gone, -1);
                if self.acme_expiry.remove(alias).is_some()
                    && !self.current.by_name.contains_key(alias)
                {
                    self.metrics.forget_expiry(alias);
                }
            }
        }
        self.publish();
    }

    /// Serves `key` to `acme-tls/1` handshakes for `name` (`None`: no more).
    pub fn set_alpn_challenge(&mut self, name: &str, key: Option<Arc<CertifiedKey>>) {
        match key {
            Some(k) => self.current.alpn_challenges.insert(Arc::from(name), k),
            None => self.current.alpn_challenges.remove(name),
        };
        self.publish();
    }

    /// The aliases with an ACME certificate.
    pub fn acme_aliases(&self) -> impl Iterator<Item = &str> {
        self.acme_expiry.keys().map(String::as_str)
    }

    fn unlist(&mut self, app: &AppKey, alias: &str) {
        if let Some(set) = self.by_app.get_mut(app) {
            set.remove(alias);
            if set.is_empty() {
                self.by_app.remove(app);
            }
        }
    }

    fn publish(&mut self) {
        self.metrics
            .certificates
            .set(self.current.by_name.len() as i64);
        self.live.store(Arc::new(self.current.clone()));
    }
}

fn fingerprint(b: &CertBundle) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    b.certificate_pem.hash(&mut h);
    b.private_key_pem.hash(&mut h);
    b.pass_phrase.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use spi_consumer::decode::{Decoded, decode};

    fn fixture(name: &str) -> String {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/spi-events")
            .join(name);
        std::fs::read_to_string(path).expect("fixture")
    }

    /// Applies one event (YAML text) to the state, then the index follows.
    fn apply_text(state: &mut RoutingState, index: &mut CertIndex, yaml: &str, now: Instant) {
        let Ok(Decoded::Event(e)) = decode(yaml.as_bytes()) else {
            panic!("not an event: {yaml:.60}");
        };
        if let spi_consumer::apply::Applied::Changed(k) = state.apply(&e) {
            index.update(state, &BTreeSet::from([k]), now);
        }
    }

    fn apply(state: &mut RoutingState, index: &mut CertIndex, name: &str, now: Instant) {
        apply_text(state, index, &fixture(name), now);
    }

    /// The certificate handshakes for `name` get now.
    fn served(live: &ArcSwap<Certs>, name: &str) -> Arc<CertifiedKey> {
        live.load().for_name(Some(name)).expect("a certificate")
    }

    fn index() -> CertIndex {
        CertIndex::new(
            None,
            Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
            TlsMetrics::detached(),
            Duration::from_secs(10),
        )
    }

    #[test]
    fn follows_the_fixtures_with_a_grace_on_removal() {
        let mut s = RoutingState::new();
        let mut ix = index();
        let t0 = Instant::now();
        for f in [
            "01-create_application.yaml",
            "07-add_alias.yaml",
            "08-add_ssl.yaml",
            "09-add_alias-secure.yaml",
            "10-add_ssl-pass_phrase.yaml",
        ] {
            apply(&mut s, &mut ix, f, t0);
        }
        let live = ix.live();
        assert!(live.load().has_own("www.example.net"));
        assert!(live.load().has_own("secure.example.net"));
        // remove_ssl: still served during the grace...
        apply(&mut s, &mut ix, "11-remove_ssl.yaml", t0);
        assert!(live.load().has_own("www.example.net"), "kept during grace");
        ix.purge(t0 + Duration::from_secs(11));
        assert!(!live.load().has_own("www.example.net"), "gone after it");
        // delete_application: at once.
        apply(&mut s, &mut ix, "22-delete_application.yaml", t0);
        assert!(live.load().is_empty());
    }

    #[test]
    fn replacement_within_grace_has_no_gap_and_bad_keys_keep_the_old() {
        let mut s = RoutingState::new();
        let mut ix = index();
        let t0 = Instant::now();
        for f in [
            "01-create_application.yaml",
            "07-add_alias.yaml",
            "08-add_ssl.yaml",
        ] {
            apply(&mut s, &mut ix, f, t0);
        }
        let live = ix.live();
        let old = served(&live, "www.example.net");
        apply(&mut s, &mut ix, "11-remove_ssl.yaml", t0);
        // A bad replacement (wrong pass phrase) for the same alias: rejected, old kept.
        let bad = fixture("10-add_ssl-pass_phrase.yaml")
            .replace("secure.example.net", "www.example.net")
            .replace("correct-horse-battery", "wrong-pass");
        apply_text(&mut s, &mut ix, &bad, t0);
        assert!(
            Arc::ptr_eq(&old, &served(&live, "www.example.net")),
            "the old certificate stays in service"
        );
        // The good replacement (fixture 10's pair, under this alias).
        let good = bad.replace("wrong-pass", "correct-horse-battery");
        apply_text(&mut s, &mut ix, &good, t0 + Duration::from_secs(1));
        assert!(
            !Arc::ptr_eq(&old, &served(&live, "www.example.net")),
            "replaced"
        );
        ix.purge(t0 + Duration::from_secs(60));
        assert!(
            live.load().has_own("www.example.net"),
            "the new one is not purged"
        );
    }

    #[test]
    fn restored_certificates_load_on_their_first_handshake() {
        let mut s = RoutingState::new();
        let t0 = Instant::now();
        // The saved state: two aliases with certificates, one of them with the
        // wrong pass phrase (the state keeps what the broker sent).
        let mut scratch = index();
        for f in [
            "01-create_application.yaml",
            "07-add_alias.yaml",
            "08-add_ssl.yaml",
            "09-add_alias-secure.yaml",
        ] {
            apply(&mut s, &mut scratch, f, t0);
        }
        let bad = fixture("10-add_ssl-pass_phrase.yaml").replace("correct-horse-battery", "wrong");
        apply_text(&mut s, &mut scratch, &bad, t0);

        let mut ix = index().restoring();
        let all: BTreeSet<AppKey> = s.apps().map(|(k, _)| k.clone()).collect();
        ix.update(&s, &all, t0);
        let live = ix.live();
        let slot = live
            .load()
            .by_name
            .get("www.example.net")
            .cloned()
            .expect("listed");
        assert!(
            slot.key.get().is_none(),
            "not parsed before a handshake asks"
        );
        assert!(live.load().has_own("www.example.net"));
        let first = served(&live, "www.example.net");
        assert!(
            Arc::ptr_eq(&first, &served(&live, "www.example.net")),
            "loaded once"
        );
        // The bad one: no certificate of its own once tried (the default, if any).
        assert!(live.load().has_own("secure.example.net"), "not tried yet");
        assert!(live.load().for_name(Some("secure.example.net")).is_none());
        assert!(!live.load().has_own("secure.example.net"));
        // Events after the restore load at once, as before.
        apply(&mut s, &mut ix, "11-remove_ssl.yaml", t0);
        let good = fixture("10-add_ssl-pass_phrase.yaml");
        apply_text(&mut s, &mut ix, &good, t0);
        let slot = live
            .load()
            .by_name
            .get("secure.example.net")
            .cloned()
            .expect("listed");
        assert!(
            slot.key.get().is_some_and(Option::is_some),
            "loaded on arrival"
        );
    }
}
