//! What the phases of one request share ([`Context`], Pingora's per-request
//! `CTX`) and what its attempt produced ([`Reply`]): made when the head
//! arrives ([`Proxy::context`]), filled in by the phases as they run (the app
//! once routed), and read last by the log phase ([`super::log`]).

use std::sync::Arc;
use std::time::Instant;

use h1_codec::fields::{Fields, FieldsRef, Name};
use h1_codec::hop::says_close;
use http::header::HeaderValue;
use http::{Request, Response};

use super::access_log::AccessRecord;
use super::body::ProxyBody;
use super::error::ProxyError;
use super::route::Destination;
use super::trace::{Provenance, Trace};
use super::upload::Received;
use crate::members::MemberSlot;
use crate::metrics::apps::AppTraffic;
use crate::policy::Refused;
use crate::policy::clients::ClientSlot;
use crate::policy::fields::{FieldRules, Vars};
use crate::policy::pages::ErrorPages;
use crate::request::Proxy;
use crate::request::connection::activity::ActiveRequest;
use crate::request::connection::client_conn::ClientConn;
use crate::table::Route;
use compress::Asked;
use spans::{Moment, Sample, SpanRecord, Started};

/// One request's shared state, from its head to its log line. What a phase
/// produces for the next (the route, the member, the connection) is passed on
/// as a value instead; this holds only what more than one phase reads.
pub(in crate::request) struct Context<'c> {
    pub(in crate::request) conn: &'c ClientConn,
    /// When the head was read: the duration's start and `head_ms`'s.
    pub(in crate::request) start: Instant,
    /// Its ID and trace context (see [`super::trace`]).
    pub(in crate::request) trace: Trace,
    /// The app's counters, once the request is routed to one.
    pub(in crate::request) app: Option<Arc<AppTraffic>>,
    /// Boxed: most routers log no requests (`access_log`).
    pub(in crate::request) log: Option<Box<AccessRecord>>,
    /// The request body's declared length, for the app's byte counts.
    pub(in crate::request) received: u64,
    /// Its place in the connection's activity (idle deadline, drain).
    pub(in crate::request) active: ActiveRequest,
    /// A stream of a multiplexed connection (h2, h3): no `Connection` field.
    pub(in crate::request) stream: bool,
    /// The answer goes to the own HTTP/1.1 writer (the request came with its
    /// fields as they came), which writes a member's fields without a map.
    pub(in crate::request) own_h1: bool,
    /// The client's request says its HTTP/1 connection ends after it: a
    /// `close` it asked for, read token by token from the bytes (hyper skips a
    /// `Connection` value with a byte outside ASCII and would read the next
    /// request), or an upgrade (the framing reader stops at a head naming one,
    /// so a connection whose upgrade did not happen must not carry another
    /// request; both found by the `client_stream` fuzz target).
    pub(in crate::request) last_on_connection: bool,
    /// HTTPS over TCP announces the HTTP/3 listener (`http3.alt_svc`).
    pub(in crate::request) announce_h3: bool,
    /// Its span, when spans are exported and its trace is sampled.
    pub(in crate::request) span: Option<Box<SpanRecord>>,
    /// What it takes of compression, when its app compresses responses.
    pub(in crate::request) compress: Option<Asked>,
    /// Its app's field rules (HSTS, header actions), when it has some.
    pub(in crate::request) field_rules: Option<Box<Rules>>,
    /// Its app's own error pages, when it has some.
    pub(in crate::request) pages: Option<Arc<ErrorPages>>,
}

/// An app's field rules with what their variables need that the log phase
/// does not have at hand (see [`crate::policy::fields`]): nothing is
/// formatted here.
pub(in crate::request) struct Rules {
    pub(in crate::request) rules: Arc<FieldRules>,
    route: Arc<Route>,
    /// The host, kept only when a response action reads a variable.
    host: Option<Box<str>>,
}

impl Rules {
    /// The rules of `to`'s app, if it has some.
    pub(in crate::request) fn of(to: &Destination<'_>) -> Option<Box<Rules>> {
        let rules = to.policy.as_ref()?.fields.clone()?;
        let host = rules.response_needs_vars().then(|| to.name.as_ref().into());
        Some(Box::new(Rules {
            rules,
            route: to.route.clone(),
            host,
        }))
    }

    /// The variables of a request `from` a connection and its trace.
    pub(in crate::request) fn vars<'a>(&'a self, from: Provenance<'a>) -> Vars<'a> {
        vars_of(from, Some(&self.route), self.host.as_deref().unwrap_or(""))
    }
}

/// The variables of a request of `conn` with `trace` for `host`, routed to
/// `route` (none: it reached no app).
pub(in crate::request) fn vars_of<'a>(
    Provenance { conn, trace }: Provenance<'a>,
    route: Option<&'a Route>,
    host: &'a str,
) -> Vars<'a> {
    Vars {
        client_ip: conn.ip_value.as_bytes(),
        request_id: trace.request_id.as_bytes(),
        sni: conn.sni.as_deref().unwrap_or(""),
        app: route.map(|r| (r.name.as_str(), r.namespace.as_str())),
        host,
    }
}

impl Context<'_> {
    /// Where the request comes from (its connection and its trace).
    pub(in crate::request) fn provenance(&self) -> Provenance<'_> {
        Provenance {
            conn: self.conn,
            trace: &self.trace,
        }
    }

    /// The request reached `to`'s app: its counters, its span's, and what
    /// it takes of compression when the app compresses.
    pub(in crate::request) fn routed<B>(
        &mut self,
        to: &Destination<'_>,
        req: &Request<B>,
        fields: FieldsRef<'_>,
    ) {
        let route = &to.route;
        self.app = Some(route.traffic.clone());
        if let Some(policy) = &to.policy {
            if policy.compress {
                self.compress = Some(Asked::of(req, fields));
            }
            if policy.fields.is_some() {
                self.field_rules = Rules::of(to);
            }
            self.pages.clone_from(&policy.pages);
        }
        if let Some(span) = self.span.as_mut() {
            span.app = Some([route.name.as_str(), "-", &route.namespace].concat());
            span.mark(Moment::Routed);
        }
        if let Some(c) = self.log.as_mut().and_then(|l| l.syslog.as_mut()) {
            c.app(route);
        }
    }

    /// A moment of the request, for its span (if it has one).
    #[inline]
    pub(in crate::request) fn mark(&mut self, moment: Moment) {
        if let Some(span) = self.span.as_mut() {
            span.mark(moment);
        }
    }
}

impl Proxy {
    /// Whether HTTP/3 serves `host`: not a name with a client-certificate
    /// policy of its own (QUIC's handshakes have the router-wide one, see
    /// [`crate::tls::client_auth`]), which is not announced there.
    fn h3_serves(&self, host: Option<&HeaderValue>) -> bool {
        self.client_policies.is_empty()
            || host
                .and_then(|h| h.to_str().ok())
                .and_then(super::route::normalize_host)
                .is_none_or(|name| self.client_policies.of(Some(&name)) == 0)
    }

    /// A request's context: `fields` are its fields (in its map, or as they
    /// came), `host` the host it addressed (for the access log).
    pub(in crate::request) fn context<'c>(
        &self,
        conn: &'c ClientConn,
        req: &Request<Received>,
        fields: FieldsRef<'_>,
        host: Option<&HeaderValue>,
    ) -> Context<'c> {
        let start = Instant::now();
        let stream = matches!(req.version(), http::Version::HTTP_2 | http::Version::HTTP_3);
        self.metrics.protocol(req.version());
        let last_on_connection = !stream
            && (fields.contains(Name::Upgrade) || fields.values(Name::Connection).any(says_close));
        let sample = self.traces.as_ref().map_or(Sample::OFF, |t| t.sample);
        let trace = Trace::of(fields, conn.trusted(), sample);
        let span = self.span(conn, req, host, (&trace, start));
        Context {
            conn,
            start,
            trace,
            span,
            compress: None,
            field_rules: None,
            pages: None,
            app: None,
            log: self.access_log.then(|| {
                let sink = self.access_sink.as_ref();
                let to = (host, sink, self.access_stderr);
                AccessRecord::boxed(req, fields, &conn.ip_value, to)
            }),
            received: req.body().declared_len(),
            active: conn.activity.begin(stream),
            stream,
            own_h1: matches!(fields, FieldsRef::Raw(_)),
            last_on_connection,
            announce_h3: self.alt_svc.is_some()
                && conn.https
                && req.version() != http::Version::HTTP_3
                && self.h3_serves(host),
        }
    }

    /// The request's span, when spans are on and its trace is sampled and
    /// believed (see [`spans::Spans::believes`]).
    fn span(
        &self,
        conn: &ClientConn,
        req: &Request<Received>,
        host: Option<&HeaderValue>,
        (trace, start): (&Trace, Instant),
    ) -> Option<Box<SpanRecord>> {
        let spans = self.traces.as_ref()?;
        let continued = trace.parent.is_some();
        if !trace.sampled() || !spans.believes(continued, conn.behind_proxy, || trace.low_bits()) {
            return None;
        }
        let started = Started {
            traceparent: trace.traceparent(),
            parent: trace.parent,
            start,
            method: req.method(),
            host,
            uri: req.uri(),
            version: req.version(),
            client: conn.ip,
            request_id: trace.request_id.as_str(),
        };
        Some(SpanRecord::start(spans, started))
    }
}

/// What a request's attempt produced besides the response.
pub(in crate::request) struct Reply {
    pub(in crate::request) response: Response<ProxyBody>,
    pub(in crate::request) in_flight: Option<MemberSlot>,
    /// The member that answered when no slot travels with the response (an upgraded
    /// tunnel holds its slot itself), for the access log.
    pub(in crate::request) member: Option<Arc<str>>,
    /// The request's count against its app's `max_connections_per_client`.
    pub(in crate::request) hold: Option<ClientSlot>,
    /// An HTTP/1.1 member's fields as they came (see [`crate::request::Answer`]).
    pub(in crate::request) fields: Option<Fields>,
}

impl Reply {
    /// An answer, with the member's slot that travels with it.
    pub(in crate::request) fn of(
        response: Response<ProxyBody>,
        in_flight: Option<MemberSlot>,
    ) -> Reply {
        Reply {
            response,
            in_flight,
            member: None,
            hold: None,
            fields: None,
        }
    }

    /// The same, holding the request's count against its app's limit until
    /// the response is done.
    pub(in crate::request) fn held(mut self, hold: Option<ClientSlot>) -> Reply {
        self.hold = hold;
        self
    }

    /// A request that got no answer from a member: the router's own response
    /// (with the request's ID), counted against the app when a member failed.
    /// The page is the operator's where there is one (see
    /// [`crate::policy::pages`]): the app's for 502, 503 and 504, else
    /// `router`'s (`error_pages:`); a maintenance page stays the app's.
    pub(in crate::request) fn failed(
        e: &ProxyError,
        context: &Context<'_>,
        router: Option<&ErrorPages>,
    ) -> Reply {
        if let (ProxyError::Upstream(_), Some(app)) = (e, &context.app) {
            app.upstream_error();
        }
        let id = context.trace.request_id.as_str();
        let mut response = e.response(Some(id));
        let status = response.status().as_u16();
        let page = match e {
            ProxyError::Refused(Refused::Maintenance(_)) => None,
            _ => (context.pages.as_deref())
                .and_then(|p| p.page(status, id))
                .or_else(|| router?.page(status, id)),
        };
        if let Some(page) = page {
            *response.body_mut() = ProxyBody::full(page);
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
        }
        Reply::of(response, None)
    }
}
