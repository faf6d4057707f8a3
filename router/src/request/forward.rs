//! A request's way to a member and back, in phases, each in the file named for
//! it: routed ([`super::route`]: host, route, policy, the affinity cookie's
//! member) → admitted and picked ([`super::checkout`]) → the request as the
//! member gets it (here) → checked out (a slot and a connection, on another
//! member if nothing was sent: [`super::checkout`]) → attempted (here, inline: as
//! a function of its own, moving its future and results cost 1 000 instructions
//! a request; a second attempt as the one retry decision says,
//! [`super::retry`]) → answered ([`super::respond`]). h2 members and WebSocket
//! upgrades take the same phases.

use std::sync::Arc;

use bytes::Bytes;

use h1_codec::fields::{Fields, FieldsRef};
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, Uri, Version};
use hyper::body::Body as _;
use per_source::ClientKey;

use super::body::ProxyBody;
use super::checkout::{H1Checkout, H2Checkout};
use super::error::ProxyError;
use super::h2_member::wants_trailers;
use super::headers::{
    ClientConn, encode_for_member, encode_map_for_member, remove_hop_by_hop, remove_underscored,
    set_forwarded, wants_upgrade,
};
use super::retry::{Reached, Replay, Retry, decide, idempotent};
use super::route::{Destination, Routed, Sticky};
use super::trace::Trace;
use super::upload::{Received, read_now, read_rest};
use super::{Forwarded, Proxy};
use crate::members::MemberSlot;
use crate::metrics::UpstreamError;
use crate::metrics::apps::AppTraffic;
use crate::policy::Policy;
use crate::policy::clients::ClientSlot;
use crate::table::{Route, Target};
use crate::upstream::{Encoded, MemberHead, RequestBody, SendError, Upstream};
use h1_codec::request::framing_is_clear;

impl Proxy {
    pub(super) async fn forward(
        &self,
        conn: &ClientConn,
        mut req: Box<Request<Received>>,
        host: Option<HeaderValue>,
        mut raw: Option<Fields>,
        (trace, app): (&Trace, &mut Option<Arc<AppTraffic>>),
    ) -> Result<Forwarded, ProxyError> {
        // The request's fields: in its map, or as they came (`raw`: the own path).
        let fields = raw
            .as_ref()
            .map_or(FieldsRef::Map(req.headers()), FieldsRef::Raw);
        // 0. method and framing; 1-2. host and route (or a redirect to HTTPS).
        refuse_early(&req, fields)?;
        let host = host.ok_or(ProxyError::BadHost)?;
        // An ACME CA checking an order of ours: answered before routing and redirects.
        if let Some(answer) = self.acme_answer(conn, req.uri().path()) {
            return Ok(answer);
        }
        let Routed::To(Destination {
            route,
            name,
            policy,
            sticky,
        }) = self.route_of(conn, fields, &host)?
        else {
            return Ok(self.redirect_of(&req, &host));
        };
        *app = Some(route.traffic.clone());
        // 3. admit (the app's policy), then pick: the cookie's member if eligible.
        let (hold, target, source) =
            self.admit_and_pick(conn, fields, &route, (policy.as_deref(), &sticky))?;
        let sni: &str = &name; // what TLS members are asked for (SNI) and verified against
        // 4. the request as the member gets it
        let upgrade = req.version() == Version::HTTP_11 && wants_upgrade(fields);
        let h2 = policy.as_ref().is_some_and(|p| p.h2);
        let trailers = h2 && wants_trailers(fields);
        plain_or_map(&mut req, &mut raw, h2 || upgrade);
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut *req));
        // The body goes its own way; the head stays boxed (see `Proxy::answer`).
        let body = std::mem::replace(req.body_mut(), Received::Read(Bytes::new()));
        // An HTTP/1.1 member's head is written from the fields where they are
        // (`encode`); hyper's clients (h2 members, upgrades) take a map.
        let written = !(h2 || upgrade);
        for_member(&mut req, &host, &target, (conn, trace), (upgrade, written))?;
        // 5. body: read ahead before a member is involved.
        let body = self.read_body(body).await?;
        let timeouts = Timeouts::of(self, policy.as_deref());
        // 6-8 over h2 for apps whose members speak it (no upgrade there), boxed:
        // that future is not part of every HTTP/1.1 request's.
        if h2 && !upgrade {
            let sticky = (policy.as_deref(), &sticky, conn.https);
            return Box::pin(self.forward_h2(
                (&route, target, sni, source),
                (req.into_parts().0, body),
                (trailers, timeouts.response),
                (sticky, hold),
            ))
            .await;
        }
        // 6. slot and connection (an upgrade takes a fresh connection of its own),
        // on another member if nothing was sent to this one.
        let fresh = client_upgrade.is_some();
        let how = H1Checkout { sni, source, fresh };
        let (mut target, (mut slot, mut up)) = match self.checkout_now(&target, &how) {
            Some(now) => (target, now),
            None => Box::pin(self.checkout_or_other(&route, target, req.method(), how)).await?,
        };
        if let Some(client_upgrade) = client_upgrade {
            return Box::pin(self.send_upgrade(
                (req.into_parts().0, body, client_upgrade),
                (&route, sni, source),
                (target, slot, up),
                conn,
                (timeouts, hold),
            ))
            .await;
        }
        // 7. send; once more if the retry decision allows (exactly as encoded: only
        // without a body). Inline: as an async fn, 1 000 instructions more a request.
        let (mut request, replay) = encoded((req, body), raw.as_ref(), (conn, trace), &host);
        let mut result = up
            .send(&target.member.addr, &mut request, timeouts.response)
            .await;
        let retry = retry_of(&result, replay);
        if retry != Retry::No {
            // Boxed: the rare path's future is not part of every request's.
            result = Box::pin(self.attempt_again(
                (retry, replay),
                (&route, sni, source),
                (&mut target, &mut slot, &mut up),
                (&mut request, timeouts.response),
            ))
            .await?;
        }
        let response = self.answered(&target, result)?;
        drop(route);
        // 8. respond (with a new affinity cookie unless the request's named this member)
        let sticky = (policy.as_deref(), &sticky, conn.https);
        Ok(self.respond_h1(response, sticky, (target, slot, up), hold))
    }

    /// The request's body as the member gets it: whole already (the common case:
    /// no future), or read ahead, boxed (a body still arriving is the rare case;
    /// a slow client gets 408 without holding a member's slot).
    async fn read_body(&self, body: Received) -> Result<RequestBody, ProxyError> {
        match read_now(body, &self.upload) {
            Ok(whole) => Ok(whole),
            Err(arriving) => Box::pin(read_rest(arriving, &self.upload))
                .await
                .map_err(|kind| self.fail(kind)),
        }
    }

    /// The second attempt the retry decision allowed after the first failed
    /// (`retry`): on a new connection to the same member (the reused one had
    /// been closed by it), or on another member (a fresh connection closed: the
    /// member is going away); the request sent again as it was encoded.
    async fn attempt_again(
        &self,
        (retry, replay): (Retry, Replay),
        (route, sni, source): (&Route, &str, (ClientKey, usize)),
        (target, slot, up): (&mut Target, &mut MemberSlot, &mut Upstream),
        (request, timeout): (&mut Encoded, std::time::Duration),
    ) -> Result<Result<MemberHead, Option<SendError>>, ProxyError> {
        *up = self
            .connect_again((retry, replay), (route, sni, source), (target, slot), false)
            .await?;
        request.rewind();
        Ok(up.send(&target.member.addr, request, timeout).await)
    }

    /// The connection a second attempt goes on, as `retry` says: a new one to
    /// the same member, or (if that fails too, or the decision says so) one to
    /// another member of the route, `target` and `slot` moved to it. `fresh`: a
    /// connection of its own, never one from the idle pool (an upgrade's).
    pub(super) async fn connect_again(
        &self,
        (retry, replay): (Retry, Replay),
        (route, sni, source): (&Route, &str, (ClientKey, usize)),
        (target, slot): (&mut Target, &mut MemberSlot),
        fresh: bool,
    ) -> Result<Upstream, ProxyError> {
        self.metrics.retries.inc();
        let again = match retry {
            Retry::SameMember => Box::pin(self.connect(target, sni, source.1)).await,
            _ => Err(self.failed(&target.member, UpstreamError::Reset)),
        };
        match again {
            Ok(up) => Ok(up),
            Err(e) if decide(e.reached(), replay) == Retry::OtherMember => {
                let other = route.pick_other(&target.member).ok_or(e)?.clone();
                let (s, u) = self.checkout(&other, sni, source, fresh).await?;
                (*target, *slot) = (other, s);
                Ok(u)
            }
            Err(e) => Err(e),
        }
    }

    /// A request to an app whose members speak h2: checked out on `target` (or
    /// another member, when nothing was sent), exchanged, and answered as over
    /// HTTP/1.1 (`sticky`: the policy, what the cookie said, whether HTTPS).
    async fn forward_h2(
        &self,
        (route, target, sni, source): (&Route, Target, &str, (ClientKey, usize)),
        (parts, body): (http::request::Parts, RequestBody),
        (trailers, timeout): (bool, std::time::Duration),
        ((policy, sticky, https), hold): ((Option<&Policy>, &Sticky, bool), Option<ClientSlot>),
    ) -> Result<Forwarded, ProxyError> {
        let how = H2Checkout { sni, source };
        let method = parts.method.clone();
        let (target, (slot, send)) = self.checkout_or_other(route, target, &method, how).await?;
        let response = self
            .exchange_h2(&target, send, (parts, body), (trailers, timeout))
            .await?;
        let (mut parts, body) = response.into_parts();
        self.respond_head(&mut parts.headers, (policy, sticky), &target, https);
        let response = Response::from_parts(parts, ProxyBody::detached(body));
        Ok(Forwarded::of(response, Some(slot), hold))
    }
}

/// What the one retry decision says of an attempt's result.
fn retry_of(result: &Result<MemberHead, Option<SendError>>, replay: Replay) -> Retry {
    match result {
        Err(Some(e)) => decide(Reached::from(e), replay),
        _ => Retry::No,
    }
}

/// Fields as they came go on as they are only to an HTTP/1.1 member in origin
/// form (`other`: an h2 member or an upgrade, which hyper's clients send):
/// otherwise they are put in the request's map first.
fn plain_or_map(req: &mut Request<Received>, raw: &mut Option<Fields>, other: bool) {
    if (other || req.uri().authority().is_some())
        && let Some(fields) = raw.take()
    {
        *req.headers_mut() = fields.to_map(6);
    }
}

/// The request encoded once for an HTTP/1.1 member: from the client's fields
/// as they came (`raw`), or from its map; and whether it may be sent again
/// (the one retry decision's input: idempotent, and exactly as encoded only
/// without a body).
fn encoded(
    (req, body): (Box<Request<Received>>, RequestBody),
    raw: Option<&Fields>,
    conn: (&ClientConn, &Trace),
    host: &HeaderValue,
) -> (Encoded, Replay) {
    let idempotent = idempotent(req.method());
    let request = encode(req, body, raw, conn, host);
    let exact = request.has_no_body();
    (request, Replay::Request { idempotent, exact })
}

fn encode(
    req: Box<Request<Received>>,
    body: RequestBody,
    raw: Option<&Fields>,
    conn: (&ClientConn, &Trace),
    host: &HeaderValue,
) -> Encoded {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let Some(fields) = raw else {
        let body_len = (!body.is_end_stream()).then(|| body.size_hint().exact());
        let mut head = Vec::with_capacity(512);
        let framing = encode_map_for_member(
            (req.method(), target),
            req.headers(),
            body_len,
            conn,
            host,
            &mut head,
        );
        return Encoded::with(head, framing, req.method(), body);
    };
    // Room for what the router adds (forwarding, request ID, trace context).
    let mut head = Vec::with_capacity(fields.head_len() + 384);
    encode_for_member((req.method(), target), fields, conn, host, &mut head);
    Encoded::from_head(head, req.method(), body)
}

/// What is refused before the host is even read: `CONNECT` (405: a reverse proxy
/// opens no tunnels to arbitrary places) and an ambiguous body length (a
/// smuggling attempt; h2 has none).
fn refuse_early(req: &Request<Received>, fields: FieldsRef<'_>) -> Result<(), ProxyError> {
    if req.method() == Method::CONNECT {
        return Err(ProxyError::MethodNotAllowed);
    }
    if req.version() < Version::HTTP_2 && !framing_is_clear(fields, req.version()) {
        return Err(ProxyError::BadFraming);
    }
    Ok(())
}

/// The deadlines of one request: the app's own, else the configuration's.
#[derive(Clone, Copy)]
pub(super) struct Timeouts {
    pub(super) response: std::time::Duration,
    pub(super) tunnel_idle: std::time::Duration,
}

impl Timeouts {
    pub(super) fn of(proxy: &Proxy, policy: Option<&Policy>) -> Timeouts {
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
/// routing), HTTP/1.1, no hop-by-hop headers, `Forwarded`/`X-Forwarded-*` set
/// (`written`: the head is written for an HTTP/1.1 member from the fields
/// where they are, and both are done as it is written, see
/// [`encode_for_member`] and [`encode_map_for_member`]).
fn for_member<B>(
    req: &mut Request<B>,
    host: &HeaderValue,
    target: &Target,
    (conn, trace): (&ClientConn, &Trace),
    (upgrade, written): (bool, bool),
) -> Result<(), ProxyError> {
    if req.uri().scheme().is_some() || req.uri().authority().is_some() {
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        *req.uri_mut() = Uri::try_from(path).map_err(|_| ProxyError::BadTarget)?;
        req.headers_mut().insert(header::HOST, host.clone());
    }
    if !req.uri().path().starts_with('/') {
        return Err(ProxyError::BadTarget);
    }
    if let Some(mappings) = &target.mappings
        && let Some(path) = req
            .uri()
            .path_and_query()
            .and_then(|p| mappings.rewrite(p.as_str()))
    {
        *req.uri_mut() = Uri::try_from(path).map_err(|_| ProxyError::BadTarget)?;
    }
    *req.version_mut() = Version::HTTP_11;
    if !written {
        let headers = req.headers_mut();
        remove_hop_by_hop(headers, upgrade);
        remove_underscored(headers);
        set_forwarded(headers, conn, host);
        trace.set_in(headers);
    }
    Ok(())
}
