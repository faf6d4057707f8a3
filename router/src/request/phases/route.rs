//! The route phase: the host a request addressed, the route for that host (with
//! its app's policy and the member its affinity cookie names), and the
//! plain-HTTP → HTTPS redirect for hosts that have a certificate.

use std::sync::Arc;

use arc_swap::ArcSwap;
use h1_codec::fields::{FieldsRef, Name};
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};

use super::body::ProxyBody;
use super::error::ProxyError;
use super::upload::Received;
use crate::policy::settings::PlainHttp;
use crate::policy::{Policy, Refused};
use crate::request::Proxy;
use crate::request::connection::client_conn::ClientConn;
use crate::table::{Route, RouteTable, Target};
use crate::tls::store::Certs;
use h1_codec::request::framing_is_clear;

/// The host the client addressed: `:authority` for h2 and absolute-form requests
/// (RFC 9112 §3.2.2: it wins over Host), else the one Host header. Several Host
/// headers are refused (RFC 9112 §3.2), as request smuggling relies on them, and so
/// is an HTTP/1.1 request without one, even in absolute form (RFC 9112 §3.2: a
/// server MUST answer 400; found by the `client_stream` fuzz target, the router
/// forwarded it with the authority as Host).
pub fn host_of<B>(req: &Request<B>, fields: FieldsRef<'_>) -> Option<HeaderValue> {
    let mut all = fields.values(Name::Host);
    let host = match (all.next(), all.next()) {
        (host, None) => host,
        _ => return None,
    };
    if host.is_none() && req.version() == http::Version::HTTP_11 {
        return None;
    }
    if let Some(authority) = req.uri().authority() {
        // An authority comes with the scheme `http` or `https` (`://host/x` is no
        // absolute form; found by the `client_stream` fuzz target).
        let scheme = req.uri().scheme_str();
        if !(scheme
            .is_some_and(|s| s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https")))
        {
            return None;
        }
        return HeaderValue::from_str(authority.as_str()).ok();
    }
    host.and_then(|h| fields.header_value(h))
}

/// Lower-cases a Host header value and strips its port and a trailing dot, for lookup.
/// Returns `None` for values no route can ever match (empty, bad characters).
pub fn normalize_host(raw: &str) -> Option<std::borrow::Cow<'_, str>> {
    let host = if let Some(rest) = raw.strip_prefix('[') {
        // IPv6 literal: "[::1]:8080".
        let end = rest.find(']')?;
        &raw[..end + 2]
    } else {
        match raw.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            Some(_) => return None,
            None => raw,
        }
    };
    let host = host.strip_suffix('.').unwrap_or(host);
    // One pass, a table lookup per byte (this runs for every request).
    let mut upper = false;
    for b in host.bytes() {
        match HOST_BYTE[usize::from(b)] {
            HostByte::Not => return None,
            HostByte::Upper => upper = true,
            HostByte::Kept => {}
        }
    }
    if host.is_empty() {
        None
    } else if upper {
        Some(std::borrow::Cow::Owned(host.to_ascii_lowercase()))
    } else {
        Some(std::borrow::Cow::Borrowed(host))
    }
}

/// What a byte is in a host name as [`normalize_host`] takes it.
#[derive(Clone, Copy)]
enum HostByte {
    /// Never in one (no route can match).
    Not,
    /// Kept as it is: a lower-case letter, a digit, `-._[]:`.
    Kept,
    /// An upper-case letter (lower-cased).
    Upper,
}

const HOST_BYTE: [HostByte; 256] = {
    let mut table = [HostByte::Not; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = if c.is_ascii_uppercase() {
            HostByte::Upper
        } else if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'[' | b']' | b':')
        {
            HostByte::Kept
        } else {
            HostByte::Not
        };
        b += 1;
    }
    table
};

/// Redirects plain HTTP to HTTPS (there when `listen.https` is): an app whose
/// `plain_http` says `redirect`, and by default (`tls.redirect_http`) the hosts
/// that have a certificate: an alias with its own, or an app's generated names
/// when a default (wildcard) certificate is configured.
#[derive(Clone)]
pub struct Redirect {
    pub https_port: u16,
    pub certs: Arc<ArcSwap<Certs>>,
    /// `tls.redirect_http`: what an app without `plain_http` gets.
    pub by_default: bool,
}

impl Redirect {
    pub fn covers(&self, route: &Route, name: &str) -> bool {
        let certs = self.certs.load();
        certs.has_own(name) || (certs.has_default() && !route.aliases.iter().any(|a| a == name))
    }

    /// 301 for GET and HEAD, 308 otherwise (keeps the method and body).
    pub fn response<B>(&self, req: &Request<B>, name: &str) -> Response<ProxyBody> {
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

impl Proxy {
    /// The route phase: what is refused before the host is read, the host,
    /// an ACME CA's check of an order of ours (answered before routing and
    /// redirects), then the route for the host (or the redirect to HTTPS).
    pub(in crate::request) fn route<'h>(
        &self,
        conn: &ClientConn,
        req: &Request<Received>,
        fields: FieldsRef<'_>,
        host: &'h Option<HeaderValue>,
    ) -> Result<Routed<'h>, ProxyError> {
        refuse_early(req, fields)?;
        let host = host.as_ref().ok_or(ProxyError::BadHost)?;
        if let Some(answer) = self.acme_answer(conn, req.uri().path()) {
            return Ok(Routed::Answered(Box::new(answer)));
        }
        self.route_of(conn, req, fields, host)
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
        fields: FieldsRef<'_>,
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
        // ... and only under the client-certificate policy its handshake had.
        if conn.https && self.client_policies.of(Some(&name)) != conn.client_policy {
            return Err(ProxyError::Misdirected);
        }
        // One table load; the guard is dropped before any await.
        let table = self.table.load();
        let (route, rewrite) = match table.path_route(&name, req.uri().path()) {
            Some(found) => found,
            None => (table.route_for(&name).ok_or(ProxyError::NoRoute)?, None),
        };
        let (route, policy, sticky) = sticky_of(&table, route, fields, &name);
        let (route, policy) = (route.clone(), policy.cloned());
        drop(table);
        // Names whose TLS the gear terminates are relayed before any handshake: a
        // request for one on a connection we terminated was coalesced here (h2).
        if route.passthrough && conn.https {
            return Err(ProxyError::Misdirected);
        }
        if !conn.https
            && let Some(answer) = self.plain_http(req, (&route, &name), policy.as_deref())?
        {
            return Ok(Routed::Answered(Box::new(answer)));
        }
        Ok(Routed::To(Destination {
            route,
            host,
            name,
            policy,
            sticky,
            rewrite,
        }))
    }

    /// What a plain-HTTP request for `route` gets before its member: the app's
    /// `plain_http` (`redirect`; `none`: 403, also where no HTTPS listens to
    /// redirect to; `allow`: served), else `tls.redirect_http`'s redirect for
    /// hosts with a certificate; `None`: served.
    fn plain_http(
        &self,
        req: &Request<Received>,
        (route, name): (&Route, &str),
        policy: Option<&Policy>,
    ) -> Result<Option<Response<ProxyBody>>, ProxyError> {
        let redirect = self.redirect.as_ref();
        let redirected = match policy.and_then(|p| p.plain_http) {
            None => redirect.filter(|r| r.by_default && r.covers(route, name)),
            Some(PlainHttp::Allow) => None,
            Some(PlainHttp::Redirect) if redirect.is_some() => redirect,
            Some(PlainHttp::Redirect | PlainHttp::None) => {
                let policy = policy.ok_or(ProxyError::NoRoute)?;
                return Err(self.refused(policy, Refused::PlainHttp));
            }
        };
        Ok(redirected.map(|r| r.response(req, name)))
    }

    /// The HTTP-01 answer for `path` on a plain HTTP connection, if an ACME
    /// order of this router's is waiting for it.
    fn acme_answer(&self, conn: &ClientConn, path: &str) -> Option<Response<ProxyBody>> {
        if conn.https {
            return None;
        }
        let answer = self.acme.as_ref()?.answer(path)?;
        self.metrics.tls.acme_challenges.inc();
        let response = Response::builder()
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .body(ProxyBody::full(answer))
            .ok()?;
        Some(response)
    }
}

/// The member a request's affinity cookie names (when its app has affinity),
/// in its route or in another app of a blue/green split, with that app's route
/// and policy.
fn sticky_of<'t>(
    table: &'t RouteTable,
    route: &'t Arc<Route>,
    fields: FieldsRef<'_>,
    name: &str,
) -> (&'t Arc<Route>, Option<&'t Arc<Policy>>, Sticky) {
    let policy = table.policy_for(&route.app);
    let Some(affinity) = policy.and_then(|p| p.affinity.as_ref()) else {
        return (route, policy, Sticky::None);
    };
    let Some(id) = affinity.requested(fields) else {
        return (route, policy, Sticky::None);
    };
    let split = table.split_apps(name);
    let found = std::iter::once(route).chain(split).find_map(|r| {
        r.members
            .iter()
            .find(|t| t.member.eligible() && t.member.affinity_id(affinity.key()) == id)
            .map(|t| (r, t))
    });
    match found {
        Some((r, t)) if !Arc::ptr_eq(r, route) => {
            (r, table.policy_for(&r.app), Sticky::Kept(t.clone()))
        }
        Some((_, t)) => (route, policy, Sticky::Kept(t.clone())),
        None => (route, policy, Sticky::Moved),
    }
}

/// What is refused before the host is even read: `CONNECT` (405: a reverse proxy
/// opens no tunnels to arbitrary places) and an ambiguous body length (a
/// smuggling attempt; h2 has none).
fn refuse_early(req: &Request<Received>, fields: FieldsRef<'_>) -> Result<(), ProxyError> {
    if req.method() == Method::CONNECT {
        return Err(ProxyError::MethodNotAllowed);
    }
    if req.version() < http::Version::HTTP_2 && !framing_is_clear(fields, req.version()) {
        return Err(ProxyError::BadFraming);
    }
    Ok(())
}

/// Where [`Proxy::route`] sends a request.
pub(in crate::request) enum Routed<'h> {
    To(Destination<'h>),
    /// Nowhere: the router answers (a redirect to HTTPS, an ACME check).
    Answered(Box<Response<ProxyBody>>),
}

/// A routed request: its route, the host name (normalised), the app's policy and
/// what its affinity cookie said.
pub(in crate::request) struct Destination<'h> {
    pub(in crate::request) route: Arc<Route>,
    /// The host as the client sent it (the member gets it as it came).
    pub(in crate::request) host: &'h HeaderValue,
    /// The host normalised: what TLS members are asked for (SNI) and verified
    /// against.
    pub(in crate::request) name: std::borrow::Cow<'h, str>,
    pub(in crate::request) policy: Option<Arc<Policy>>,
    pub(in crate::request) sticky: Sticky,
    /// The name's path rule that took it rewrites its prefix: (the prefix's
    /// length, what replaces it) (see [`crate::table::paths`]).
    pub(in crate::request) rewrite: Option<crate::table::paths::Rewrite>,
}

impl Destination<'_> {
    /// The app's members speak h2 (`h2: true` in its settings).
    pub(in crate::request) fn h2_members(&self) -> bool {
        self.policy.as_ref().is_some_and(|p| p.h2)
    }
}

/// The member a request's affinity cookie names.
pub(in crate::request) enum Sticky {
    /// No affinity, or no valid cookie.
    None,
    /// Eligible: the request goes there.
    Kept(Target),
    /// Not eligible (down, rotated out, gone): the balancer picks, a new cookie.
    Moved,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_of_follows_rfc_9112_section_3_2() {
        let req = |version, target: &str, hosts: &[&str]| {
            let mut b = Request::builder().version(version).uri(target);
            for h in hosts {
                b = b.header(header::HOST, *h);
            }
            let req = b.body(()).expect("request");
            host_of(&req, FieldsRef::Map(req.headers()))
                .map(|h| h.to_str().expect("ascii").to_owned())
        };
        use http::Version;
        let v11 = Version::HTTP_11;
        assert_eq!(req(v11, "/", &["a.example"]).as_deref(), Some("a.example"));
        assert_eq!(
            req(v11, "http://b.example/", &["a.example"]).as_deref(),
            Some("b.example")
        );
        // HTTP/1.1 without Host, even in absolute form; two Hosts in any form.
        assert_eq!(req(v11, "http://b.example/", &[]), None);
        assert_eq!(req(v11, "/", &[]), None);
        assert_eq!(req(v11, "http://b.example/", &["a", "a"]), None);
        assert_eq!(req(v11, "ftp://b.example/", &["a"]), None);
        // HTTP/1.0 may leave Host out; h2 names the host in :authority.
        assert_eq!(
            req(Version::HTTP_10, "http://b.example/", &[]).as_deref(),
            Some("b.example")
        );
        assert_eq!(
            req(Version::HTTP_2, "https://c.example/", &[]).as_deref(),
            Some("c.example")
        );
    }

    #[test]
    fn host_normalisation() {
        let n = |s| normalize_host(s).map(|c| c.into_owned());
        assert_eq!(n("Example.COM").as_deref(), Some("example.com"));
        assert_eq!(n("example.com:8080").as_deref(), Some("example.com"));
        assert_eq!(n("example.com.").as_deref(), Some("example.com"));
        assert_eq!(n("example.com.:80").as_deref(), Some("example.com"));
        assert_eq!(n("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(n("example.com:http"), None);
        assert_eq!(n(""), None);
        assert_eq!(n("bad host"), None);
        assert_eq!(n("a/b"), None);
        assert_eq!(n("caf\u{e9}.example"), None);
        assert_eq!(n("A-b_c.9:1").as_deref(), Some("a-b_c.9"));
        assert!(matches!(
            normalize_host("already.lower"),
            Some(std::borrow::Cow::Borrowed(_))
        ));
    }
}
