//! Forwarding a request to a member, retried as the one retry decision says
//! ([`super::retry`]). The other member is chosen by the route's own balancer
//! ([`Route::pick_other`]): the same health, rotate and `fail_open` rules as the
//! first pick. WebSocket upgrades follow the same rules.

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use per_source::ClientKey;

use super::body::ProxyBody;
use super::error::ProxyError;
use super::h2_member::wants_trailers;
use super::headers::{
    ClientConn, framing_is_clear, remove_hop_by_hop, set_forwarded, wants_upgrade,
};
use super::retry::{Reached, Replay, Retry, decide};
use super::route::normalize_host;
use super::tunnel::Tunnel;
use super::upload::{Received, read_ahead};
use super::{Forwarded, Proxy};
use crate::members::{Full, InFlight, Member};
use crate::metrics::{AffinityResult, UpstreamError};
use crate::policy::affinity::Affinity;
use crate::policy::clients::Hold;
use crate::policy::{Policy, Refused};
use crate::table::{Route, Target};
use crate::upstream::{Encoded, Lease, MemberTls, RequestBody, Upstream};

impl Proxy {
    pub(super) async fn forward(
        &self,
        conn: &ClientConn,
        mut req: Request<Received>,
        host: Option<HeaderValue>,
    ) -> Result<Forwarded, ProxyError> {
        // 0. method and framing; 1-2. host and route (or a redirect to HTTPS).
        refuse_early(&req)?;
        let host = host.ok_or(ProxyError::BadHost)?;
        let Routed::To(To {
            route,
            name,
            policy,
            sticky,
        }) = self.route_of(conn, &req, &host)?
        else {
            return Ok(self.redirect_of(&req, &host));
        };
        // Whose share of a member's slots the request counts in (and whose app
        // limits), and whose idle member connections it may reuse.
        let client = conn.client(req.headers());
        let source = (client.key, conn.worker);
        // 3. admit (the app's policy), then pick: the cookie's member if eligible
        let hold = match &policy {
            Some(p) => p
                .admit(&route.app, client, &self.clients)
                .map_err(|r| self.refused(p, r))?,
            None => None,
        };
        let target: Target = match &sticky {
            Sticky::Kept(t) => t.clone(),
            _ => route.pick().ok_or(ProxyError::NoMember)?.clone(),
        };
        // The name TLS members are asked for (SNI) and verified against.
        let sni: &str = &name;

        // 4. the request as the member gets it
        let upgrade = req.version() == Version::HTTP_11 && wants_upgrade(req.headers());
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let h2 = policy.as_ref().is_some_and(|p| p.h2);
        let trailers = h2 && wants_trailers(req.headers());
        let (mut parts, body) = req.into_parts();
        for_member(&mut parts, &host, &target, conn, upgrade)?;
        // 5. body: read ahead before a member is involved (slow clients get 408
        // without holding a member's slot).
        let body = read_ahead(body, &self.upload)
            .await
            .map_err(|kind| self.fail(kind))?;
        let timeouts = Timeouts::of(self, policy.as_deref());
        // 6-7 over h2 for apps whose members speak it (no upgrade there: h2
        // members take WebSocket over h2 streams, not HTTP/1.1 upgrades).
        if h2 && !upgrade {
            // A slot and a connection on another member if nothing was sent to
            // this one, as for HTTP/1.
            let method = parts.method.clone();
            let how = H2Checkout { sni, source };
            let (target, (slot, send)) =
                self.checkout_or_other(&route, target, &method, how).await?;
            let response = Box::pin(self.exchange_h2(
                &target,
                send,
                (parts, body),
                (trailers, timeouts.response),
            ))
            .await?;
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers, false);
            if let Some(affinity) = policy.as_ref().and_then(|p| p.affinity.as_ref()) {
                self.stick(affinity, &sticky, &target, &mut parts.headers, conn.https);
            }
            return Ok(Forwarded {
                response: Response::from_parts(parts, ProxyBody::detached(body)),
                in_flight: Some(slot),
                member: None,
                hold,
            });
        }
        // 6. slot and connection (an upgrade takes a fresh connection of its own),
        // on another member if nothing was sent to this one.
        let fresh = client_upgrade.is_some();
        let how = H1Checkout { sni, source, fresh };
        let (mut target, checked) = self
            .checkout_or_other(&route, target, &parts.method, how)
            .await?;
        let (mut slot, mut up) = checked;
        let request = Request::from_parts(parts, body);
        if let Some(client_upgrade) = client_upgrade {
            return self
                .send_upgrade(
                    request,
                    client_upgrade,
                    (target, slot, up),
                    conn,
                    (timeouts, hold),
                )
                .await;
        }
        // 7. send; on a failure the retry decision allows, once more (on a new
        // connection to the same member, or on another member). Only a request
        // that can be sent again exactly may be replayed: its head is encoded
        // once and, without a body, is all of it. (Inline: as an async fn of its own,
        // moving its future and its results cost 1 000 instructions a request.)
        let idempotent = idempotent(request.method());
        let mut request = Encoded::new(request);
        let replay = Replay::Request {
            idempotent,
            exact: request.has_no_body(),
        };
        let mut result = up
            .send(&target.member.addr, &mut request, timeouts.response)
            .await;
        let retry = match &result {
            Err(Some(e)) => decide(Reached::from(e), replay),
            _ => Retry::No,
        };
        if retry != Retry::No {
            self.metrics.retries.inc();
            let again = match retry {
                Retry::SameMember => Box::pin(self.connect(&target, sni, source.1)).await,
                // A fresh connection closed: the member is going away.
                _ => Err(self.failed(&target.member, UpstreamError::Reset)),
            };
            up = match again {
                Ok(up) => up,
                Err(e) if decide(e.reached(), replay) == Retry::OtherMember => {
                    let other = route.pick_other(&target.member).ok_or(e)?.clone();
                    let (s, u) = self.checkout(&other, sni, source, false).await?;
                    (target, slot) = (other, s);
                    u
                }
                Err(e) => return Err(e),
            };
            request.rewind();
            result = up
                .send(&target.member.addr, &mut request, timeouts.response)
                .await;
        }
        let response = match result {
            Ok(r) => r,
            Err(None) => return Err(self.failed(&target.member, UpstreamError::ResponseTimeout)),
            Err(Some(e)) => {
                tracing::debug!(error = %e, "upstream request failed");
                return Err(self.failed(&target.member, e.kind()));
            }
        };
        target.member.health.record_success();
        drop(route);
        // 8. respond (with a new affinity cookie unless the request's named this member)
        let (mut parts, ()) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers, false);
        if let Some(affinity) = policy.as_ref().and_then(|p| p.affinity.as_ref()) {
            self.stick(affinity, &sticky, &target, &mut parts.headers, conn.https);
        }
        let body = ProxyBody::upstream(Lease::new(up, target.member.pool.clone()));
        Ok(Forwarded {
            response: Response::from_parts(parts, body),
            in_flight: Some(slot),
            member: None,
            hold,
        })
    }

    /// Counts what affinity did and sets the cookie for the member that answered,
    /// unless the request's cookie named it already.
    fn stick(
        &self,
        affinity: &Affinity,
        sticky: &Sticky,
        target: &Target,
        headers: &mut http::HeaderMap,
        https: bool,
    ) {
        let id = target.member.affinity_id(affinity.key());
        let result = match sticky {
            Sticky::Kept(t) if t.member.affinity_id(affinity.key()) == id => {
                self.metrics.affinity(AffinityResult::Kept);
                return;
            }
            Sticky::Kept(_) | Sticky::Moved => AffinityResult::Moved,
            Sticky::None => AffinityResult::New,
        };
        self.metrics.affinity(result);
        if let Some(cookie) = affinity.set_cookie(id, https) {
            headers.append(header::SET_COOKIE, cookie);
        }
    }

    /// Counts a policy's refusal, by app and reason.
    fn refused(&self, policy: &Policy, r: Refused) -> ProxyError {
        self.metrics
            .app_refused
            .with_label_values(&[&*policy.label, r.reason()])
            .inc();
        ProxyError::Refused(r)
    }

    /// The route for the request's host, after the checks that need no member: a
    /// valid host, a certificate that serves it, no passthrough name on a
    /// terminated connection; with it, from the same table, the app's policy and
    /// the member its affinity cookie names. Plain HTTP for a host with a
    /// certificate may be answered with a redirect to HTTPS.
    fn route_of<'h>(
        &self,
        conn: &ClientConn,
        req: &Request<Received>,
        host: &'h HeaderValue,
    ) -> Result<Routed<'h>, ProxyError> {
        let name = host
            .to_str()
            .ok()
            .and_then(normalize_host)
            .ok_or(ProxyError::BadHost)?;
        // A connection coalesced across names (h2) or made for another name: only
        // where this connection's certificate is the one the name would get.
        if let (Some(served), Some(certs)) = (&conn.served, &self.certs)
            && !certs.load().serves(served, &name)
        {
            return Err(ProxyError::Misdirected);
        }
        // One table load; the guard is dropped before any await.
        let table = self.table.load();
        let mut route = table.route_for(&name).ok_or(ProxyError::NoRoute)?;
        let mut policy = table.policy_for(&route.app);
        let mut sticky = Sticky::None;
        if let Some(affinity) = policy.and_then(|p| p.affinity.as_ref())
            && let Some(id) = affinity.requested(req.headers())
        {
            // The cookie's member in this route, or in another app of a split.
            let split = table.split_apps(&name);
            let found = std::iter::once(route).chain(split).find_map(|r| {
                r.members
                    .iter()
                    .find(|t| t.member.eligible() && t.member.affinity_id(affinity.key()) == id)
                    .map(|t| (r, t))
            });
            sticky = match found {
                Some((r, t)) => {
                    if !Arc::ptr_eq(r, route) {
                        (route, policy) = (r, table.policy_for(&r.app));
                    }
                    Sticky::Kept(t.clone())
                }
                None => Sticky::Moved,
            };
        }
        let (route, policy) = (route.clone(), policy.cloned());
        drop(table);
        // Names whose TLS the gear terminates are relayed before any handshake: a
        // request for one on a connection we terminated was coalesced here (h2).
        if route.passthrough && conn.https {
            return Err(ProxyError::Misdirected);
        }
        if !conn.https
            && let Some(redirect) = &self.redirect
            && redirect.covers(&route, &name)
        {
            return Ok(Routed::Redirect);
        }
        Ok(Routed::To(To {
            route,
            name,
            policy,
            sticky,
        }))
    }

    /// The redirect to HTTPS [`Proxy::route_of`] decided on.
    fn redirect_of(&self, req: &Request<Received>, host: &HeaderValue) -> Forwarded {
        let name = host
            .to_str()
            .ok()
            .and_then(normalize_host)
            .unwrap_or_default();
        let response = match &self.redirect {
            Some(r) => r.response(req, &name),
            None => ProxyError::NoRoute.response(),
        };
        Forwarded {
            response,
            in_flight: None,
            member: None,
            hold: None,
        }
    }

    /// An upgrade request (WebSocket) sent on its fresh connection; the member's
    /// answer, or on 101 the tunnel (see [`Proxy::upgraded`]).
    async fn send_upgrade(
        &self,
        req: Request<RequestBody>,
        client_upgrade: hyper::upgrade::OnUpgrade,
        (target, slot, up): (Target, InFlight, Upstream),
        conn: &ClientConn,
        (timeouts, hold): (Timeouts, Option<Hold>),
    ) -> Result<Forwarded, ProxyError> {
        let member = target.member;
        let response = match tokio::time::timeout(
            timeouts.response,
            Box::pin(up.send_upgrade(&member.addr, req)),
        )
        .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(self.failed(&member, e.kind())),
            Err(_) => return Err(self.failed(&member, UpstreamError::ResponseTimeout)),
        };
        member.health.record_success();
        Ok(self.upgraded(
            response,
            client_upgrade,
            slot,
            conn,
            (timeouts.tunnel_idle, hold),
        ))
    }

    /// A slot and a connection on `target` (HTTP/1.1 or h2, as `how` says); if
    /// that fails before anything was sent and the retry decision allows, once
    /// more on another member of the route (counted in
    /// `router_upstream_retries_total`). The one place both member protocols
    /// move to another member; generic, so each protocol's checkout is inline
    /// (an enum of the two cost 300 instructions a request in moves).
    async fn checkout_or_other<K: Checkout>(
        &self,
        route: &Route,
        target: Target,
        method: &Method,
        how: K,
    ) -> Result<(Target, K::Out), ProxyError> {
        match how.on(self, &target).await {
            Ok(done) => Ok((target, done)),
            Err(e)
                if decide(
                    e.reached(),
                    Replay::Request {
                        idempotent: idempotent(method),
                        exact: false,
                    },
                ) == Retry::OtherMember =>
            {
                let other = route.pick_other(&target.member).ok_or(e)?.clone();
                self.metrics.retries.inc();
                let done = how.on(self, &other).await?;
                Ok((other, done))
            }
            Err(e) => Err(e),
        }
    }

    /// The answer to an upgrade request: on 101, a tunnel between the two upgraded
    /// connections (its slot turned into a tunnel count while it lives); otherwise
    /// the member's answer as it is.
    fn upgraded(
        &self,
        mut response: Response<Incoming>,
        client_upgrade: hyper::upgrade::OnUpgrade,
        slot: InFlight,
        conn: &ClientConn,
        (idle_timeout, hold): (std::time::Duration, Option<Hold>),
    ) -> Forwarded {
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers, false);
            return Forwarded {
                response: Response::from_parts(parts, ProxyBody::detached(body)),
                in_flight: Some(slot),
                member: None,
                hold,
            };
        }
        let tunnel = Tunnel {
            member: slot.member().addr.clone(),
            slot: slot.into_tunnel(),
            connection: conn.activity.clone(),
            idle_timeout,
            hold,
        };
        let member_upgrade = hyper::upgrade::on(&mut response);
        let member = tunnel.member.clone();
        tokio::spawn(tunnel.run(client_upgrade, member_upgrade));
        let (mut parts, _) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers, true);
        Forwarded {
            response: Response::from_parts(parts, ProxyBody::empty()),
            in_flight: None,
            member: Some(member),
            hold: None,
        }
    }

    /// A slot and a connection on `target`: an idle one unless `fresh` is asked
    /// for (a TLS member's idle connection only if made for the same name).
    /// `source`: the client's key (its share of slots) and the worker serving
    /// it (whose idle connections it may reuse).
    async fn checkout(
        &self,
        target: &Target,
        sni: &str,
        (source, worker): (ClientKey, usize),
        fresh: bool,
    ) -> Result<(InFlight, Upstream), ProxyError> {
        let member = &target.member;
        let slot = self.slot(target, (source, worker)).await?;
        let idle = (!fresh)
            .then(|| member.pool.take_idle(worker))
            .flatten()
            .filter(|up| !target.tls || up.sni() == Some(sni));
        let up = match idle {
            Some(idle) => idle,
            // Boxed: a new connection is the rare case on kept-alive pools, and its
            // future (TLS, handshake: 1.5 KB) would otherwise be part of every
            // request's future, copied into each h2 stream's task.
            None => Box::pin(self.connect(target, sni, worker)).await?,
        };
        Ok((slot, up))
    }

    /// How to reach `target`'s member: TLS (asking for `sni`) or plain.
    pub(super) fn member_tls<'a>(
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
    pub(super) async fn slot(
        &self,
        target: &Target,
        (source, _worker): (ClientKey, usize),
    ) -> Result<InFlight, ProxyError> {
        let member = &target.member;
        if member.full() {
            self.metrics.queue_waits.inc();
        }
        member
            .acquire(self.queue_timeout, Some(source))
            .await
            .map_err(|full| {
                self.fail(match full {
                    Full::Member => UpstreamError::Busy,
                    Full::Source => UpstreamError::SourceShare,
                })
            })
    }

    /// A new connection to `target`'s member, opened on worker `worker`.
    async fn connect(
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
    pub(super) fn failed(&self, member: &Member, kind: UpstreamError) -> ProxyError {
        member.stats.record_failure();
        if kind.members_fault() {
            member.health.record_failure();
        }
        self.fail(kind)
    }

    pub(super) fn fail(&self, kind: UpstreamError) -> ProxyError {
        self.metrics.upstream_error(kind);
        ProxyError::Upstream(kind)
    }
}

/// What is refused before the host is even read: `CONNECT` (405: a reverse proxy
/// opens no tunnels to arbitrary places) and an ambiguous body length (a
/// smuggling attempt; h2 has none).
fn refuse_early(req: &Request<Received>) -> Result<(), ProxyError> {
    if req.method() == Method::CONNECT {
        return Err(ProxyError::MethodNotAllowed);
    }
    if req.version() < Version::HTTP_2 && !framing_is_clear(req.headers(), req.version()) {
        return Err(ProxyError::BadFraming);
    }
    Ok(())
}

/// Where [`Proxy::route_of`] sends a request.
enum Routed<'h> {
    To(To<'h>),
    /// Nowhere: the answer is a redirect to HTTPS.
    Redirect,
}

/// A routed request: its route, the host name (normalised), the app's policy and
/// what its affinity cookie said.
struct To<'h> {
    route: Arc<Route>,
    name: std::borrow::Cow<'h, str>,
    policy: Option<Arc<Policy>>,
    sticky: Sticky,
}

/// The member a request's affinity cookie names.
enum Sticky {
    /// No affinity, or no valid cookie.
    None,
    /// Eligible: the request goes there.
    Kept(Target),
    /// Not eligible (down, rotated out, gone): the balancer picks, a new cookie.
    Moved,
}

/// How a request checks out a member (a slot and a connection), one kind per
/// member protocol.
trait Checkout {
    type Out;
    async fn on(&self, proxy: &Proxy, target: &Target) -> Result<Self::Out, ProxyError>;
}

/// A slot and an HTTP/1.1 connection (`fresh`: a new one, for an upgrade).
struct H1Checkout<'a> {
    sni: &'a str,
    source: (ClientKey, usize),
    fresh: bool,
}

impl Checkout for H1Checkout<'_> {
    type Out = (InFlight, Upstream);
    async fn on(&self, proxy: &Proxy, target: &Target) -> Result<Self::Out, ProxyError> {
        proxy
            .checkout(target, self.sni, self.source, self.fresh)
            .await
    }
}

/// A slot and the member's shared h2 connection.
struct H2Checkout<'a> {
    sni: &'a str,
    source: (ClientKey, usize),
}

impl Checkout for H2Checkout<'_> {
    type Out = (InFlight, super::h2_member::H2Sender);
    async fn on(&self, proxy: &Proxy, target: &Target) -> Result<Self::Out, ProxyError> {
        // Boxed: its future (connect, TLS, h2 handshake) would otherwise be
        // part of every request's future, copied on every HTTP/1.1 request.
        Box::pin(proxy.h2_checkout(target, (self.sni, self.source))).await
    }
}

/// The deadlines of one request: the app's own, else the configuration's.
#[derive(Clone, Copy)]
struct Timeouts {
    response: std::time::Duration,
    tunnel_idle: std::time::Duration,
}

impl Timeouts {
    fn of(proxy: &Proxy, policy: Option<&Policy>) -> Timeouts {
        Timeouts {
            response: policy
                .and_then(|p| p.response_timeout)
                .unwrap_or(proxy.response_timeout),
            tunnel_idle: policy
                .and_then(|p| p.tunnel_idle_timeout)
                .unwrap_or(proxy.tunnel_idle_timeout),
        }
    }
}

/// The request as the member gets it: origin-form (HTTP/1.1 clients normally sent
/// exactly that; the Host then is the client's, untouched; for h2 and absolute-form
/// it is the authority, RFC 9112 §3.2.2), the endpoint's path mappings (direct
/// routing), HTTP/1.1, no hop-by-hop headers, `Forwarded`/`X-Forwarded-*` set.
fn for_member(
    parts: &mut http::request::Parts,
    host: &HeaderValue,
    target: &Target,
    conn: &ClientConn,
    upgrade: bool,
) -> Result<(), ProxyError> {
    if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        parts.uri = Uri::try_from(path).map_err(|_| ProxyError::BadTarget)?;
        parts.headers.insert(header::HOST, host.clone());
    }
    if !parts.uri.path().starts_with('/') {
        return Err(ProxyError::BadTarget);
    }
    if let Some(mappings) = &target.mappings
        && let Some(path) = parts
            .uri
            .path_and_query()
            .and_then(|p| mappings.rewrite(p.as_str()))
    {
        parts.uri = Uri::try_from(path).map_err(|_| ProxyError::BadTarget)?;
    }
    parts.version = Version::HTTP_11;
    remove_hop_by_hop(&mut parts.headers, upgrade);
    set_forwarded(&mut parts.headers, conn, host);
    Ok(())
}

/// RFC 9110 §9.2.2.
fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}
