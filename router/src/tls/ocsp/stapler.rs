//! The stapler: one task that keeps a current OCSP answer for every served
//! certificate whose CA has a responder.
//!
//! Every [`SCAN`] it walks the certificates loaded now (uploaded, ACME, the
//! default; a certificate restored at start joins once its first handshake
//! loads it) and fetches, [`FETCHES`] at a time, those due: new ones at once,
//! stapled ones halfway through their answer's validity and at least every
//! `tls.ocsp.refresh` (never more often than [`MIN_REFRESH`]), failed ones
//! after `tls.ocsp.retry`, doubled on each failure in a row; one whose chain
//! has no issuer or that names no responder is not asked again. A fetch is
//! bounded by `tls.ocsp.timeout` and [`MAX_ANSWER`] bytes. A failure keeps
//! the staple in force until its `nextUpdate`; then it is dropped.
//!
//! Each staple is saved under `state_dir/ocsp/` (one file a certificate,
//! named by a hash of it) and read back at start, before the first
//! handshake: a router that restarts while the responder is down staples
//! what it had. The files are ours (written after the checks of
//! [`super::answer`]); one whose answer expired is removed.
//!
//! **On a pair, one router fetches and both staple.** Router `a` asks the
//! responders; router `b` asks `a` first (`GET /ocsp/{file}` on its admin
//! API, over the pair's link) and staples `a`'s answer after the same checks
//! as one of its own, when `a` refreshed it within `tls.ocsp.refresh`. Only
//! when `a` has none so fresh, or does not answer, does `b` ask the responder
//! itself: the pair never goes without a staple for want of its peer.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use base64ct::{Base64, Encoding};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, SignatureVerificationAlgorithm};
use serde::{Deserialize, Serialize};

use super::answer::{Current, OcspError, Subject};
use super::{MIN_REFRESH, OcspSettings, Staple, Staples};
use crate::metrics::TlsMetrics;
use crate::ring::unix_now;
use crate::tls::store::Certs;

/// How often the served certificates are looked at.
pub const SCAN: Duration = Duration::from_secs(10);

/// Fetches at once.
pub const FETCHES: usize = 4;

/// The largest answer read (a basic response with a responder certificate is
/// 1.5 to 3 KiB).
pub const MAX_ANSWER: usize = 64 * 1024;

/// Why a fetch gave nothing to staple.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error("{0}")]
    Answer(#[from] OcspError),
    #[error("fetch: {0}")]
    Fetch(String),
}

impl Failed {
    fn reason(&self) -> &'static str {
        match self {
            Failed::Answer(e) => e.reason(),
            Failed::Fetch(_) => "fetch",
        }
    }
}

/// Where a staple came from (the `result` label of a good fetch).
#[derive(Clone, Copy)]
enum Source {
    Responder,
    Peer,
}

/// What the stapler knows of one served certificate.
struct Due {
    /// When to fetch next (seconds since the epoch).
    at: u64,
    failures: u32,
    /// The aliases it is served for, as of the last scan.
    aliases: BTreeSet<Arc<str>>,
    /// The scan that last saw it.
    seen: u64,
    /// The `thisUpdate` its aliases' gauges show.
    shown: Option<u64>,
}

pub struct Stapler {
    certs: Arc<ArcSwap<Certs>>,
    staples: Arc<Staples>,
    dir: PathBuf,
    settings: OcspSettings,
    algs: &'static [&'static dyn SignatureVerificationAlgorithm],
    metrics: TlsMetrics,
    due: HashMap<CertificateDer<'static>, Due>,
    scans: u64,
    /// Router `a` of the pair, asked first (this router is `b`).
    peer: Option<AskPeer>,
}

/// How router `b` asks `a` for a saved staple by name: `GET /ocsp/{name}` on
/// its admin API, over the pair's link (wired at start, so that TLS does not
/// depend on the pair, which depends on TLS); the answer's body when `a` has
/// one (200), none otherwise.
pub type AskPeer = Arc<
    dyn Fn(String) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Vec<u8>>> + Send>>
        + Send
        + Sync,
>;

/// A staple as saved.
#[derive(Serialize, Deserialize)]
struct Saved {
    leaf: String,
    answer: String,
    this_update: u64,
    next_update: u64,
}

impl Stapler {
    pub fn new(
        certs: Arc<ArcSwap<Certs>>,
        staples: Arc<Staples>,
        state_dir: &Path,
        settings: OcspSettings,
        provider: &rustls::crypto::CryptoProvider,
        metrics: TlsMetrics,
    ) -> Stapler {
        Stapler {
            certs,
            staples,
            dir: state_dir.join("ocsp"),
            settings,
            algs: provider.signature_verification_algorithms.all,
            metrics,
            due: HashMap::new(),
            scans: 0,
            peer: None,
        }
    }

    /// Asks `peer` (router `a` of the pair; this is `b`) for its answers
    /// before any responder.
    pub fn with_peer(mut self, peer: Option<AskPeer>) -> Stapler {
        self.peer = peer;
        self
    }

    /// Reads the saved staples still current into [`Staples`]; returns how
    /// many. Expired files are removed; unreadable ones are logged and left.
    pub fn restore(&self) -> usize {
        let now = unix_now();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut n = 0;
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_none_or(|x| x != "ocsp") {
                continue;
            }
            match read_saved(&path) {
                Ok((leaf, staple)) if staple.current.next_update > now => {
                    self.staples.put(leaf, staple);
                    n += 1;
                }
                Ok(_) => remove(&path),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "OCSP: a saved staple is unreadable; left as it is")
                }
            }
        }
        self.metrics.ocsp_staples(self.staples.len());
        n
    }

    /// Scans and fetches until the task is aborted.
    pub async fn run(mut self) {
        loop {
            self.scan().await;
            tokio::time::sleep(SCAN).await;
        }
    }

    /// One pass: note what is served, fetch what is due, drop what expired.
    async fn scan(&mut self) {
        self.scans += 1;
        let now = unix_now();
        let chains = self.note_served();
        let due: Vec<_> = chains
            .into_iter()
            .filter(|c| self.due.get(&c[0]).is_some_and(|d| d.at <= now))
            .collect();
        let ask = Ask {
            timeout: self.settings.timeout,
            fresh: self.settings.refresh,
            algs: self.algs,
            peer: self.peer.clone(),
        };
        let mut due = due.into_iter();
        let mut running = tokio::task::JoinSet::new();
        let mut failed = Failures::default();
        loop {
            while running.len() < FETCHES
                && let Some(chain) = due.next()
            {
                running.spawn(fetch_for(chain, ask.clone()));
            }
            match running.join_next().await {
                Some(Ok((chain, result))) => failed.add(self.settle(&chain, result)),
                Some(Err(e)) => tracing::error!(error = %e, "OCSP: a fetch task failed"),
                None => break,
            }
        }
        failed.say();
        for leaf in self.staples.expire(unix_now()) {
            tracing::warn!(
                "OCSP: a staple reached its nextUpdate without a fresh answer; none is stapled now"
            );
            remove(&self.file(&leaf));
        }
        self.show();
        self.metrics.ocsp_staples(self.staples.len());
    }

    /// Marks each served certificate seen (new ones due now) and forgets those
    /// no longer served; returns one chain per served leaf.
    fn note_served(&mut self) -> Vec<Vec<CertificateDer<'static>>> {
        let scan = self.scans;
        // Router `b` gives `a` a scan's head start on a new certificate.
        let first = match self.peer {
            Some(_) => unix_now() + SCAN.as_secs(),
            None => 0,
        };
        let mut chains = Vec::new();
        for d in self.due.values_mut() {
            d.aliases.clear();
        }
        for (alias, key) in self.certs.load().loaded() {
            let Some(leaf) = key.cert.first() else {
                continue;
            };
            let d = match self.due.get_mut(leaf) {
                Some(d) => d,
                None => self.due.entry(leaf.clone()).or_insert(Due {
                    at: first,
                    failures: 0,
                    aliases: BTreeSet::new(),
                    seen: 0,
                    shown: None,
                }),
            };
            if d.seen != scan {
                d.seen = scan;
                chains.push(key.cert.clone());
            }
            d.aliases.insert(alias);
        }
        let metrics = &self.metrics;
        self.due.retain(|_, d| {
            let keep = d.seen == scan;
            if !keep {
                d.aliases
                    .iter()
                    .for_each(|a| metrics.ocsp_staple_shown(a, None));
            }
            keep
        });
        chains
    }

    /// Takes a fetch's result: staples and saves a good answer, schedules the
    /// next; a failure is returned (its reason, and the alias with the error)
    /// for the scan's one warning.
    fn settle(
        &mut self,
        chain: &[CertificateDer<'static>],
        result: Result<(Staple, Source), Failed>,
    ) -> Option<(&'static str, String)> {
        let now = unix_now();
        let d = self.due.get_mut(&chain[0])?;
        match result {
            Ok((staple, source)) => {
                self.metrics.ocsp_fetch(match source {
                    Source::Responder => "ok",
                    Source::Peer => "peer",
                });
                d.failures = 0;
                d.at = next_fetch(staple.current, now, self.settings.refresh);
                let file = self.dir.join(file_name(&chain[0]));
                if let Err(e) = save(&file, &chain[0], &staple) {
                    tracing::warn!(file = %file.display(), error = %e, "OCSP: the staple is served but not saved");
                }
                self.staples.put(chain[0].clone(), staple);
                None
            }
            // What the certificate itself lacks: asked again only if it is
            // replaced (a new leaf is a new entry), and said once, quietly.
            Err(Failed::Answer(e @ (OcspError::NoIssuer | OcspError::NoResponder))) => {
                self.metrics.ocsp_fetch(e.reason());
                d.at = u64::MAX;
                tracing::debug!(
                    alias = d.aliases.first().map(|a| &**a).unwrap_or(""),
                    reason = e.reason(), error = %e,
                    "OCSP: nothing to staple for this certificate"
                );
                None
            }
            Err(e) => {
                self.metrics.ocsp_fetch(e.reason());
                d.failures = d.failures.saturating_add(1);
                let wait = retry_after(self.settings.retry, d.failures, self.settings.refresh);
                d.at = now + wait.as_secs();
                let alias = d.aliases.first().map(|a| &**a).unwrap_or("");
                tracing::debug!(alias, reason = e.reason(), error = %e, retry_in = ?wait, "OCSP: no fresh answer");
                Some((e.reason(), format!("{alias}: {e}")))
            }
        }
    }

    /// Sets each alias's staple gauge where its staple changed.
    fn show(&mut self) {
        for (leaf, d) in &mut self.due {
            let this_update = self.staples.get(leaf).map(|s| s.current.this_update);
            if this_update != d.shown {
                d.shown = this_update;
                for a in &d.aliases {
                    self.metrics.ocsp_staple_shown(a, this_update);
                }
            }
        }
    }

    fn file(&self, leaf: &CertificateDer<'_>) -> PathBuf {
        self.dir.join(file_name(leaf))
    }
}

/// A scan's failed fetches, said in one warning (a responder that is down for
/// 10 000 certificates is one line a scan, not 10 000; each is at DEBUG).
#[derive(Default)]
struct Failures {
    by_reason: std::collections::BTreeMap<&'static str, usize>,
    first: Option<String>,
}

impl Failures {
    fn add(&mut self, failure: Option<(&'static str, String)>) {
        if let Some((reason, what)) = failure {
            *self.by_reason.entry(reason).or_default() += 1;
            self.first.get_or_insert(what);
        }
    }

    fn say(self) {
        if let Some(first) = self.first {
            let n: usize = self.by_reason.values().sum();
            tracing::warn!(
                certificates = n, by_reason = ?self.by_reason, first = %first,
                "OCSP: no fresh answer for some certificates; their last good answers stay stapled until their nextUpdate"
            );
        }
    }
}

/// When a good answer is fetched again: halfway through its validity, at
/// most `refresh` and at least [`MIN_REFRESH`] from now.
pub fn next_fetch(c: Current, now: u64, refresh: Duration) -> u64 {
    let half = c.this_update + c.next_update.saturating_sub(c.this_update) / 2;
    half.clamp(
        now + MIN_REFRESH.as_secs(),
        now + refresh.as_secs().max(MIN_REFRESH.as_secs()),
    )
}

/// The wait after `failures` failed fetches in a row.
pub fn retry_after(retry: Duration, failures: u32, refresh: Duration) -> Duration {
    retry
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(refresh.max(retry))
}

/// What a fetch needs.
#[derive(Clone)]
struct Ask {
    timeout: Duration,
    /// The oldest `thisUpdate` (this long ago) taken from the peer.
    fresh: Duration,
    algs: &'static [&'static dyn SignatureVerificationAlgorithm],
    peer: Option<AskPeer>,
}

/// [`fetch`], with the chain it was for.
async fn fetch_for(
    chain: Vec<CertificateDer<'static>>,
    ask: Ask,
) -> (
    Vec<CertificateDer<'static>>,
    Result<(Staple, Source), Failed>,
) {
    let r = fetch(&chain, &ask).await;
    (chain, r)
}

/// One certificate's answer: the peer's, else asked of its responder; checked.
async fn fetch(chain: &[CertificateDer<'static>], ask: &Ask) -> Result<(Staple, Source), Failed> {
    let subject = Subject::new(chain)?;
    if let Some(peer) = &ask.peer
        && let Some(staple) = from_peer(peer, &subject, &chain[0], ask).await
    {
        return Ok((staple, Source::Peer));
    }
    let url = subject.responder()?;
    let request = subject.request()?;
    let der = tokio::time::timeout(ask.timeout, post(&url, request))
        .await
        .map_err(|_| Failed::Fetch(format!("{url}: no answer in {:?}", ask.timeout)))?
        .map_err(|e| Failed::Fetch(format!("{url}: {e}")))?;
    let current = subject.check(&der, unix_now(), ask.algs)?;
    Ok((Staple { der, current }, Source::Responder))
}

/// The peer's answer for `leaf`, when it has one that passes the checks and
/// is fresh; none otherwise (the peer is then not waited for).
async fn from_peer(
    peer: &AskPeer,
    subject: &Subject,
    leaf: &CertificateDer<'_>,
    ask: &Ask,
) -> Option<Staple> {
    let Some(body) = peer(file_stem(leaf)).await else {
        tracing::debug!("OCSP: the peer has no answer or does not answer; asking the responder");
        return None;
    };
    let (saved_leaf, staple) = parse_saved(&body).ok()?;
    let now = unix_now();
    let current = subject.check(&staple.der, now, ask.algs).ok()?;
    (saved_leaf == *leaf && now.saturating_sub(current.this_update) < ask.fresh.as_secs())
        .then_some(Staple {
            der: staple.der,
            current,
        })
}

/// POSTs an OCSP request (RFC 6960 appendix A.1) and reads the answer.
async fn post(url: &str, body: Vec<u8>) -> Result<Vec<u8>, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("{e}"))?;
    let authority = uri.authority().ok_or("no host")?.clone();
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let stream = tokio::net::TcpStream::connect((host, authority.port_u16().unwrap_or(80)))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let (mut send, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let driver = tokio::spawn(driver);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let req = http::Request::post(path)
        .header(http::header::HOST, authority.as_str())
        .header(http::header::CONTENT_TYPE, "application/ocsp-request")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = send.send_request(req).await.map_err(|e| e.to_string());
    let answer = match resp {
        Ok(r) if r.status().is_success() => Limited::new(r.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map(|b| b.to_bytes().to_vec())
            .map_err(|e| format!("answer: {e}")),
        Ok(r) => Err(format!("responder answered {}", r.status())),
        Err(e) => Err(e),
    };
    driver.abort();
    answer
}

/// `<file_stem>.ocsp`.
fn file_name(leaf: &CertificateDer<'_>) -> String {
    format!("{}.ocsp", file_stem(leaf))
}

/// The first 16 bytes of SHA-256 of the leaf, hex: a staple's name on disk
/// and on the admin API (`GET /ocsp/{stem}`).
pub fn file_stem(leaf: &CertificateDer<'_>) -> String {
    let hash = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, leaf.as_ref());
    hex::encode(&hash.as_ref()[..16])
}

/// Whether `stem` is a [`file_stem`] (and so safe as a file name).
pub fn is_file_stem(stem: &str) -> bool {
    stem.len() == 32
        && stem
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The saved staple `stem` in `dir` (`state_dir/ocsp`), as saved (JSON).
pub fn saved(dir: &Path, stem: &str) -> Option<Vec<u8>> {
    if !is_file_stem(stem) {
        return None;
    }
    std::fs::read(dir.join(format!("{stem}.ocsp"))).ok()
}

fn save(file: &Path, leaf: &CertificateDer<'_>, s: &Staple) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let saved = Saved {
        leaf: Base64::encode_string(leaf.as_ref()),
        answer: Base64::encode_string(&s.der),
        this_update: s.current.this_update,
        next_update: s.current.next_update,
    };
    let json = serde_json::to_vec(&saved).map_err(std::io::Error::other)?;
    durable_file::write(file, &json)
}

fn read_saved(file: &Path) -> Result<(CertificateDer<'static>, Staple), String> {
    let bytes = std::fs::read(file).map_err(|e| e.to_string())?;
    parse_saved(&bytes)
}

fn parse_saved(bytes: &[u8]) -> Result<(CertificateDer<'static>, Staple), String> {
    let s: Saved = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let leaf = Base64::decode_vec(&s.leaf).map_err(|e| e.to_string())?;
    let der = Base64::decode_vec(&s.answer).map_err(|e| e.to_string())?;
    let current = Current {
        this_update: s.this_update,
        next_update: s.next_update,
    };
    Ok((CertificateDer::from(leaf), Staple { der, current }))
}

fn remove(file: &Path) {
    if let Err(e) = std::fs::remove_file(file)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(file = %file.display(), error = %e, "OCSP: an expired staple's file stays");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_answer_is_fetched_again_halfway_within_the_bounds() {
        let week = Current {
            this_update: 1000,
            next_update: 1000 + 7 * 86_400,
        };
        let hour = Duration::from_secs(3600);
        // Halfway is days away: the refresh bound wins.
        assert_eq!(next_fetch(week, 1000, hour), 1000 + 3600);
        // A ten-minute answer: halfway is 5 min, which is also the floor.
        let short = Current {
            this_update: 1000,
            next_update: 1600,
        };
        assert_eq!(next_fetch(short, 1000, hour), 1300);
        // An answer already past halfway: not sooner than the floor.
        assert_eq!(next_fetch(short, 1500, hour), 1800);
    }

    #[test]
    fn a_scans_failures_are_counted_by_reason_with_the_first_kept() {
        let mut f = Failures::default();
        f.add(None);
        f.add(Some(("fetch", "a.example.com: fetch: refused".into())));
        f.add(Some(("fetch", "b.example.com: fetch: refused".into())));
        f.add(Some(("signature", "c.example.com: bad".into())));
        assert_eq!(f.by_reason.get("fetch"), Some(&2));
        assert_eq!(f.by_reason.get("signature"), Some(&1));
        assert_eq!(f.first.as_deref(), Some("a.example.com: fetch: refused"));
    }

    #[test]
    fn failures_back_off_doubling_up_to_the_refresh() {
        let (retry, refresh) = (Duration::from_secs(60), Duration::from_secs(3600));
        let waits: Vec<u64> = (1..=8)
            .map(|n| retry_after(retry, n, refresh).as_secs())
            .collect();
        assert_eq!(waits, [60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(retry_after(retry, u32::MAX, refresh).as_secs(), 3600);
    }
}
