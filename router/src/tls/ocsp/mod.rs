//! OCSP stapling (`tls.ocsp`): each served certificate's status, fetched from
//! its CA's responder before a client needs it and sent in the handshake, so
//! that clients need not ask the CA themselves (a privacy leak and a delay)
//! and certificates marked must-staple work.
//!
//! - [`answer`]: the request for one certificate and the checks an answer
//!   passes before it is stapled;
//! - [`stapler`]: the task that fetches, refreshes, saves and drops them;
//! - [`Staples`]: what handshakes read, one atomic load, keyed by the leaf
//!   certificate itself (so a staple follows its certificate whatever alias,
//!   upload, ACME or default serves it, and a replaced certificate is never
//!   served its predecessor's staple).
//!
//! A responder that fails or hangs never touches a handshake: handshakes only
//! read what the stapler has; the last good answer is stapled until its
//! `nextUpdate`, then none is.

pub mod answer;
pub mod stapler;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::pki_types::CertificateDer;
use rustls::sign::CertifiedKey;
use serde::Deserialize;

use crate::keyed::Keyed;

/// `tls.ocsp`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OcspSettings {
    /// Fetch and staple. Off by default: it makes the router call each CA's
    /// responder (plain HTTP, from the router's own address), which an
    /// operator opens egress for; nginx's and HAProxy's are off by default too.
    pub stapling: bool,
    /// The most one fetch may take (connect, request, answer).
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// The longest a staple goes unrefreshed (HAProxy's
    /// `tune.ssl.ocsp-update.maxdelay`): an answer is fetched again halfway
    /// through its validity, and at least this often, so a revocation is
    /// stapled within this time of the responder saying so.
    #[serde(with = "humantime_serde")]
    pub refresh: Duration,
    /// After a failed fetch, the wait before the next; doubled on each failure
    /// in a row, up to `refresh`.
    #[serde(with = "humantime_serde")]
    pub retry: Duration,
}

impl Default for OcspSettings {
    fn default() -> OcspSettings {
        OcspSettings {
            stapling: false,
            timeout: Duration::from_secs(10),
            refresh: Duration::from_secs(3600),
            retry: Duration::from_secs(60),
        }
    }
}

/// The least time between two fetches for one certificate (HAProxy's
/// `tune.ssl.ocsp-update.mindelay`): a responder answering with a short
/// validity is not asked more often than this.
pub const MIN_REFRESH: Duration = Duration::from_secs(300);

/// One stapled answer.
#[derive(Debug)]
pub struct Staple {
    /// The DER answer, as the responder sent it.
    pub der: Vec<u8>,
    pub current: answer::Current,
}

/// The staples handshakes read: leaf certificate → its answer.
#[derive(Debug, Default)]
pub struct Staples {
    live: ArcSwap<Keyed<CertificateDer<'static>, Arc<Staple>>>,
}

impl Staples {
    /// `key` with its staple, if its leaf has one (no staples: `key` as it is,
    /// for one atomic load).
    #[inline]
    pub fn staple(&self, key: Arc<CertifiedKey>) -> Arc<CertifiedKey> {
        let map = self.live.load();
        if map.is_empty() || key.ocsp.is_some() {
            return key;
        }
        match key.cert.first().and_then(|leaf| map.get(leaf)) {
            Some(s) => Arc::new(CertifiedKey {
                cert: key.cert.clone(),
                key: key.key.clone(),
                ocsp: Some(s.der.clone()),
            }),
            None => key,
        }
    }

    /// The staple of `leaf`, if any.
    pub fn get(&self, leaf: &CertificateDer<'static>) -> Option<Arc<Staple>> {
        self.live.load().get(leaf).cloned()
    }

    pub fn len(&self) -> usize {
        self.live.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts (or replaces) `leaf`'s staple; the stapler is the one writer.
    fn put(&self, leaf: CertificateDer<'static>, staple: Staple) {
        let staple = Arc::new(staple);
        self.live.rcu(|m| m.update(leaf.clone(), staple.clone()));
    }

    /// Drops every staple whose answer is no longer current at `now`.
    fn expire(&self, now: u64) -> Vec<CertificateDer<'static>> {
        let map = self.live.load();
        let gone: Vec<_> = map
            .iter()
            .filter(|(_, s)| s.current.next_update <= now)
            .map(|(l, _)| l.clone())
            .collect();
        if !gone.is_empty() {
            self.live.rcu(|m| {
                let mut m = (**m).clone();
                for l in &gone {
                    m.remove(l);
                }
                m
            });
        }
        gone
    }
}
