//! The request path: route a client's request to a member and stream the answer back.
//!
//! In order ([`Proxy::response`]):
//! 1. **host**: the Host header (HTTP/1.1) or `:authority` (h2), lower-cased, port and
//!    trailing dot stripped; none or malformed → 400; over TLS, a host whose
//!    certificate is not the one the connection presented → 421;
//! 2. **route**: one load of the live table; unknown host → 404;
//! 3. **pick**: a member (see [`crate::table::balance`]); none → 503;
//! 4. **body**: a request body is read ahead up to `limits.body_buffer_bytes` before
//!    a member is involved (see [`upload`]); too slow → 408, malformed → 400;
//! 5. **slot and connection**: a free in-flight slot on that member (waiting briefly;
//!    none → 503) and an idle or new connection. If that fails, nothing was sent: an
//!    idempotent request tries once more on another member;
//! 6. **forward**: the same method, path and query, Host and headers (minus hop-by-hop,
//!    plus `X-Forwarded-*`) on a kept-alive HTTP/1.1 connection to `address:port`
//!    (see [`crate::upstream`]);
//!    refused/reset → 502, connect or response-header timeout → 504. An idempotent
//!    request without a body whose reused connection closed before any response
//!    byte is sent once more (on a new connection, or on another member if that one
//!    now refuses). Connection failures and resets count towards the member's
//!    passive ejection (see [`crate::members::health`]);
//! 7. **respond**: stream the member's response back (minus hop-by-hop headers); a
//!    `101 Switching Protocols` becomes a byte tunnel between the two upgraded
//!    connections (WebSocket).
//!
//! Every error becomes a response in one place, [`ProxyError::response`]. If the
//! client goes away mid-request, the connection (hyper's, or the own HTTP/1.1
//! path in [`h1`]) drops this future: on HTTP/1 that closes the
//! member connection (it is not reused), on h2 it resets only that stream.

pub mod accept;
pub mod access_log;
pub mod activity;
pub mod body;
pub mod checkout;
pub mod client_io;
pub mod drain;
pub mod error;
pub mod forward;
pub mod h1;
pub mod h2_member;
pub mod headers;
pub mod lifecycle;
pub mod limits;
pub mod listener;
pub mod own_waker;
pub mod passthrough;
pub mod respond;
pub mod retry;
pub mod route;
pub mod trace;
pub mod tunnel;
pub mod upload;

use std::convert::Infallible;

use h1_codec::fields::{Fields, FieldsRef, Name};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::{Request, Response};

use self::access_log::AccessRecord;
use self::body::{Completion, ProxyBody};
use self::headers::ClientConn;
use self::route::{Redirect, host_of};
use self::trace::Trace;
use self::upload::{Received, UploadSettings};
use crate::members::MemberSlot;
use crate::metrics::Metrics;
use crate::metrics::apps::AppTraffic;
use crate::table::RouteTable;
use crate::upstream::ConnectSettings;

pub use self::error::ProxyError;

/// Everything the request path needs, shared by all connections.
pub struct Proxy {
    pub table: Arc<ArcSwap<RouteTable>>,
    /// TLS towards `ssl_to_gear` members.
    pub member_tls: Option<tokio_rustls::TlsConnector>,
    /// Plain HTTP → HTTPS for hosts with a certificate (`tls.redirect_http`).
    pub redirect: Option<Redirect>,
    pub upstream: ConnectSettings,
    pub metrics: Arc<Metrics>,
    pub response_timeout: Duration,
    pub queue_timeout: Duration,
    pub upload: UploadSettings,
    /// An upgraded tunnel with no byte either way for this long is closed.
    pub tunnel_idle_timeout: Duration,
    /// `Forwarded` and the trust rule for the client's forwarding headers.
    pub forwarded: headers::ForwardedSettings,
    /// The live certificates (HTTPS): a request for a host whose certificate is not
    /// the connection's is 421.
    pub certs: Option<Arc<ArcSwap<crate::tls::store::Certs>>>,
    pub access_log: bool,
    /// Per-client state of the apps' limits (see [`crate::policy::clients`]).
    pub clients: Arc<crate::policy::clients::Clients>,
    /// `Alt-Svc` for HTTPS responses over TCP when the HTTP/3 listener is on and
    /// `http3.alt_svc` is (see [`crate::quic`]).
    pub alt_svc: Option<http::HeaderValue>,
    /// HTTP-01 answers of ACME orders in flight (`acme.directory` set), served on
    /// plain HTTP before routing (see [`crate::issuer`]).
    pub acme: Option<Arc<acme::Challenges>>,
}

/// A request that got no answer from a member: the router's own response
/// (with the request's ID), counted against the app when a member failed.
fn failed(e: &ProxyError, app: Option<&AppTraffic>, trace: &Trace) -> Forwarded {
    if let (ProxyError::Upstream(_), Some(app)) = (e, app) {
        app.upstream_error();
    }
    Forwarded::of(e.response(Some(trace.request_id.as_str())), None, None)
}

/// What forwarding produced besides the response.
struct Forwarded {
    response: Response<ProxyBody>,
    in_flight: Option<MemberSlot>,
    /// The member that answered when no slot travels with the response (an upgraded
    /// tunnel holds its slot itself), for the access log.
    member: Option<Arc<str>>,
    /// The request's count against its app's `max_connections_per_client`.
    hold: Option<crate::policy::clients::ClientSlot>,
    /// An HTTP/1.1 member's fields as they came (see [`Answer`]).
    fields: Option<Fields>,
}

/// A request's answer: the response and, when an HTTP/1.1 member gave it, the
/// member's fields as they came. The response's own map then holds only what
/// the router adds (the affinity cookie, `Connection: close`, `Alt-Svc`): the
/// own HTTP/1.1 path writes both without building a map of the member's
/// ([`h1`]); every other server gets one map ([`Proxy::response`]).
pub struct Answer {
    pub response: Response<ProxyBody>,
    pub fields: Option<Fields>,
    /// The request's ID (see [`trace`]), returned to the client as
    /// `X-Request-Id`: written by the own HTTP/1.1 path, put in the map for
    /// every other server.
    pub request_id: trace::RequestId,
}

impl Forwarded {
    /// A member's answer, with the slot that travels with it.
    fn of(
        response: Response<ProxyBody>,
        in_flight: Option<MemberSlot>,
        hold: Option<crate::policy::clients::ClientSlot>,
    ) -> Forwarded {
        Forwarded {
            response,
            in_flight,
            member: None,
            hold,
            fields: None,
        }
    }
}

impl Proxy {
    /// What the router adds to a response's head: `Connection: close` when the
    /// HTTP/1 connection ends after it (never on a 101, which becomes a
    /// tunnel the drain leaves alone), `Alt-Svc` for the HTTP/3 listener.
    fn router_fields(&self, response: &mut Response<ProxyBody>, closing: bool, announce_h3: bool) {
        if closing && response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        if announce_h3 && let Some(alt_svc) = &self.alt_svc {
            response
                .headers_mut()
                .insert(http::header::ALT_SVC, alt_svc.clone());
        }
    }

    /// Serves one request for a server that takes a response with one map of
    /// its fields (hyper's h2 and HTTP/1, h3's); never fails (errors are
    /// responses).
    pub async fn response(
        self: Arc<Self>,
        conn: Arc<ClientConn>,
        req: Request<Received>,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let Answer {
            mut response,
            fields,
            request_id,
        } = self.answer(conn, Box::new(req), None).await;
        if let Some(fields) = fields {
            headers::member_map(&fields, response.headers_mut());
        }
        response
            .headers_mut()
            .insert(trace::X_REQUEST_ID, request_id.header_value());
        Ok(response)
    }

    /// Serves one request: the response, and an HTTP/1.1 member's fields as
    /// they came (see [`Answer`]). `raw`: the request's fields as they came
    /// (the own HTTP/1.1 path), its map then empty; they go to an HTTP/1.1
    /// member without a map built. The request comes boxed: an `async fn`
    /// holds its arguments twice (as given, and as locals once it runs), and
    /// each phase moves it on; boxed, each of those is a word, not 264 bytes.
    pub async fn answer(
        self: Arc<Self>,
        conn: Arc<ClientConn>,
        req: Box<Request<Received>>,
        raw: Option<Fields>,
    ) -> Answer {
        let start = Instant::now();
        // Streams of one connection (h2, h3): no `Connection` header, waits on the
        // client's flow control tracked.
        let h2 = matches!(req.version(), http::Version::HTTP_2 | http::Version::HTTP_3);
        self.metrics.protocol(req.version());
        let mut active = conn.activity.begin(h2);
        let fields = raw
            .as_ref()
            .map_or(FieldsRef::Map(req.headers()), FieldsRef::Raw);
        let host = host_of(&req, fields);
        // The framing reader stops at a head naming an upgrade (what follows may
        // be a tunnel), so a connection whose upgrade did not happen must not
        // carry another request: it would reach hyper alone (found by the
        // `client_stream` fuzz target: a bare LF after a refused upgrade).
        let upgrade_asked = !h2 && fields.contains(Name::Upgrade);
        // A `close` the client asked for, read token by token from the bytes:
        // hyper skips a `Connection` value with a byte outside ASCII and would
        // read the next request (found by the `client_stream` fuzz target).
        let close_asked = !h2 && fields.values(Name::Connection).any(headers::says_close);
        // HTTPS over TCP announces the HTTP/3 listener (`http3.alt_svc`): decided
        // here, so that one flag, not the version and the connection kind, waits
        // across the forward.
        let announce_h3 =
            self.alt_svc.is_some() && conn.https && req.version() != http::Version::HTTP_3;
        // The app's counters, once the request is routed to one; its ID and
        // trace context.
        let mut app = None;
        let trace = Trace::of(fields, conn.trusted());
        let received = req.body().declared_len();
        let mut log = self
            .access_log
            .then(|| Box::new(AccessRecord::of(&req, conn.ip, host.as_ref())));
        let Forwarded {
            mut response,
            in_flight,
            member,
            hold,
            fields,
        } = match self
            .forward(&conn, req, host, raw, (&trace, &mut app))
            .await
        {
            Ok(f) => f,
            Err(e) => failed(&e, app.as_deref(), &trace),
        };
        // A request the router itself found malformed (400) ends its HTTP/1
        // connection, as nginx and haproxy end it: what follows on it was sent
        // by a client that frames requests otherwise (found by the
        // `client_stream` fuzz target: a request after two Hosts was served).
        let malformed = member.is_none()
            && in_flight.is_none()
            && response.status() == http::StatusCode::BAD_REQUEST;
        if let Some(log) = log.as_mut() {
            log.head = Some(start.elapsed());
            log.ids = Some(trace.clone());
            log.upstream = in_flight
                .as_ref()
                .map(|slot| slot.member().addr.clone())
                .or(member);
        }
        // Draining, an upgrade that did not happen, a close the client asked for,
        // or a malformed request: this HTTP/1 connection ends after this response.
        let closing = !h2 && (active.closing() || upgrade_asked || close_asked || malformed);
        self.router_fields(&mut response, closing, announce_h3);
        // The head is handed to hyper: on h2 it now waits on the client's window.
        active.wait_on_client();
        let completion = Completion {
            start,
            status: response.status().as_u16(),
            metrics: self.metrics.clone(),
            log,
            bytes: 0,
            aborted: false,
            in_flight,
            active: Some(active),
            hold,
            app,
            received,
        };
        let body = std::mem::replace(response.body_mut(), ProxyBody::empty());
        *response.body_mut() = body.with_completion(completion);
        Answer {
            response,
            fields,
            request_id: trace.request_id,
        }
    }
}
