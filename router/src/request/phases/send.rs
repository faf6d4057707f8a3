//! The send phase: the request as the member gets it ([`prepare`]: origin
//! form, the endpoint's path mappings, no hop-by-hop fields, the forwarding
//! fields and the trace context), its body read ahead before a member is
//! involved ([`Proxy::read_body`]), encoded once for an HTTP/1.1 member
//! ([`encoded`], sent by [`crate::upstream`]'s connection, again as it was
//! if the retry decision allows) or sent as an upgrade
//! ([`Proxy::upgrade_on`]; an h2 member's exchange is [`super::h2_member`]).

use bytes::Bytes;
use h1_codec::fields::{Fields, FieldsRef};
use http::header::{self, HeaderValue};
use http::{Request, Response, Uri, Version};
use hyper::body::Body as _;
use hyper::body::Incoming;

use super::error::ProxyError;
use super::h2_member::wants_trailers;
use h1_codec::encode::request::RequestLine;

use super::headers::forwarding::set_forwarded;
use super::headers::member_head::{encode_for_member, encode_map_for_member};
use super::headers::{remove_underscored, wants_upgrade};
use super::retry::{Replay, idempotent};
use super::route::Destination;
use super::trace::Provenance;
use super::upload::{Received, read_now, read_rest};
use crate::metrics::UpstreamError;
use crate::policy::fields::{FieldRules, RequestSets};
use crate::policy::{Policy, Refused};
use crate::request::Proxy;
use crate::table::Target;
use crate::upstream::{Encoded, RequestBody, SendError, Upstream};
use h1_codec::hop::remove_hop_by_hop;

/// How a request goes to its member.
pub(in crate::request) enum Protocol {
    /// HTTP/1.1, its head written from the fields where they are.
    H1,
    /// A stream on the member's h2 connection (the app's members speak h2);
    /// `trailers`: the client asked for them (gRPC).
    H2 { trailers: bool },
    /// An HTTP/1.1 upgrade (WebSocket) on a fresh connection of its own,
    /// with the client's side of the upgrade.
    Upgrade(hyper::upgrade::OnUpgrade),
}

/// What [`prepare`] hands on: how the request goes, and its body (taken out to
/// go its own way; the head stays boxed, see [`Proxy::answer`]).
pub(in crate::request) type Prepared = (Protocol, Received);

/// The request as its member gets it, from the client's request (`raw`: its
/// fields as they came, on the own HTTP/1.1 path) to its destination's
/// `target`.
pub(in crate::request) fn prepare(
    (req, raw): (&mut Request<Received>, &mut Option<Fields>),
    to: &Destination<'_>,
    target: &Target,
    from: Provenance<'_>,
) -> Result<Prepared, ProxyError> {
    let (host, h2_members) = (to.host, to.h2_members());
    let fields = FieldsRef::of(req, raw.as_ref());
    let upgrade = req.version() == Version::HTTP_11 && wants_upgrade(fields);
    let trailers = h2_members && wants_trailers(fields);
    // An HTTP/1.1 member's head is written from the fields where they are
    // (`encode`); hyper's clients (h2 members, upgrades) take a map.
    let written = !(h2_members || upgrade);
    plain_or_map(req, raw, !written);
    request_actions((req, raw), to, from);
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut *req));
    let body = std::mem::replace(req.body_mut(), Received::Read(Bytes::new()));
    for_member(req, (host, &to.rewrite), target, from, (upgrade, written))?;
    let protocol = match client_upgrade {
        Some(client_upgrade) => Protocol::Upgrade(client_upgrade),
        None if h2_members => Protocol::H2 { trailers },
        None => Protocol::H1,
    };
    Ok((protocol, body))
}

/// The app's request actions (see [`crate::policy::fields`]): on the
/// client's fields as they came when the head is written from them (the
/// fields they touch taken out; what they set is written after them, see
/// [`request_sets`]: no map is built), else on the request's map.
fn request_actions(
    (req, raw): (&mut Request<Received>, &mut Option<Fields>),
    to: &Destination<'_>,
    from: Provenance<'_>,
) {
    let Some(rules) = request_rules(to) else {
        return;
    };
    match raw.as_mut() {
        Some(fields) => rules.on_raw_request(fields),
        None => {
            let vars = super::context::vars_of(from, Some(&to.route), &to.name);
            rules.on_request(req.headers_mut(), &vars);
        }
    }
}

/// The field rules of `to`'s app when it has request actions.
fn request_rules<'a>(to: &'a Destination<'_>) -> Option<&'a FieldRules> {
    let rules = to.policy.as_ref()?.fields.as_deref()?;
    rules.on_requests().then_some(rules)
}

/// What `to`'s app's request actions set, for a request from `from`, if it
/// has request actions: written after the client's fields as they came.
pub(in crate::request) fn request_sets<'a>(
    to: &'a Destination<'_>,
    from: Provenance<'a>,
) -> Option<RequestSets<'a>> {
    let rules = request_rules(to)?;
    let vars = super::context::vars_of(from, Some(&to.route), &to.name);
    Some(RequestSets { rules, vars })
}

impl Proxy {
    /// The request's body as the member gets it: whole already (the common case:
    /// no future), or read ahead, boxed (a body still arriving is the rare case;
    /// a slow client gets 408 without holding a member's slot).
    /// `policy`'s `max_request_body_bytes` holds for a body of no declared
    /// length (a declared one over it was refused already): past it within
    /// the part read ahead, refused (413) before any member is involved;
    /// past it later, the body is cut there (see
    /// [`crate::upstream::ClientBody::limited`]).
    pub(in crate::request) async fn read_body(
        &self,
        body: Received,
        policy: Option<&Policy>,
    ) -> Result<RequestBody, ProxyError> {
        let limit = policy.map_or(0, |p| p.max_body);
        match read_now(body, &self.upload) {
            Ok(whole) => Ok(whole),
            Err(arriving) => Box::pin(read_rest(arriving, &self.upload, limit))
                .await
                .map_err(|kind| match (kind, policy) {
                    (UpstreamError::ClientBodyTooLarge, Some(p)) => {
                        self.refused(p, Refused::BodyTooLarge)
                    }
                    _ => self.fail(kind),
                }),
        }
    }

    /// One upgrade request on `up`: the member's answer, its failure, or `None`
    /// when no answer came within `timeout`.
    pub(in crate::request) async fn upgrade_on(
        &self,
        target: &Target,
        up: Upstream,
        req: Request<RequestBody>,
        timeout: std::time::Duration,
    ) -> Result<Response<Incoming>, Option<SendError>> {
        match tokio::time::timeout(timeout, up.send_upgrade(&target.member.addr, req)).await {
            Ok(r) => r.map_err(Some),
            Err(_) => Err(None),
        }
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
pub(in crate::request) fn encoded(
    (req, body): (Box<Request<Received>>, RequestBody),
    raw: Option<(&Fields, Option<&RequestSets<'_>>)>,
    from: Provenance<'_>,
    host: &HeaderValue,
) -> (Encoded, Replay) {
    let idempotent = idempotent(req.method());
    let request = encode(req, body, raw, from, host);
    let exact = request.has_no_body();
    (request, Replay::Request { idempotent, exact })
}

fn encode(
    req: Box<Request<Received>>,
    body: RequestBody,
    raw: Option<(&Fields, Option<&RequestSets<'_>>)>,
    from: Provenance<'_>,
    host: &HeaderValue,
) -> Encoded {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let line = RequestLine {
        method: req.method(),
        target,
    };
    let Some((fields, added)) = raw else {
        let body_len = (!body.is_end_stream()).then(|| body.size_hint().exact());
        let mut head = Vec::with_capacity(512 + cert_len(from));
        let framing = encode_map_for_member(line, req.headers(), body_len, from, host, &mut head);
        return Encoded::with(head, framing, req.method(), body);
    };
    // Room for what the router adds (forwarding, request ID, trace context,
    // the client's certificate): the head is not grown as it is written.
    let mut head = Vec::with_capacity(fields.head_len() + 384 + cert_len(from));
    encode_for_member(line, (fields, added), from, host, &mut head);
    Encoded::from_head(head, req.method(), body)
}

/// What the client's certificate adds to a member's head (none without one).
fn cert_len(from: Provenance<'_>) -> usize {
    let cert = from.conn.client_cert.as_ref();
    cert.map_or(0, |c| c.lines_len())
}

/// The request as the member gets it: origin-form (HTTP/1.1 clients normally sent
/// exactly that; the Host then is the client's, untouched; for h2 and absolute-form
/// it is the authority, RFC 9112 §3.2.2), the name's path rule's rewrite, the
/// endpoint's path mappings (direct
/// routing), HTTP/1.1, no hop-by-hop headers, `Forwarded`/`X-Forwarded-*` set
/// (`written`: the head is written for an HTTP/1.1 member from the fields
/// where they are, and both are done as it is written, see
/// [`encode_for_member`] and [`encode_map_for_member`]).
fn for_member<B>(
    req: &mut Request<B>,
    (host, rewrite): (&HeaderValue, &Option<crate::table::paths::Rewrite>),
    target: &Target,
    from: Provenance<'_>,
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
    if let Some((len, to)) = rewrite {
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let path = crate::table::paths::rewritten(path, (*len, to));
        *req.uri_mut() = Uri::try_from(path).map_err(|_| ProxyError::BadTarget)?;
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
        set_forwarded(headers, from.conn, host);
        from.trace.set_in(headers);
    }
    Ok(())
}

/// The deadlines of one request: the app's own, else the configuration's.
#[derive(Clone, Copy)]
pub(in crate::request) struct Timeouts {
    pub(in crate::request) response: std::time::Duration,
    pub(in crate::request) tunnel_idle: std::time::Duration,
}

impl Timeouts {
    pub(in crate::request) fn of(proxy: &Proxy, policy: Option<&Policy>) -> Timeouts {
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
