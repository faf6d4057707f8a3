//! The request path: route a client's request to a member and stream the answer back.
//!
//! In order ([`Proxy::serve`]):
//! 1. **host**: the Host header (HTTP/1.1) or `:authority` (h2), lower-cased, port and
//!    trailing dot stripped; none or malformed → 400;
//! 2. **route**: one load of the live table; unknown host → 404;
//! 3. **pick**: a member (see [`crate::balance`]); none → 503;
//! 4. **slot and connection**: a free in-flight slot on that member (waiting briefly;
//!    none → 503) and an idle or new connection. If that fails, nothing was sent: an
//!    idempotent request tries once more on another member;
//! 5. **forward**: the same method, path and query, Host and headers (minus hop-by-hop,
//!    plus `X-Forwarded-*`) on a kept-alive HTTP/1.1 connection to `address:port`
//!    (see [`crate::upstream`]);
//!    refused/reset → 502, connect or response-header timeout → 504. An idempotent
//!    request without a body whose reused connection closed before any response
//!    byte is sent once more (on a new connection, or on another member if that one
//!    now refuses). Connection failures and resets count towards the member's
//!    passive ejection (see [`crate::health`]);
//! 6. **respond**: stream the member's response back (minus hop-by-hop headers); a
//!    `101 Switching Protocols` becomes a byte tunnel between the two upgraded
//!    connections (WebSocket).
//!
//! Every error becomes a response in one place, [`ProxyError::response`]. If the
//! client goes away mid-request, hyper drops this future: on HTTP/1 that closes the
//! member connection (it is not reused), on h2 it resets only that stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::{Body, Incoming};
use hyper_util::rt::TokioIo;

use crate::access_log::AccessRecord;
use crate::backend::InFlight;
use crate::body::{Completion, ProxyBody};
use crate::headers::{ClientConn, remove_hop_by_hop, set_forwarded, wants_upgrade};
use crate::metrics::{Metrics, UpstreamError};
use crate::table::{Member, Route, RouteTable, normalize_host};
use crate::tls::store::Certs;
use crate::upstream::{Lease, MemberTls, RequestBody, SendError, Settings, Upstream};

/// Why a request got no answer from a member.
#[derive(Debug)]
pub enum ProxyError {
    /// No Host (or `:authority`), or one no route could ever match.
    BadHost,
    /// A request target we cannot forward (e.g. `OPTIONS *`).
    BadTarget,
    /// No route for this host.
    NoRoute,
    /// The app is known but has no routable member.
    NoMember,
    Upstream(UpstreamError),
}

impl ProxyError {
    /// Nothing of the request reached a member: safe to try another one.
    pub fn nothing_sent(&self) -> bool {
        matches!(
            self,
            ProxyError::Upstream(
                UpstreamError::Connect | UpstreamError::ConnectTimeout | UpstreamError::Busy
            )
        )
    }

    /// The one place errors become responses.
    pub fn response(&self) -> Response<ProxyBody> {
        let (status, text) = match self {
            ProxyError::BadHost => (StatusCode::BAD_REQUEST, "missing or invalid Host\n"),
            ProxyError::BadTarget => (StatusCode::BAD_REQUEST, "invalid request target\n"),
            ProxyError::NoRoute => (StatusCode::NOT_FOUND, "no application for this host\n"),
            ProxyError::NoMember => (
                StatusCode::SERVICE_UNAVAILABLE,
                "application has no available backend\n",
            ),
            ProxyError::Upstream(kind) => match kind {
                // The member is full: like no member at all, try again later.
                UpstreamError::Busy => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "application backend is at capacity\n",
                ),
                UpstreamError::ConnectTimeout | UpstreamError::ResponseTimeout => (
                    StatusCode::GATEWAY_TIMEOUT,
                    "application backend timed out\n",
                ),
                UpstreamError::Connect
                | UpstreamError::Reset
                | UpstreamError::Protocol
                | UpstreamError::Tls => (StatusCode::BAD_GATEWAY, "application backend failed\n"),
                // Whose fault: the client's (its body broke off or was malformed).
                UpstreamError::ClientBody => (StatusCode::BAD_REQUEST, "request body failed\n"),
            },
        };
        let mut resp = Response::new(ProxyBody::full(text));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    }
}

/// Everything the request path needs, shared by all connections.
pub struct Proxy {
    pub table: Arc<ArcSwap<RouteTable>>,
    /// TLS towards `ssl_to_gear` members.
    pub member_tls: Option<tokio_rustls::TlsConnector>,
    /// Plain HTTP → HTTPS for hosts with a certificate (`tls.redirect_http`).
    pub redirect: Option<Redirect>,
    pub upstream: Settings,
    pub metrics: Arc<Metrics>,
    pub response_timeout: Duration,
    pub queue_timeout: Duration,
    pub access_log: bool,
}

/// Redirects plain HTTP to HTTPS for the hosts that have a certificate: an alias
/// with its own, or an app's generated names when a default (wildcard) certificate
/// is configured.
pub struct Redirect {
    pub https_port: u16,
    pub certs: Arc<ArcSwap<Certs>>,
}

impl Redirect {
    fn covers(&self, route: &Route, name: &str) -> bool {
        let certs = self.certs.load();
        certs.has_own(name) || (certs.has_default() && !route.aliases.iter().any(|a| a == name))
    }

    /// 301 for GET and HEAD, 308 otherwise (keeps the method and body).
    fn response<B>(&self, req: &Request<B>, name: &str) -> Response<ProxyBody> {
        let port = match self.https_port {
            443 => String::new(),
            p => format!(":{p}"),
        };
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let status = if matches!(*req.method(), Method::GET | Method::HEAD) {
            StatusCode::MOVED_PERMANENTLY
        } else {
            StatusCode::PERMANENT_REDIRECT
        };
        let mut resp = Response::new(ProxyBody::empty());
        *resp.status_mut() = status;
        if let Ok(v) = HeaderValue::from_str(&format!("https://{name}{port}{path}")) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
        resp
    }
}

/// What forwarding produced besides the response.
struct Forwarded {
    response: Response<ProxyBody>,
    in_flight: Option<InFlight>,
    /// The member that answered when no slot travels with the response (an upgraded
    /// tunnel holds its slot itself), for the access log.
    member: Option<Arc<str>>,
}

impl Proxy {
    /// Serves one request; never fails (errors are responses).
    pub async fn serve(
        self: Arc<Self>,
        conn: ClientConn,
        req: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let start = Instant::now();
        let host = host_of(&req);
        let mut log = self.access_log.then(|| AccessRecord {
            client: conn.ip,
            method: req.method().clone(),
            host: host
                .as_ref()
                .and_then(|h| h.to_str().ok().map(str::to_owned))
                .unwrap_or_default(),
            path: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.uri().to_string(), |p| p.as_str().to_owned()),
            version: req.version(),
            upstream: None,
        });
        let Forwarded {
            mut response,
            in_flight,
            member,
        } = match self.forward(conn, req, host).await {
            Ok(f) => f,
            Err(e) => Forwarded {
                response: e.response(),
                in_flight: None,
                member: None,
            },
        };
        if let Some(log) = log.as_mut() {
            log.upstream = in_flight
                .as_ref()
                .map(|slot| slot.backend().addr.clone())
                .or(member);
        }
        let completion = Completion {
            start,
            status: response.status().as_u16(),
            metrics: self.metrics.clone(),
            log,
            bytes: 0,
            aborted: false,
            in_flight,
        };
        let body = std::mem::replace(response.body_mut(), ProxyBody::empty());
        *response.body_mut() = body.with_completion(completion);
        Ok(response)
    }

    async fn forward(
        &self,
        conn: ClientConn,
        mut req: Request<Incoming>,
        host: Option<HeaderValue>,
    ) -> Result<Forwarded, ProxyError> {
        // 1. host
        let host = host.ok_or(ProxyError::BadHost)?;
        let name = host
            .to_str()
            .ok()
            .and_then(normalize_host)
            .ok_or(ProxyError::BadHost)?;
        // 2. route: one table load; the guard is dropped before any await.
        let route = self
            .table
            .load()
            .lookup(&name)
            .cloned()
            .ok_or(ProxyError::NoRoute)?;
        // Plain HTTP for a host with a certificate: to HTTPS, if so configured.
        if !conn.https
            && let Some(redirect) = &self.redirect
            && redirect.covers(&route, &name)
        {
            return Ok(Forwarded {
                response: redirect.response(&req, &name),
                in_flight: None,
                member: None,
            });
        }
        // 3. pick
        let member: Member = route.pick().ok_or(ProxyError::NoMember)?.clone();
        // The name TLS members are asked for (SNI) and verified against.
        let sni: &str = &name;

        // 5. forward (4, the slot and connection, once the request is ready)
        let upgrade = req.version() == Version::HTTP_11 && wants_upgrade(req.headers());
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        // Members get origin-form; HTTP/1.1 clients normally sent exactly that. The
        // Host then is the client's, untouched; for h2 and absolute-form it is the
        // authority (RFC 9112 §3.2.2).
        if parts.uri.scheme().is_some() || parts.uri.authority().is_some() {
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            parts.uri = Uri::try_from(path).map_err(|_| ProxyError::BadTarget)?;
            parts.headers.insert(header::HOST, host.clone());
        }
        if !parts.uri.path().starts_with('/') {
            return Err(ProxyError::BadTarget);
        }
        parts.version = Version::HTTP_11;
        remove_hop_by_hop(&mut parts.headers, upgrade);
        set_forwarded(&mut parts.headers, &conn, &host);

        if let Some(client_upgrade) = client_upgrade {
            let backend = &member.backend;
            let slot = self.slot(&member).await?;
            let up = self.connect(&member, sni).await?;
            let req = Request::from_parts(parts, RequestBody::Stream(body));
            let response = match tokio::time::timeout(
                self.response_timeout,
                up.send_upgrade(&backend.addr, req),
            )
            .await
            {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => return Err(self.failed(backend, e.kind())),
                Err(_) => return Err(self.fail(UpstreamError::ResponseTimeout)),
            };
            return Ok(self.upgraded(response, client_upgrade, slot, backend.addr.clone()));
        }
        // 4. slot and connection. Nothing has reached a member yet, so an idempotent
        // request whose member refused, timed out connecting or stayed full is tried
        // once on another member (the least busy other one).
        let (mut member, mut slot, mut up) = match self.checkout(&member, sni).await {
            Ok((slot, up)) => (member, slot, up),
            Err(e) if e.nothing_sent() && idempotent(&parts.method) => {
                let other = other_member(&route, &member).ok_or(e)?;
                self.metrics.retries.inc();
                let (slot, up) = self.checkout(&other, sni).await?;
                (other, slot, up)
            }
            Err(e) => return Err(e),
        };
        // Only a request that can be sent again exactly may be retried.
        let replay = (idempotent(&parts.method) && body.is_end_stream()).then(|| {
            (
                parts.method.clone(),
                parts.uri.clone(),
                parts.headers.clone(),
            )
        });
        let first = Request::from_parts(parts, RequestBody::Stream(body));
        let mut result = self.send(&mut up, &member.backend.addr, first).await;
        if let (Err(Some(e)), Some((method, uri, headers))) = (&result, replay)
            && e.closed_before_response()
        {
            self.metrics.retries.inc();
            // A reused connection closed under us is usually the member's keep-alive
            // timeout: a new connection to it. A fresh one closed (or a refused
            // reconnect) means the member is going away: another member.
            let fresh = if e.on_reused() {
                self.connect(&member, sni).await
            } else {
                Err(self.failed(&member.backend, UpstreamError::Reset))
            };
            up = match fresh {
                Ok(up) => up,
                Err(e)
                    if e.nothing_sent()
                        || matches!(e, ProxyError::Upstream(UpstreamError::Reset)) =>
                {
                    let other = other_member(&route, &member).ok_or(e)?;
                    let (s, u) = self.checkout(&other, sni).await?;
                    (member, slot) = (other, s);
                    u
                }
                Err(e) => return Err(e),
            };
            let mut again = Request::new(RequestBody::Empty);
            *again.method_mut() = method;
            *again.uri_mut() = uri;
            *again.headers_mut() = headers;
            result = self.send(&mut up, &member.backend.addr, again).await;
        }
        drop(route);
        let backend = &member.backend;
        let response = match result {
            Ok(r) => r,
            Err(None) => return Err(self.fail(UpstreamError::ResponseTimeout)),
            Err(Some(e)) => {
                tracing::debug!(error = %e, "upstream request failed");
                return Err(self.failed(backend, e.kind()));
            }
        };
        backend.record_success();

        // 6. respond
        let (mut parts, body) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers, false);
        let body = ProxyBody::upstream(Lease::new(body, up, backend.clone()));
        Ok(Forwarded {
            response: Response::from_parts(parts, body),
            in_flight: Some(slot),
            member: None,
        })
    }

    /// The answer to an upgrade request: on 101, a tunnel between the two upgraded
    /// connections (holding the member's slot while it lives); otherwise the member's
    /// answer as it is.
    fn upgraded(
        &self,
        mut response: Response<Incoming>,
        client_upgrade: hyper::upgrade::OnUpgrade,
        slot: InFlight,
        addr: Arc<str>,
    ) -> Forwarded {
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers, false);
            return Forwarded {
                response: Response::from_parts(parts, ProxyBody::detached(body)),
                in_flight: Some(slot),
                member: None,
            };
        }
        let member_upgrade = hyper::upgrade::on(&mut response);
        let member = addr.clone();
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::try_join!(client_upgrade, member_upgrade) {
                Ok((c, m)) => {
                    let (mut c, mut m) = (TokioIo::new(c), TokioIo::new(m));
                    if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut m).await {
                        tracing::debug!(member = %addr, error = %e, "upgraded tunnel ended");
                    }
                }
                Err(e) => tracing::debug!(member = %addr, error = %e, "upgrade failed"),
            }
        });
        let (mut parts, _) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers, true);
        Forwarded {
            response: Response::from_parts(parts, ProxyBody::empty()),
            in_flight: None,
            member: Some(member),
        }
    }

    /// A free in-flight slot on `member`, waiting at most `queue_timeout`.
    async fn slot(&self, member: &Member) -> Result<InFlight, ProxyError> {
        if member.backend.full() {
            self.metrics.queue_waits.inc();
        }
        member
            .backend
            .acquire(self.queue_timeout)
            .await
            .ok_or_else(|| self.fail(UpstreamError::Busy))
    }

    /// A slot and a connection (an idle one if there is one) on `member`. A TLS
    /// member's idle connection is used only if it was made for the same name.
    async fn checkout(
        &self,
        member: &Member,
        sni: &str,
    ) -> Result<(InFlight, Upstream), ProxyError> {
        let slot = self.slot(member).await?;
        let idle = member
            .backend
            .take_idle()
            .filter(|up| !member.tls || up.sni() == Some(sni));
        let up = match idle {
            Some(idle) => idle,
            None => self.connect(member, sni).await?,
        };
        Ok((slot, up))
    }

    async fn connect(&self, member: &Member, sni: &str) -> Result<Upstream, ProxyError> {
        let tls = match (&self.member_tls, member.tls) {
            (Some(connector), true) => Some(MemberTls {
                connector,
                host: sni,
            }),
            // ssl_to_gear members expect TLS; plain HTTP would be garbage to them.
            (None, true) => return Err(self.fail(UpstreamError::Tls)),
            (_, false) => None,
        };
        Upstream::connect(&member.backend, self.upstream, tls)
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, "upstream connect failed");
                self.failed(&member.backend, e.kind())
            })
    }

    /// Sends one request; `Err(None)` is the response-header timeout.
    async fn send(
        &self,
        up: &mut Upstream,
        addr: &Arc<str>,
        req: Request<RequestBody>,
    ) -> Result<Response<Incoming>, Option<SendError>> {
        match tokio::time::timeout(self.response_timeout, up.send(addr, req)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(Some(e)),
            Err(_) => Err(None),
        }
    }

    /// An error that says something about the member's health: connection
    /// failures and resets count towards passive ejection.
    fn failed(&self, backend: &crate::backend::Backend, kind: UpstreamError) -> ProxyError {
        if matches!(
            kind,
            UpstreamError::Connect | UpstreamError::ConnectTimeout | UpstreamError::Reset
        ) {
            backend.record_failure();
        }
        self.fail(kind)
    }

    fn fail(&self, kind: UpstreamError) -> ProxyError {
        self.metrics.upstream_error(kind);
        ProxyError::Upstream(kind)
    }
}

/// The least busy eligible member of `route` other than `not`, for a retry.
fn other_member(route: &Route, not: &Member) -> Option<Member> {
    route
        .members
        .iter()
        .filter(|m| !m.tls && m.backend.eligible() && !Arc::ptr_eq(&m.backend, &not.backend))
        .min_by_key(|m| m.backend.in_flight())
        .cloned()
}

/// The host the client addressed: `:authority` for h2 and absolute-form requests
/// (RFC 9112 §3.2.2: it wins over Host), else the one Host header. Several Host
/// headers are refused (RFC 9112 §3.2), as request smuggling relies on them.
fn host_of<B>(req: &Request<B>) -> Option<HeaderValue> {
    if let Some(authority) = req.uri().authority() {
        return HeaderValue::from_str(authority.as_str()).ok();
    }
    let mut all = req.headers().get_all(header::HOST).iter();
    match (all.next(), all.next()) {
        (Some(host), None) => Some(host.clone()),
        _ => None,
    }
}

/// RFC 9110 §9.2.2.
fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}
