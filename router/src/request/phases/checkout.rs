//! The checkout phase: a request's member, picked ([`Destination::pick`]: the
//! affinity cookie's if it is eligible, else the route's balancer's) and
//! checked out: a slot on it (within its client key's share)
//! and a connection to it (HTTP/1.1 from the pool, or the member's shared h2
//! connection); on another member of the route when nothing was sent and the one
//! retry decision allows ([`super::retry`]). The other member is chosen by the
//! route's own balancer ([`Route::pick_other`]): the same health, rotate and
//! `fail_open` rules as the first pick.
//!
//! One word, one meaning: to *check out* is to get a slot on a member and a
//! connection to it. How is a [`Checkout`] (HTTP/1.1, h2, raw TCP);
//! [`Proxy::h1_checkout`] and [`Proxy::h2_checkout`] do it for each member
//! protocol ([`Proxy::h1_checkout_at_once`]: without waiting, the common
//! case), and [`Proxy::checkout_or_other`] / [`Proxy::checkout_or_else`] move
//! to another member when the first fails before anything was sent.

use h1_codec::fields::{FieldsRef, Name};
use http::Method;
use per_source::ClientKey;

use super::admit::Requester;

use super::error::ProxyError;
use super::retry::{Replay, Retry, decide, idempotent};
use super::route::{Destination, Sticky};
use crate::members::{Full, Member, MemberSlot};
use crate::metrics::UpstreamError;
use crate::policy::{HashBy, Picking};
use crate::request::Proxy;
use crate::table::balance::Balance;
use crate::table::{Route, Target, hash};
use crate::upstream::{MemberTls, Upstream};

impl Proxy {
    /// A slot and a connection on `target` (HTTP/1.1 or h2, as `how` says); if
    /// that fails before anything was sent and the retry decision allows, once
    /// more on another member of the route (counted in
    /// `router_upstream_retries_total`). The one place both member protocols
    /// move to another member; generic, so each protocol's checkout is inline
    /// (an enum of the two cost 300 instructions a request in moves).
    pub(in crate::request) async fn checkout_or_other<K: Checkout>(
        &self,
        route: &Route,
        target: Target,
        method: &Method,
        how: K,
    ) -> Result<(Target, K::Out), ProxyError> {
        let replay = Replay::Request {
            idempotent: idempotent(method),
            exact: false,
        };
        let other = |not: &Member| route.pick_other(not).cloned();
        self.checkout_or_else(target, (replay, other), how).await
    }

    /// [`Proxy::checkout_or_other`] for anything: `replay` says what the client's
    /// side allows (an HTTP request, or raw bytes nobody has sent yet), `other`
    /// picks the member to try instead of the one that failed. HTTP requests
    /// sent again are counted in `router_upstream_retries_total`.
    pub(crate) async fn checkout_or_else<K: Checkout>(
        &self,
        target: Target,
        (replay, other): (Replay, impl FnOnce(&Member) -> Option<Target>),
        how: K,
    ) -> Result<(Target, K::Out), ProxyError> {
        match how.on(self, &target).await {
            Ok(done) => Ok((target, done)),
            Err(e) if decide(e.reached(), replay) == Retry::OtherMember => {
                let other = other(&target.member).ok_or(e)?;
                if matches!(replay, Replay::Request { .. }) {
                    self.metrics.retries.inc();
                }
                let done = how.on(self, &other).await?;
                Ok((other, done))
            }
            Err(e) => Err(e),
        }
    }

    /// A slot and a connection on `target`: an idle one unless `fresh` is asked
    /// for (a TLS member's idle connection only if made for the same name).
    /// `source`: the client's key (its share of slots) and the worker serving
    /// it (whose idle connections it may reuse).
    pub(in crate::request) async fn h1_checkout(
        &self,
        target: &Target,
        sni: &str,
        source: Requester,
        fresh: bool,
    ) -> Result<(MemberSlot, Upstream), ProxyError> {
        let member = &target.member;
        let slot = self.slot(target, source.key).await?;
        let idle = (!fresh)
            .then(|| member.pool.take_idle(source.worker))
            .flatten()
            .filter(|up| !target.tls || up.sni() == Some(sni));
        let up = match idle {
            Some(idle) => idle,
            // Boxed: a new connection is the rare case on kept-alive pools, and its
            // future (TLS, handshake: 1.5 KB) would otherwise be part of every
            // request's future, copied into each h2 stream's task.
            None => Box::pin(self.connect(target, sni, source.worker)).await?,
        };
        Ok((slot, up))
    }

    /// [`Proxy::h1_checkout`] when it needs no wait: a free slot and an idle
    /// connection at hand (the common case on a kept-alive pool). `None`: the
    /// caller takes the waiting way ([`Proxy::checkout_or_other`]), whose
    /// future (1.3 KB: the slot's waits, the connect) is then boxed, not part
    /// of every request's future (a request's future is copied into its box
    /// whole: 4 KB before).
    pub(in crate::request) fn h1_checkout_at_once(
        &self,
        target: &Target,
        how: &H1Checkout<'_>,
    ) -> Option<(MemberSlot, Upstream)> {
        if how.fresh {
            return None;
        }
        let Requester { key, worker } = how.source;
        let slot = target.member.try_acquire(Some(key))?;
        let up = target
            .member
            .pool
            .take_idle(worker)
            .filter(|up| !target.tls || up.sni() == Some(how.sni))?;
        Some((slot, up))
    }

    /// How to reach `target`'s member: TLS (asking for `sni`) or plain.
    pub(in crate::request) fn member_tls<'a>(
        &'a self,
        target: &Target,
        sni: &'a str,
    ) -> Result<Option<MemberTls<'a>>, ProxyError> {
        match (&self.member_tls, target.tls) {
            (Some(connector), true) => Ok(Some(MemberTls {
                connector,
                host: sni,
            })),
            // ssl_to_gear members expect TLS; plain HTTP would be garbage to them.
            (None, true) => Err(self.fail(UpstreamError::Tls)),
            (_, false) => Ok(None),
        }
    }

    /// One of `target`'s in-flight slots, waiting up to `upstream.queue_timeout`
    /// (and within the client's share of them).
    pub(in crate::request) async fn slot(
        &self,
        target: &Target,
        key: ClientKey,
    ) -> Result<MemberSlot, ProxyError> {
        let member = &target.member;
        if member.full() {
            self.metrics.queue_waits.inc();
        }
        member
            .acquire(self.queue_timeout, Some(key))
            .await
            .map_err(|full| {
                self.fail(match full {
                    Full::Member => UpstreamError::Busy,
                    Full::Source => UpstreamError::SourceShare,
                })
            })
    }

    /// A new connection to `target`'s member, opened on worker `worker`.
    pub(in crate::request) async fn connect(
        &self,
        target: &Target,
        sni: &str,
        worker: usize,
    ) -> Result<Upstream, ProxyError> {
        let tls = self.member_tls(target, sni)?;
        target
            .member
            .pool
            .connect(self.upstream, tls, worker)
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "upstream connect failed");
                self.failed(&target.member, e.kind())
            })
    }

    /// An error that says something about the member's health: connection
    /// failures and resets count towards passive ejection (never the client's
    /// faults: see [`UpstreamError::ClientBody`]). Counted in the member's stats.
    pub(in crate::request) fn failed(&self, member: &Member, kind: UpstreamError) -> ProxyError {
        member.stats.record_failure();
        if kind.members_fault() {
            member.health.record_failure();
        }
        self.fail(kind)
    }

    pub(in crate::request) fn fail(&self, kind: UpstreamError) -> ProxyError {
        self.metrics.upstream_error(kind);
        ProxyError::Upstream(kind)
    }
}

/// How a request checks out a member (a slot and a connection), one kind per
/// member protocol.
pub(crate) trait Checkout {
    type Out;
    async fn on(&self, proxy: &Proxy, target: &Target) -> Result<Self::Out, ProxyError>;
}

/// A slot and an HTTP/1.1 connection (`fresh`: a new one, for an upgrade).
pub(in crate::request) struct H1Checkout<'a> {
    pub(in crate::request) sni: &'a str,
    pub(in crate::request) source: Requester,
    pub(in crate::request) fresh: bool,
}

impl<'a> H1Checkout<'a> {
    /// A connection from the member's idle pool, or a new one.
    pub(in crate::request) fn pooled(sni: &'a str, source: Requester) -> H1Checkout<'a> {
        H1Checkout {
            sni,
            source,
            fresh: false,
        }
    }
}

impl Checkout for H1Checkout<'_> {
    type Out = (MemberSlot, Upstream);
    async fn on(&self, proxy: &Proxy, target: &Target) -> Result<Self::Out, ProxyError> {
        proxy
            .h1_checkout(target, self.sni, self.source, self.fresh)
            .await
    }
}

/// A slot and the member's shared h2 connection.
pub(in crate::request) struct H2Checkout<'a> {
    pub(in crate::request) sni: &'a str,
    pub(in crate::request) source: Requester,
}

impl Checkout for H2Checkout<'_> {
    type Out = (MemberSlot, super::h2_member::H2Sender);
    async fn on(&self, proxy: &Proxy, target: &Target) -> Result<Self::Out, ProxyError> {
        // Boxed: its future (connect, TLS, h2 handshake) would otherwise be
        // part of every request's future, copied on every HTTP/1.1 request.
        Box::pin(proxy.h2_checkout(target, (self.sni, self.source))).await
    }
}

/// A slot and a raw TCP connection (TLS passthrough, `tcp.listen` ports).
pub(crate) struct TcpCheckout {
    pub(crate) source: per_source::ClientKey,
}

impl Checkout for TcpCheckout {
    type Out = (MemberSlot, tokio::net::TcpStream);
    async fn on(&self, proxy: &Proxy, target: &Target) -> Result<Self::Out, ProxyError> {
        let slot = proxy.slot(target, self.source).await?;
        match target.member.pool.dial(proxy.upstream).await {
            Ok(stream) => Ok((slot, stream)),
            Err(e) => Err(proxy.failed(&target.member, e.kind())),
        }
    }
}

impl Destination<'_> {
    /// The member the request goes to: the one its affinity cookie names if
    /// that is eligible, else its app's own balancer's pick (`balance`: hashed
    /// on the request's key, see [`crate::table::hash`]; a request without the
    /// key goes to the route's balancer), else the route's (none: 503).
    /// `fields` and `client`: the request's, for a hashed app's key.
    #[inline]
    pub(in crate::request) fn pick(
        &self,
        fields: FieldsRef<'_>,
        client: ClientKey,
    ) -> Result<Target, ProxyError> {
        if let Sticky::Kept(t) = &self.sticky {
            return Ok(t.clone());
        }
        let route = &self.route;
        let picked = match self.policy.as_ref().and_then(|p| p.balance.as_ref()) {
            None => route.pick(),
            Some(Picking::LeastRequest) => route.pick_by(Balance::P2c),
            Some(Picking::RoundRobin) => route.pick_by(Balance::RoundRobin),
            Some(Picking::Hash(by)) => match hash_key(by, fields, client) {
                Some(key) => route.pick_hashed(key),
                None => route.pick(),
            },
        };
        Ok(picked.ok_or(ProxyError::NoMember)?.clone())
    }
}

/// A hashed app's key for a request, hashed: its client key, the first value
/// of its header, or its cookie's value; `None` without one.
fn hash_key(by: &HashBy, fields: FieldsRef<'_>, client: ClientKey) -> Option<u64> {
    match by {
        // The key's first address (its prefix's, for IPv6) stands for it.
        HashBy::Source => Some(match client.addr() {
            std::net::IpAddr::V4(a) => hash::key_hash(&a.octets()),
            std::net::IpAddr::V6(a) => hash::key_hash(&a.octets()),
        }),
        HashBy::Header(name) => {
            let value = match fields {
                FieldsRef::Raw(f) => f
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name.as_str().as_bytes()))
                    .map(|(_, v)| v),
                FieldsRef::Map(m) => m.get(name).map(|v| v.as_bytes()),
            }?;
            Some(hash::key_hash(value))
        }
        HashBy::Cookie(name) => fields
            .values(Name::Cookie)
            .flat_map(|v| v.split(|b| *b == b';'))
            .find_map(|pair| pair.trim_ascii().strip_prefix(&**name)?.strip_prefix(b"="))
            .map(hash::key_hash),
    }
}
