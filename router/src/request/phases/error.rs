//! Every way a request can fail, and the one place a failure becomes a response.
//!
//! Whose fault it was decides the status: the client's (400), the route's (404, 503)
//! or the member's (502, 503, 504); only the member's count against its health, and
//! the `kind` label of `router_upstream_errors_total` says which it was.

use http::header::{self, HeaderValue};
use http::{Response, StatusCode};

use super::body::ProxyBody;
use crate::metrics::UpstreamError;
use crate::policy::Refused;

/// Why a request got no answer from a member.
#[derive(Debug)]
pub enum ProxyError {
    /// No Host (or `:authority`), or one no route could ever match.
    BadHost,
    /// A request target we cannot forward (e.g. `OPTIONS *`).
    BadTarget,
    /// An HTTP/1 request whose body length is ambiguous (see
    /// `h1_codec::request::framing_is_clear`): a request-smuggling shape. The
    /// connection is closed after the 400, as its next bytes cannot be trusted.
    BadFraming,
    /// `CONNECT`: a reverse proxy opens no tunnels to arbitrary places (405).
    MethodNotAllowed,
    /// No route for this host.
    NoRoute,
    /// The connection's certificate is not the one this host would get (421: the
    /// client opens a new connection with the right SNI).
    Misdirected,
    /// The app is known but has no routable member.
    NoMember,
    /// The app's policy refused the request (see [`crate::policy`]).
    Refused(Refused),
    Upstream(UpstreamError),
}

impl ProxyError {
    /// Nothing of the request reached a member: safe to try another one.
    pub fn nothing_sent(&self) -> bool {
        matches!(
            self,
            ProxyError::Upstream(
                UpstreamError::Connect
                    | UpstreamError::ConnectTimeout
                    | UpstreamError::Busy
                    | UpstreamError::SourceShare
            )
        )
    }

    /// The one place errors become responses; `request_id`: the request's ID,
    /// written in the page (the response carries it as `X-Request-Id` too).
    pub fn response(&self, request_id: Option<&str>) -> Response<ProxyBody> {
        if let ProxyError::Refused(r) = self {
            return refused(r, request_id);
        }
        let (status, text) = self.status_and_text();
        let mut resp = Response::new(page(text, request_id));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if matches!(self, ProxyError::BadFraming) {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        if matches!(self, ProxyError::MethodNotAllowed) {
            // RFC 9110 §15.5.6: a 405 says what is allowed.
            resp.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH, TRACE"),
            );
        }
        resp
    }

    /// The status and the page's one line for each error but a policy's refusal.
    fn status_and_text(&self) -> (StatusCode, &'static str) {
        match self {
            ProxyError::BadHost => (StatusCode::BAD_REQUEST, "missing or invalid Host\n"),
            ProxyError::BadTarget => (StatusCode::BAD_REQUEST, "invalid request target\n"),
            ProxyError::BadFraming => (
                StatusCode::BAD_REQUEST,
                "ambiguous request length (Content-Length and Transfer-Encoding)\n",
            ),
            ProxyError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed through this router\n",
            ),
            ProxyError::NoRoute => (StatusCode::NOT_FOUND, "no application for this host\n"),
            ProxyError::Misdirected => (
                StatusCode::MISDIRECTED_REQUEST,
                "this connection cannot serve this host: open a new one\n",
            ),
            ProxyError::NoMember => (
                StatusCode::SERVICE_UNAVAILABLE,
                "application has no available backend\n",
            ),
            ProxyError::Refused(_) => (StatusCode::FORBIDDEN, "refused\n"),
            ProxyError::Upstream(kind) => upstream_status_and_text(*kind),
        }
    }
}

/// What a member's failure (or a client's body's) is answered with.
fn upstream_status_and_text(kind: UpstreamError) -> (StatusCode, &'static str) {
    match kind {
        // The member is full: like no member at all, try again later.
        UpstreamError::Busy => (
            StatusCode::SERVICE_UNAVAILABLE,
            "application backend is at capacity\n",
        ),
        UpstreamError::SourceShare => (
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests from this address to this application backend\n",
        ),
        UpstreamError::LocalResources => (
            StatusCode::SERVICE_UNAVAILABLE,
            "router is out of resources, try again\n",
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
        UpstreamError::ClientTimeout => (StatusCode::REQUEST_TIMEOUT, "request body timed out\n"),
        UpstreamError::ClientBodyTooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is larger than this application takes\n",
        ),
    }
}

/// An app policy's refusal: 403 for an address, 429 over a limit (with
/// `Retry-After` for the rate), 503 with `Retry-After` and the operator's page in
/// maintenance.
fn refused(r: &Refused, request_id: Option<&str>) -> Response<ProxyBody> {
    let (status, body, retry_after) = refusal(r, request_id);
    let html = matches!(r, Refused::Maintenance(m) if m.page.is_some());
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if html {
            "text/html; charset=utf-8"
        } else {
            "text/plain; charset=utf-8"
        }),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(s) = retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

/// A refusal's status, page and `Retry-After`.
fn refusal(r: &Refused, request_id: Option<&str>) -> (StatusCode, ProxyBody, Option<u64>) {
    match r {
        Refused::Address => (
            StatusCode::FORBIDDEN,
            page(
                "this application does not take requests from your address\n",
                request_id,
            ),
            None,
        ),
        Refused::Rate { retry_after } => (
            StatusCode::TOO_MANY_REQUESTS,
            page(
                "too many requests from your address, slow down\n",
                request_id,
            ),
            Some(*retry_after),
        ),
        Refused::MemberSlot => (
            StatusCode::TOO_MANY_REQUESTS,
            page("too many requests at once from your address\n", request_id),
            Some(1),
        ),
        Refused::PlainHttp => (
            StatusCode::FORBIDDEN,
            page("this application is served over HTTPS only\n", request_id),
            None,
        ),
        Refused::BodyTooLarge => (
            StatusCode::PAYLOAD_TOO_LARGE,
            page(
                "the request body is larger than this application takes\n",
                request_id,
            ),
            None,
        ),
        Refused::Maintenance(m) => (
            StatusCode::SERVICE_UNAVAILABLE,
            match &m.page {
                Some(page) => ProxyBody::full(page.clone()),
                None => page("this application is down for maintenance\n", request_id),
            },
            Some(m.retry_after),
        ),
    }
}

/// A page of the router's own: `text`, then the request's ID to quote when
/// asking about it.
fn page(text: &'static str, request_id: Option<&str>) -> ProxyBody {
    match request_id {
        Some(id) => ProxyBody::full(format!("{text}request id: {id}\n")),
        None => ProxyBody::full(text),
    }
}
