//! The request path: a client's connection accepted, each request on it
//! routed to a member, and the answer streamed back. Two rooms, for its two
//! lives:
//!
//! - [`connection`]: a client connection from accept to close (listeners,
//!   slots, deadlines, drain, the bytes both ways, the own HTTP/1.1 server,
//!   tunnels and passthrough);
//! - [`phases`]: one request, its phases called in order (route → admit →
//!   checkout → send → retry → respond → log) and what they share.
//!
//! They meet here: a connection hands each request to [`Proxy::answer`], which
//! runs the phases and hands back an [`Answer`]. [`Proxy`] is what both share,
//! one per listener set, made at start and on each reload.

pub mod connection;
pub mod phases;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use h1_codec::fields::{Fields, FieldsRef};
use http::{Request, Response};

use self::connection::client_conn::{self, ClientConn};
use self::phases::body::ProxyBody;
use self::phases::context::Reply;
use self::phases::route::{Redirect, host_of};
use self::phases::trace;
use self::phases::upload::{Received, UploadSettings};
use crate::metrics::Metrics;
use crate::table::RouteTable;
use crate::upstream::ConnectSettings;

pub use self::phases::error::ProxyError;

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
    pub forwarded: client_conn::ForwardedSettings,
    /// The live certificates (HTTPS): a request for a host whose certificate is not
    /// the connection's is 421.
    pub certs: Option<Arc<ArcSwap<crate::tls::store::Certs>>>,
    pub access_log: bool,
    /// The access lines to stderr (`access_log.stderr`; else to syslog only).
    pub access_stderr: bool,
    /// Access lines to syslog in the operator's template (`access_log.syslog`).
    pub access_sink: Option<Arc<crate::syslog::Sink>>,
    /// Per-client state of the apps' limits (see [`crate::policy::clients`]).
    pub clients: Arc<crate::policy::clients::Clients>,
    /// `Alt-Svc` for HTTPS responses over TCP when the HTTP/3 listener is on and
    /// `http3.alt_svc` is (see [`crate::quic`]).
    pub alt_svc: Option<http::HeaderValue>,
    /// HTTP-01 answers of ACME orders in flight (`acme.directory` set), served on
    /// plain HTTP before routing (see [`crate::issuer`]).
    pub acme: Option<Arc<acme::Challenges>>,
    /// Response compression's settings and streams (see [`compress`]).
    pub compression: Arc<::compress::Compression>,
    /// Spans out over OTLP (`traces.endpoint`; see [`spans`]).
    pub traces: Option<Arc<spans::Spans>>,
    /// The operator's pages for the router's own answers (`error_pages:`).
    pub error_pages: Option<Arc<crate::policy::pages::ErrorPages>>,
    /// TLS clients are asked for certificates (`tls.client_certificates`):
    /// every request over TLS says what was presented.
    pub client_auth: bool,
    /// Which client-certificate policy each name's handshakes get
    /// (`tls.client_certificates_by_name`): a request for a name under
    /// another policy than its connection's is 421.
    pub client_policies: Arc<crate::tls::client_auth::Policies>,
    /// `proxy_protocol.trusted`: connections from these start with a PROXY
    /// header naming the client (see [`connection::proxied`]).
    pub proxy_trusted: Arc<[ipnet::IpNet]>,
}

/// A request's answer: the response and, when an HTTP/1.1 member gave it, the
/// member's fields as they came. The response's own map then holds only what
/// the router adds (the affinity cookie, `Connection: close`, `Alt-Svc`): the
/// own HTTP/1.1 path writes both without building a map of the member's
/// ([`connection::h1`]); every other server gets one map ([`Proxy::response`]).
pub struct Answer {
    pub response: Response<ProxyBody>,
    pub fields: Option<Fields>,
    /// Field lines the own HTTP/1.1 path writes after the member's fields
    /// (an app's response header actions and HSTS, worked out without a map:
    /// see [`crate::policy::fields::FieldRules::on_raw_response`]); empty for
    /// every other server, whose map holds them.
    pub added: bytes::Bytes,
    /// The request's ID (see [`trace`]), returned to the client as
    /// `X-Request-Id`: written by the own HTTP/1.1 path, put in the map for
    /// every other server.
    pub request_id: trace::RequestId,
}

impl Proxy {
    /// Serves one request for a server that takes a response with one map of
    /// its fields (the own h2 server, hyper's HTTP/1, h3's); never fails (errors are
    /// responses).
    pub async fn response(
        self: Arc<Self>,
        conn: Arc<ClientConn>,
        req: Request<Received>,
    ) -> Result<Response<ProxyBody>, Infallible> {
        let Answer {
            mut response,
            fields,
            added,
            request_id,
        } = self.answer(conn, Box::new(req), None).await;
        debug_assert!(added.is_empty(), "lines for the own HTTP/1.1 path only");
        if let Some(fields) = fields {
            h1_codec::hop::member_map(&fields, response.headers_mut());
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
        let fields = FieldsRef::of(&req, raw.as_ref());
        let host = host_of(&req, fields);
        let mut context = self.context(&conn, &req, fields, host.as_ref());
        let reply = match self.attempt(&mut context, req, host, raw).await {
            Ok(reply) => reply,
            Err(e) => Reply::failed(&e, &context, self.error_pages.as_deref()),
        };
        self.log(context, reply)
    }
}
