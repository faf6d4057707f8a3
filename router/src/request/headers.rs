//! Header rewriting between client and member: hop-by-hop removal (RFC 9110 §7.6.1)
//! and the `X-Forwarded-*` family.
//!
//! Everything else passes untouched, in order: Host, cookies (the gear haproxy's
//! `GEAR` stickiness cookie), authorization, and so on.

use std::net::IpAddr;
use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use super::activity::Activity;

/// Headers that describe one connection, not the message (RFC 9110 §7.6.1, plus the
/// non-standard `Proxy-Connection` and `Keep-Alive` that old clients still send).
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");

/// Whether the request asks to switch protocols (WebSocket): `Connection: upgrade`
/// plus an `Upgrade` header.
pub fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|v| has_token(v, "upgrade"))
}

fn has_token(value: &HeaderValue, token: &str) -> bool {
    value
        .to_str()
        .map(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        .unwrap_or(false)
}

/// Never removed because a `Connection` header names them: the member needs Host,
/// and the router sets the `X-Forwarded-*` family itself (`Connection: host` must not
/// strip the Host header on its way to the member).
fn protected(name: &HeaderName) -> bool {
    *name == header::HOST || name.as_str().starts_with("x-forwarded-")
}

/// Removes hop-by-hop headers and every header the `Connection` headers name (all of
/// them, however many there are), except [`protected`] ones.
/// With `keep_upgrade`, `Connection: upgrade` and `Upgrade` survive so that the next
/// hop can switch protocols too.
///
/// Most messages carry none of these: one pass over the names finds out, and only
/// then are headers removed (each removal hashes a name; this runs twice per request).
pub fn remove_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let present = headers.keys().any(|k| HOP_BY_HOP.iter().any(|h| h == k));
    if !present {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("").split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|n| !(protected(n) || (keep_upgrade && *n == header::UPGRADE)))
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        if keep_upgrade && (*name == header::CONNECTION || *name == header::UPGRADE) {
            continue;
        }
        headers.remove(name);
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// What the router knows about the client's connection, with the header values
/// derived from it rendered once per connection rather than once per request.
#[derive(Clone, Debug)]
pub struct ClientConn {
    pub ip: IpAddr,
    /// The connection's requests in flight (for its idle deadline).
    pub activity: Arc<Activity>,
    /// The port the client connected to (X-Forwarded-Port).
    pub local_port: u16,
    pub https: bool,
    ip_value: HeaderValue,
    port_value: HeaderValue,
}

impl ClientConn {
    pub fn new(ip: IpAddr, local_port: u16, https: bool, activity: Arc<Activity>) -> ClientConn {
        let ip = ip.to_canonical();
        ClientConn {
            ip,
            activity,
            local_port,
            https,
            ip_value: HeaderValue::from_str(&ip.to_string())
                .unwrap_or_else(|_| HeaderValue::from_static("unknown")),
            port_value: HeaderValue::from(local_port),
        }
    }
}

/// Appends the client to `X-Forwarded-For` and sets `X-Forwarded-Proto/Host/Port`.
/// `host` is the Host the client sent, verbatim.
pub fn set_forwarded(headers: &mut HeaderMap, conn: &ClientConn, host: &HeaderValue) {
    // Several X-Forwarded-For fields form one comma-separated list: join, then append.
    let xff = if headers.contains_key(&X_FORWARDED_FOR) {
        let mut list: Vec<u8> = Vec::with_capacity(64);
        for v in headers.get_all(&X_FORWARDED_FOR) {
            list.extend_from_slice(v.as_bytes());
            list.extend_from_slice(b", ");
        }
        list.extend_from_slice(conn.ip_value.as_bytes());
        HeaderValue::from_bytes(&list).unwrap_or_else(|_| conn.ip_value.clone())
    } else {
        conn.ip_value.clone()
    };
    headers.insert(X_FORWARDED_FOR, xff);
    headers.insert(
        X_FORWARDED_PROTO,
        HeaderValue::from_static(if conn.https { "https" } else { "http" }),
    );
    headers.insert(X_FORWARDED_HOST, host.clone());
    headers.insert(X_FORWARDED_PORT, conn.port_value.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn connection_cannot_strip_host_or_forwarded_headers_and_every_connection_header_counts() {
        let mut h = map(&[
            ("host", "app.example.com"),
            ("connection", "host, x-forwarded-for"),
            ("connection", "x-secret"),
            ("x-forwarded-for", "10.0.0.9"),
            ("x-secret", "1"),
            ("accept", "*/*"),
        ]);
        remove_hop_by_hop(&mut h, false);
        assert_eq!(
            h.get("host").map(|v| v.as_bytes()),
            Some(&b"app.example.com"[..])
        );
        assert!(h.contains_key("x-forwarded-for"));
        assert!(
            !h.contains_key("x-secret"),
            "named by the second Connection header"
        );
        assert!(!h.contains_key("connection"));
        assert!(h.contains_key("accept"));
    }

    #[test]
    fn removes_standard_and_named_hop_by_hop_headers() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret-Hop"),
            ("keep-alive", "timeout=5"),
            ("x-secret-hop", "1"),
            ("te", "trailers"),
            ("proxy-connection", "keep-alive"),
            ("cookie", "GEAR=local-5464"),
            ("host", "App.example.com"),
        ]);
        remove_hop_by_hop(&mut h, false);
        let left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(left, ["cookie", "host"]);
    }

    #[test]
    fn upgrade_survives_when_asked() {
        let mut h = map(&[("connection", "Upgrade"), ("upgrade", "websocket")]);
        assert!(wants_upgrade(&h));
        remove_hop_by_hop(&mut h, true);
        assert_eq!(
            h.get("upgrade").map(|v| v.as_bytes()),
            Some(&b"websocket"[..])
        );
        assert_eq!(
            h.get("connection").map(|v| v.as_bytes()),
            Some(&b"upgrade"[..])
        );
    }

    #[test]
    fn forwarded_headers_append_and_set() {
        let mut h = map(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "2.2.2.2"),
            ("x-forwarded-proto", "https"),
        ]);
        let conn = ClientConn::new(
            "::ffff:10.1.2.3".parse().expect("ip"),
            8080,
            false,
            Activity::new(None),
        );
        set_forwarded(
            &mut h,
            &conn,
            &HeaderValue::from_static("App.example.com:8080"),
        );
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 10.1.2.3");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-host"], "App.example.com:8080");
        assert_eq!(h["x-forwarded-port"], "8080");
    }
}
