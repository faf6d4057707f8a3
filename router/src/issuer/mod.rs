//! Certificates from an ACME CA for aliases that have none of their own.
//!
//! An alias gets one when its app asks (`acme: true` in its settings or in
//! `app_defaults`), it is in the route table, and no certificate was uploaded
//! for it (`add_ssl` always wins). Nothing a client sends starts an order: the
//! names ordered are the table's aliases only, never an SNI or a Host.
//!
//! [`Manager`] looks the table over every `acme.check_interval` and orders,
//! up to [`MAX_ORDERS`] aliases at once (each order a task of its own, so one
//! that waits holds back no other), through the `acme` crate: the account in
//! `state_dir/acme/account.json`, HTTP-01 answered by the HTTP listener from
//! `acme::Challenges` before routing. An issued certificate is saved in
//! `state_dir/acme/certs/ALIAS.json` (0600) before it is served, and loaded from
//! there at start. It is ordered again when the CA's renewal window says
//! (ACME Renewal Information, see [`renewal`]), else at two thirds of its
//! lifetime; a failed order is tried again after `acme.retry_after`, doubling
//! with each failure up to a day, while the certificate in service (if any) stays.
//! The try resumes the order it has (its URL, and its key once finalized) when
//! the CA says it can still lead to a certificate: a CA unreachable for a while
//! costs no order against its limits. An alias that
//! leaves the table or whose app turns ACME off stops being served its ACME
//! certificate at once; its saved key is deleted [`KEEP_GONE`] later (a remove
//! and add of the alias in between keeps it).
//!
//! **A pair** (`pair.peer` or `acme.peer`, the other router's admin address;
//! `pair.node` or `acme.node`, `a` or `b`) shares all of it over the pair's one
//! link ([`crate::pair::peer`], served by `admin::acme`), so that the CA sees one order per alias and both routers
//! serve its certificate:
//! - each alias has one orderer, [`orderer`]'s pick of `a` or `b`; a router
//!   whose peer has not answered for `acme.peer_timeout` orders every alias;
//! - the orderer puts each answer on its peer before it tells the CA to look,
//!   so whichever router holds the VIP answers;
//! - it records the order's URL (and, before finalizing, its key) on the peer,
//!   which takes the order over by URL if the orderer goes away: no second order;
//! - the issued certificate is put on the peer, which checks, saves and serves
//!   it; each check also asks the peer for certificates issued since the last
//!   one it got (a router that was down catches up);
//! - router `a` creates the account and `b` takes it from `a` (`b` creates one
//!   only while `a` does not answer).

mod renewal;
pub mod settings;
pub mod shared;

pub use crate::pair::{Peer, PeerError};
use renewal::Held;

use crate::issuer::shared::{Entry, IssuedCert, PAGE, Shared, valid_alias};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use http::{Method, StatusCode};
use tokio::task::JoinSet;

use acme::{Answer, OrderRecord, Publishing};

use crate::metrics::TlsMetrics;
use crate::table::RouteTable;
use crate::tls::keys;
use settings::{AcmeChallenge, AcmeConfig};

/// How long the saved key of an alias that left stays on disk.
pub const KEEP_GONE: Duration = Duration::from_secs(3600);
/// The longest wait before an alias whose orders fail is tried again.
const MAX_RETRY: Duration = Duration::from_secs(24 * 3600);
/// The longest `Retry-After` of a CA taken as said (a week: Let's Encrypt's
/// rate-limit windows are up to that).
const MAX_SAID_RETRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// How many orders run at once: an alias whose order waits (a slow
/// validation, a CA that hangs until `acme.order_timeout`) holds back no more
/// than one slot, and a CA's rate limits (Let's Encrypt: 300 new orders per
/// three hours per account) are far away.
const MAX_ORDERS: usize = 4;

/// Where the issuer's actions are kept for operators (`/audit`'s `acme`):
/// `(action, alias, result)`.
pub type AuditFn = Arc<dyn Fn(&str, &str, &str) + Send + Sync>;

/// An order task's end: its alias and its result.
type Done = (String, Result<acme::Issued, acme::AcmeError>);

/// The pair's other router, and what this one knows of it.
pub struct Pair {
    pub peer: Arc<Peer>,
    /// This router is `b` (else `a`).
    pub node_b: bool,
    /// How long the peer may not answer before this router orders for every alias.
    pub timeout: Duration,
    /// The last time the peer answered.
    seen: Instant,
    /// Whether it answered within `timeout` at the last check.
    up: bool,
    /// The last certificate taken from it: `(issued_at, alias)`.
    cursor: (i64, String),
    /// Whether our account was offered to it since it last came up.
    account_offered: bool,
}

impl Pair {
    pub fn new(peer: Arc<Peer>, node_b: bool, timeout: Duration) -> Pair {
        Pair {
            peer,
            node_b,
            timeout,
            // Counted as up until it had `timeout` to answer after our start.
            seen: Instant::now(),
            up: true,
            cursor: (i64::MIN, String::new()),
            account_offered: false,
        }
    }
}

/// Which router of a pair orders `alias` while both are up: the top bit of
/// its name's 64-bit FNV-1a hash, mixed by MurmurHash3's finalizer (`b` when
/// set; FNV-1a alone mixes the last bytes poorly, and its lowest bit is only
/// the parity of the bytes'). A fixed function of the name only, so that two
/// routers of different versions agree: the unit test pins it.
pub fn orderer(alias: &str) -> char {
    let hash = alias.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut k = hash;
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    if k >> 63 == 1 { 'b' } else { 'a' }
}

/// Orders, renews and serves ACME certificates (see the module doc).
pub struct Manager {
    config: AcmeConfig,
    table: Arc<ArcSwap<RouteTable>>,
    shared: Arc<Shared>,
    metrics: TlsMetrics,
    pair: Option<Pair>,
    held: HashMap<String, Held>,
    /// Failed aliases: failures in a row, and not before when to try again.
    failed: HashMap<String, (u32, Instant)>,
    /// Aliases that left, and since when.
    gone: HashMap<String, Instant>,
    /// The order tasks running, by task.
    in_flight: HashMap<tokio::task::Id, String>,
    audit: AuditFn,
}

impl Manager {
    pub fn new(
        config: AcmeConfig,
        table: Arc<ArcSwap<RouteTable>>,
        shared: Arc<Shared>,
        metrics: TlsMetrics,
        pair: Option<Pair>,
    ) -> Manager {
        Manager {
            config,
            table,
            shared,
            metrics,
            pair,
            held: HashMap::new(),
            failed: HashMap::new(),
            gone: HashMap::new(),
            in_flight: HashMap::new(),
            audit: Arc::new(|_: &str, _: &str, _: &str| {}),
        }
    }

    /// Keeps the issuer's actions (orders issued or failed, orders taken over,
    /// certificates taken from the peer) through `audit`.
    pub fn with_audit(mut self, audit: AuditFn) -> Manager {
        self.audit = audit;
        self
    }

    /// Serves the certificates saved by earlier runs.
    pub fn restore(&mut self) {
        let Ok(dir) = std::fs::read_dir(self.shared.dir().join("certs")) else {
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
            if let Some(saved) = self.shared.load(&alias) {
                self.shared.indexed(&alias, saved.issued_at);
                self.install(&alias, &saved);
            }
        }
    }

    /// Loads and serves a certificate (a key that does not load: logged, counted).
    fn install(&mut self, alias: &str, saved: &IssuedCert) {
        match keys::load(
            &saved.chain_pem,
            &saved.key_pem,
            None,
            self.shared.provider(),
        ) {
            Ok(loaded) => {
                self.held.insert(
                    alias.to_string(),
                    Held::new(loaded.not_after, saved.issued_at),
                );
                self.shared.install(alias, Some(loaded));
                self.metrics.acme_certificates.set(self.held.len() as i64);
            }
            Err(e) => {
                self.metrics.certificate_error(e.reason());
                tracing::warn!(alias = %alias, error = %e, "ACME certificate does not load; not served");
            }
        }
    }

    fn settings(&self) -> acme::Settings {
        acme::Settings {
            contact: self.config.contact.clone(),
            ca_file: self.config.ca_file.clone(),
            request_timeout: self.config.request_timeout,
            order_timeout: self.config.order_timeout,
            challenge: match self.config.challenge {
                AcmeChallenge::Http01 => acme::Challenge::Http01,
                AcmeChallenge::TlsAlpn01 => acme::Challenge::TlsAlpn01,
            },
            ..acme::Settings::new(self.config.directory.clone().unwrap_or_default())
        }
    }

    /// Looks the table over every `check_interval` (and when the peer put a
    /// certificate here) until the task is dropped.
    pub async fn run(mut self) {
        let settings = self.settings();
        let mut client: Option<Arc<acme::Client>> = None;
        let mut orders: JoinSet<Done> = JoinSet::new();
        let mut asks: JoinSet<renewal::Asked> = JoinSet::new();
        let shared = self.shared.clone();
        // A steady beat, not a sleep restarted by each order that ends: orders
        // ending often must not put the next look off.
        let mut beat = tokio::time::interval(self.config.check_interval);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = beat.tick() => {}
                () = shared.wake.notified() => {}
                // A slot is free: the next alias is ordered at once.
                Some(done) = orders.join_next_with_id(), if !orders.is_empty() => {
                    self.finished(done).await;
                }
                Some(Ok((alias, answer))) = asks.join_next(), if !asks.is_empty() => {
                    if let Some(h) = self.held.get_mut(&alias) {
                        h.answered(answer);
                    }
                    continue;
                }
            }
            let (wanted, due) = self.look().await;
            // Router `a` (or one alone) opens the account as soon as any alias
            // wants a certificate: `b` may need it for an alias of its own.
            let opener = self.pair.as_ref().is_none_or(|p| !p.node_b) && !wanted.is_empty();
            if client.is_none() && (opener || !due.is_empty()) {
                match self.open_account(&settings).await {
                    Ok(Some(c)) => client = Some(Arc::new(c)),
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "ACME account not opened");
                        for alias in &due {
                            self.failed_order(alias, &e, e.retry_after());
                        }
                        continue;
                    }
                }
            }
            let Some(client) = client.clone() else {
                continue;
            };
            for alias in due
                .into_iter()
                .take(MAX_ORDERS.saturating_sub(orders.len()))
            {
                let task = self.order(client.clone(), alias.clone());
                let id = orders.spawn(task).id();
                self.in_flight.insert(id, alias);
            }
            for (alias, chain) in self.windows_due(MAX_ORDERS.saturating_sub(asks.len())) {
                asks.spawn(renewal::ask(client.clone(), alias, chain));
            }
        }
    }

    /// One look at the table: the peer's news taken, aliases gone forgotten,
    /// saved certificates served; what is wanted, and what this router should
    /// order now (due, its to order, not in flight).
    async fn look(&mut self) -> (HashSet<String>, Vec<String>) {
        self.catch_up().await;
        let wanted = self.wanted();
        self.forget_gone(&wanted);
        for alias in self.shared.take_arrived() {
            (self.audit)("acme-from-peer", &alias, "saved");
            if wanted.contains(&alias) {
                self.reload_saved(&alias);
            } else if !self.held.contains_key(&alias) {
                // Put by the peer before this router has the alias (or after
                // it left): not served; kept for KEEP_GONE, as a leaving one.
                self.shared.install(&alias, None);
                self.gone.entry(alias).or_insert_with(Instant::now);
            }
        }
        for alias in &wanted {
            if !self.held.contains_key(alias) {
                self.reload_saved(alias);
            }
        }
        let busy: HashSet<&String> = self.in_flight.values().collect();
        let due = wanted
            .iter()
            .filter(|a| !busy.contains(a) && self.due(a) && self.orders_here(a))
            .cloned()
            .collect();
        (wanted, due)
    }

    /// Serves `alias`'s saved certificate, if it has one (it came back, or the
    /// peer put a newer one).
    fn reload_saved(&mut self, alias: &str) {
        if let Some(saved) = self.shared.load(alias) {
            self.install(alias, &saved);
        }
    }

    /// Whether this router orders `alias`: always alone or when the peer is
    /// away; else when [`orderer`] picks it.
    fn orders_here(&self, alias: &str) -> bool {
        match &self.pair {
            Some(p) if p.up => (orderer(alias) == 'b') == p.node_b,
            _ => true,
        }
    }

    /// The account: this router's, else (a pair) its peer's, else a new one,
    /// which is then put on the peer. `None`: router `b` waits for `a`'s.
    async fn open_account(
        &mut self,
        settings: &acme::Settings,
    ) -> Result<Option<acme::Client>, acme::AcmeError> {
        let file = self.shared.dir().join(acme::ACCOUNT_FILE);
        let had = file.exists();
        if let (false, Some(p)) = (had, &self.pair) {
            match p.peer.call(Method::GET, "/acme/account", Vec::new()).await {
                Ok((StatusCode::OK, body)) if acme::is_account(&body) => {
                    let saved = std::fs::create_dir_all(self.shared.dir())
                        .and_then(|()| durable_file::write(&file, &body));
                    match saved {
                        Ok(()) => {
                            tracing::info!(peer = %p.peer.addr(), "ACME account taken from the peer")
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "ACME account from the peer not saved")
                        }
                    }
                }
                answer if p.node_b && p.up => {
                    tracing::info!(peer = %p.peer.addr(), answer = ?answer.map(|(s, _)| s), "ACME: waiting for router a's account");
                    return Ok(None);
                }
                _ => {}
            }
        }
        let client = acme::Client::open(settings, self.shared.dir()).await?;
        if !had {
            if let Some(p) = self.pair.as_mut() {
                p.account_offered = false;
            }
            self.offer_account().await;
        }
        Ok(Some(client))
    }

    /// Puts this router's account on the peer once after it comes up (or
    /// after the account was made): it takes it if it has none; one it has
    /// that differs (both made one while apart) is named in the log.
    async fn offer_account(&mut self) {
        let Some(p) = self.pair.as_mut().filter(|p| p.up && !p.account_offered) else {
            return;
        };
        let Ok(body) = std::fs::read(self.shared.dir().join(acme::ACCOUNT_FILE)) else {
            return;
        };
        match p.peer.call(Method::PUT, "/acme/account", body).await {
            Ok((StatusCode::CREATED, _)) => {
                tracing::info!(peer = %p.peer.addr(), "ACME account put on the peer")
            }
            Ok((StatusCode::OK, _)) => {}
            Ok((StatusCode::CONFLICT, _)) => {
                tracing::warn!(peer = %p.peer.addr(), "the peer has another ACME account: neither router can take over the other's orders (stop one, delete its state_dir/acme/account.json, start it: it takes the other's)")
            }
            answer => {
                tracing::warn!(peer = %p.peer.addr(), answer = ?answer.map(|(s, _)| s), "ACME account not put on the peer; it takes it when it needs it");
                return;
            }
        }
        p.account_offered = true;
    }

    /// Asks the peer for the certificates it saved since the last one taken,
    /// page by page; whether it answers decides who orders what.
    async fn catch_up(&mut self) {
        let Some(p) = self.pair.as_mut() else {
            return;
        };
        loop {
            let path = format!("/acme/certificates?after={}:{}", p.cursor.0, p.cursor.1);
            let page: Vec<Entry> = match p.peer.call(Method::GET, &path, Vec::new()).await {
                Ok((StatusCode::OK, body)) => match serde_json::from_slice(&body) {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(peer = %p.peer.addr(), error = %e, "ACME peer: not a page of certificates");
                        break;
                    }
                },
                Ok((status, body)) => {
                    tracing::warn!(peer = %p.peer.addr(), %status, answer = %String::from_utf8_lossy(&body).trim(), "ACME peer refuses the catch-up (same admin token and acme settings on both?)");
                    break;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "ACME peer does not answer");
                    break;
                }
            };
            p.seen = Instant::now();
            let full = page.len() >= PAGE;
            for entry in page {
                p.cursor = (entry.saved.issued_at, entry.alias.clone());
                if let Err(e) = self.shared.accept(&entry.alias, &entry.saved) {
                    tracing::warn!(peer = %p.peer.addr(), error = %e, "ACME certificate from the peer refused");
                }
            }
            if !full {
                break;
            }
        }
        let up = p.seen.elapsed() < p.timeout;
        if up != p.up {
            if up {
                tracing::info!(peer = %p.peer.addr(), "ACME peer answers again: each alias has one orderer");
            } else {
                tracing::warn!(peer = %p.peer.addr(), timeout = ?p.timeout, "ACME peer silent: this router orders for every alias");
            }
        }
        if !up {
            p.account_offered = false;
        }
        p.up = up;
        self.metrics.acme_peer(p.peer.addr(), up);
        self.offer_account().await;
    }

    /// The aliases that should have an ACME certificate now.
    fn wanted(&self) -> HashSet<String> {
        let table = self.table.load();
        let certs = self.shared.live().load_full();
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

    /// Whether `alias` needs an order now: none held, or its renewal due (the
    /// CA's window, else two thirds of its lifetime gone), and no failure
    /// waiting out its back-off.
    fn due(&self, alias: &str) -> bool {
        if self
            .failed
            .get(alias)
            .is_some_and(|(_, after)| Instant::now() < *after)
        {
            return false;
        }
        self.held
            .get(alias)
            .is_none_or(|h| unix_now() >= h.renew_at())
    }

    /// Up to `room` aliases this router orders whose CA renewal window is due
    /// to be asked for, with their chains; each marked as asked.
    fn windows_due(&mut self, room: usize) -> Vec<(String, String)> {
        let now = Instant::now();
        let due: Vec<String> = self
            .held
            .iter()
            .filter(|(a, h)| h.ask_at <= now && self.orders_here(a))
            .map(|(a, _)| a.clone())
            .take(room)
            .collect();
        let mut out = Vec::new();
        for alias in due {
            if let Some(h) = self.held.get_mut(&alias) {
                // Not asked twice while the question is out.
                h.ask_at = now + self.config.request_timeout * 2;
            }
            if let Some(saved) = self.shared.load(&alias) {
                out.push((alias, saved.chain_pem));
            }
        }
        out
    }

    /// The order for `alias` as a task of its own (taking over the peer's
    /// order for it, if the peer left one): its result goes to [`Self::finished`].
    fn order(
        &self,
        client: Arc<acme::Client>,
        alias: String,
    ) -> impl std::future::Future<Output = Done> + Send + 'static {
        let peers = self
            .shared
            .take_peer_order(&alias, self.config.order_timeout);
        let own = self.shared.resume_own_order(&alias);
        match (&peers, &own) {
            (Some(r), _) => (self.audit)("acme-take-over", &alias, &r.url),
            (None, Some(r)) => (self.audit)("acme-resume", &alias, &r.url),
            (None, None) => (self.audit)("acme-order", &alias, "started"),
        }
        let resume = peers.or(own);
        let peer = self.pair.as_ref().filter(|p| p.up).map(|p| p.peer.clone());
        let shared = self.shared.clone();
        async move {
            let answers = Answering {
                shared: &shared,
                peer: peer.as_deref(),
            };
            let result = client.issue(&alias, &answers, resume).await;
            if let Some(peer) = &peer {
                let path = format!("/acme/orders/{alias}");
                let _ = peer.call(Method::DELETE, &path, Vec::new()).await;
            }
            (alias, result)
        }
    }

    /// An order task ended: its certificate checked, saved, served and put on
    /// the peer, or the failure counted.
    async fn finished(&mut self, done: Result<(tokio::task::Id, Done), tokio::task::JoinError>) {
        let (alias, result) = match done {
            Ok((id, done)) => {
                self.in_flight.remove(&id);
                done
            }
            Err(e) => {
                if let Some(alias) = self.in_flight.remove(&e.id()) {
                    tracing::error!(alias = %alias, error = %e, "ACME order task ended abnormally");
                }
                return;
            }
        };
        let issued = match result {
            Ok(issued) => issued,
            Err(e) => return self.failed_order(&alias, &e, e.retry_after()),
        };
        let saved = match self.checked(issued) {
            Ok(saved) => saved,
            Err(why) => return self.failed_order(&alias, &why, None),
        };
        if let Err(e) = self.shared.save(&alias, &saved) {
            tracing::warn!(alias = %alias, error = %e, "ACME certificate not saved; served until restart");
        }
        self.install(&alias, &saved);
        self.shared.end_own_order(&alias);
        self.failed.remove(&alias);
        self.metrics.acme_failures(&alias, 0);
        self.metrics.acme_order(true);
        (self.audit)("acme-issued", &alias, "served");
        self.put_on_peer(&alias, &saved).await;
    }

    /// What the CA sent, if it is a chain for our key and not yet expired (else
    /// the order failed, and the certificate in service stays).
    fn checked(&self, issued: acme::Issued) -> Result<IssuedCert, String> {
        let saved = IssuedCert {
            chain_pem: issued.chain_pem,
            key_pem: issued.key_pem,
            issued_at: unix_now(),
            order_url: issued.order_url,
        };
        match keys::load(
            &saved.chain_pem,
            &saved.key_pem,
            None,
            self.shared.provider(),
        ) {
            Ok(l) if l.not_after > saved.issued_at => Ok(saved),
            Ok(_) => Err("the CA's certificate has expired".into()),
            Err(e) => Err(format!(
                "the CA's certificate does not load with our key: {e}"
            )),
        }
    }

    /// Puts `alias`'s new certificate on the peer (which otherwise takes it at
    /// its next catch-up).
    async fn put_on_peer(&self, alias: &str, saved: &IssuedCert) {
        let Some(p) = &self.pair else {
            return;
        };
        let body = serde_json::to_vec(saved).unwrap_or_default();
        let path = format!("/acme/certificates/{alias}");
        match p.peer.call(Method::PUT, &path, body).await {
            Ok((s, _)) if s.is_success() => {
                tracing::info!(alias = %alias, peer = %p.peer.addr(), "ACME certificate put on the peer")
            }
            answer => {
                tracing::warn!(alias = %alias, peer = %p.peer.addr(), answer = ?answer.map(|(s, _)| s), "ACME certificate not put on the peer; it takes it at its next check")
            }
        }
    }

    /// An order for `alias` failed (or no account to order with): counted, and
    /// tried again after a back-off that doubles with each failure in a row.
    /// A CA's `Retry-After` (rate limited, overloaded) is honoured when longer.
    fn failed_order(&mut self, alias: &str, e: &dyn std::fmt::Display, said: Option<Duration>) {
        self.metrics.acme_order(false);
        let n = self.failed.get(alias).map_or(0, |(n, _)| *n) + 1;
        let backoff = (self.config.retry_after * 2u32.saturating_pow(n - 1)).min(MAX_RETRY);
        let wait = backoff.max(said.unwrap_or_default().min(MAX_SAID_RETRY));
        self.failed
            .insert(alias.to_string(), (n, Instant::now() + wait));
        self.metrics.acme_failures(alias, n);
        (self.audit)("acme-failed", alias, &e.to_string());
        tracing::warn!(
            alias = %alias, error = %e, failures = n, retry_in = ?wait,
            "ACME order failed; the certificate in service (if any) stays"
        );
    }

    /// Stops serving aliases no longer wanted; deletes their saved keys
    /// [`KEEP_GONE`] after they left.
    fn forget_gone(&mut self, wanted: &HashSet<String>) {
        let now = Instant::now();
        for alias in unwanted(&self.held, wanted) {
            self.held.remove(&alias);
            self.shared.install(&alias, None);
            self.gone.entry(alias).or_insert(now);
        }
        for alias in unwanted(&self.failed, wanted) {
            self.shared.end_own_order(&alias);
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
            self.shared.delete(alias);
            false
        });
        self.metrics.acme_certificates.set(self.held.len() as i64);
    }
}

/// Where an order's answers go: this router's listeners (see
/// [`Shared::publish`]) and, in a pair whose peer answers, the peer's, before
/// the CA is told to look; the order's progress to the peer too.
struct Answering<'a> {
    shared: &'a Shared,
    peer: Option<&'a Peer>,
}

impl Answering<'_> {
    async fn to_peer(&self, method: Method, path: &str, body: Vec<u8>) {
        let Some(peer) = self.peer else {
            return;
        };
        match peer.call(method, path, body).await {
            Ok((s, _)) if s.is_success() => {}
            answer => {
                tracing::warn!(peer = %peer.addr(), path, answer = ?answer.map(|(s, _)| s), "ACME peer did not take the call")
            }
        }
    }
}

impl acme::Answers for Answering<'_> {
    fn publish<'a>(&'a self, answer: &'a Answer) -> Publishing<'a> {
        self.shared.publish(answer);
        let body = serde_json::to_vec(answer).unwrap_or_default();
        Box::pin(self.to_peer(Method::PUT, "/acme/answers", body))
    }

    fn withdraw<'a>(&'a self, answer: &'a Answer) -> Publishing<'a> {
        self.shared.withdraw(answer);
        let body = serde_json::to_vec(answer).unwrap_or_default();
        Box::pin(self.to_peer(Method::DELETE, "/acme/answers", body))
    }

    fn progress<'a>(&'a self, name: &'a str, record: &'a OrderRecord) -> Publishing<'a> {
        self.shared.own_order(name, record);
        let body = serde_json::to_vec(record).unwrap_or_default();
        Box::pin(async move {
            self.to_peer(Method::PUT, &format!("/acme/orders/{name}"), body)
                .await
        })
    }
}

/// The aliases `map` holds that are not `wanted` any more.
fn unwanted<V>(map: &HashMap<String, V>, wanted: &HashSet<String>) -> Vec<String> {
    map.keys()
        .filter(|a| !wanted.contains(*a))
        .cloned()
        .collect()
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::Path;
    use std::sync::Mutex;

    use crate::tls::store::CertIndex;

    fn manager(dir: &Path) -> (Manager, Arc<Mutex<CertIndex>>) {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let certs = Arc::new(Mutex::new(CertIndex::new(
            None,
            provider.clone(),
            TlsMetrics::detached(),
            Duration::from_secs(10),
        )));
        let shared = Arc::new(Shared::new(dir, Arc::default(), certs.clone(), provider));
        let manager = Manager::new(
            AcmeConfig::default(),
            Arc::new(ArcSwap::from_pointee(RouteTable::default())),
            shared,
            TlsMetrics::detached(),
            None,
        );
        (manager, certs)
    }

    /// A self-signed certificate for `name` and its key (PEM).
    fn leaf(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    fn saved(dir: &Path, alias: &str, chain_pem: &str, key_pem: &str) {
        let saved = IssuedCert {
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
    fn the_orderer_of_an_alias_is_a_fixed_function_of_its_name() {
        // Pinned: the two routers of a pair may run different versions.
        let pinned = [
            ("shop0.example.test", 'a'),
            ("shop1.example.test", 'a'),
            ("shop2.example.test", 'b'),
            ("cart0.example.test", 'a'),
            ("cart2.example.test", 'b'),
        ];
        for (alias, node) in pinned {
            assert_eq!(orderer(alias), node, "{alias}");
        }
        let b = (0..10_000)
            .filter(|i| orderer(&format!("app{i}.example.test")) == 'b')
            .count();
        assert!((4_800..5_200).contains(&b), "an even split: {b} of 10 000");
    }

    #[test]
    fn a_certificate_from_the_peer_is_kept_only_if_it_loads_and_is_newer() {
        let dir = std::env::temp_dir().join(format!("issuer-peer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (m, certs) = manager(&dir);
        let saved = |(chain_pem, key_pem): (String, String), issued_at| IssuedCert {
            chain_pem,
            key_pem,
            issued_at,
            order_url: "https://ca.example/order/1".into(),
        };
        let alias = "shop.example.com";
        let first = saved(leaf(alias), 100);
        // The peer's order record for it ends with its certificate.
        let record = acme::OrderRecord {
            url: "https://ca.example/order/1".into(),
            key_pem: None,
        };
        m.shared.peer_order(alias, Some(record.clone()));
        assert!(m.shared.accept(alias, &first).expect("kept"));
        assert_eq!(
            m.shared.take_peer_order(alias, Duration::from_secs(60)),
            None
        );
        // A record older than an order may last is left behind, not taken over.
        m.shared.peer_order(alias, Some(record.clone()));
        assert_eq!(m.shared.take_peer_order(alias, Duration::ZERO), None);
        m.shared.peer_order(alias, Some(record.clone()));
        assert_eq!(
            m.shared.take_peer_order(alias, Duration::from_secs(60)),
            Some(record.clone())
        );
        // A peer recording without end is held to MAX_ANSWERS orders.
        for i in 0..crate::issuer::shared::MAX_ANSWERS {
            assert!(
                m.shared
                    .peer_order(&format!("o{i}.example.com"), Some(record.clone()))
            );
        }
        assert!(
            !m.shared
                .peer_order("one-more.example.com", Some(record.clone()))
        );
        assert!(
            m.shared.peer_order("o1.example.com", Some(record.clone())),
            "an update"
        );
        assert!(m.shared.peer_order("o1.example.com", None));
        assert_eq!(
            certs.lock().expect("lock").live().load().source(alias),
            "acme"
        );
        // Not again, nor an older one.
        assert!(!m.shared.accept(alias, &first).expect("same"));
        assert!(
            !m.shared
                .accept(alias, &saved(leaf(alias), 99))
                .expect("older")
        );
        // A chain with another's key, and a name that is no alias: refused.
        let (cert, _) = leaf(alias);
        let (_, other_key) = leaf("other.example.com");
        assert!(
            m.shared
                .accept(alias, &saved((cert, other_key), 200))
                .is_err()
        );
        assert!(m.shared.accept("../x.json", &first).is_err());
        assert_eq!(m.shared.load(alias).map(|s| s.issued_at), Some(100));
        // Paging: each page after the last entry taken, oldest first.
        for i in 0..(PAGE + 5) {
            let a = format!("app{i}.example.com");
            assert!(
                m.shared
                    .accept(&a, &saved(leaf(&a), 1000 + i as i64))
                    .expect("kept")
            );
        }
        let page = m.shared.page(&(i64::MIN, String::new()));
        assert_eq!(page.len(), PAGE);
        assert_eq!(page[0].alias, alias);
        let last = page.last().expect("last");
        let next = m.shared.page(&(last.saved.issued_at, last.alias.clone()));
        assert_eq!(next.len(), 6, "the rest");
        assert_eq!(next[5].alias, format!("app{}.example.com", PAGE + 4));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_chain_from_the_ca_for_another_key_fails_the_order() {
        let dir = std::env::temp_dir().join(format!("issuer-chain-{}", std::process::id()));
        let (m, _) = manager(&dir);
        let issued = |(chain_pem, key_pem): (String, String)| acme::Issued {
            chain_pem,
            key_pem,
            order_url: "https://ca.example/order/1".into(),
        };
        assert!(m.checked(issued(leaf("shop.example.com"))).is_ok());
        let (cert, _) = leaf("shop.example.com");
        let (_, other_key) = leaf("shop.example.com");
        let why = m.checked(issued((cert, other_key))).expect_err("refused");
        assert!(why.contains("does not load with our key"), "{why}");
        let garbage = m.checked(issued(("{\"not\": \"pem\"}".into(), leaf("a.b").1)));
        assert!(garbage.is_err());
    }

    #[test]
    fn a_tls_alpn_01_answer_from_the_peer_is_served_to_acme_tls_handshakes_until_withdrawn() {
        let dir = std::env::temp_dir().join(format!("issuer-alpn-{}", std::process::id()));
        let (m, certs) = manager(&dir);
        let (cert, key) = leaf("shop.example.com");
        use rustls::pki_types::pem::PemObject as _;
        let der = |pem: &str| {
            rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes())
                .expect("der")
                .to_vec()
        };
        let key_der = rustls::pki_types::PrivatePkcs8KeyDer::from_pem_slice(key.as_bytes())
            .expect("key")
            .secret_pkcs8_der()
            .to_vec();
        let answer = acme::Answer::TlsAlpn01 {
            name: "shop.example.com".into(),
            cert: acme::AlpnCertificate {
                cert_der: der(&cert),
                key_der,
            },
        };
        // As the peer sends it (PUT /acme/answers).
        let wire = serde_json::to_vec(&answer).expect("json");
        let taken: acme::Answer = serde_json::from_slice(&wire).expect("parsed");
        assert_eq!(taken, answer);
        m.shared.publish(&taken);
        let live = || certs.lock().expect("lock").live().load_full();
        assert!(live().alpn_challenge("shop.example.com").is_some());
        m.shared.withdraw(&taken);
        assert!(live().alpn_challenge("shop.example.com").is_none());
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
