//! Header rewriting between client and member: hop-by-hop removal (RFC 9110 §7.6.1),
//! the `X-Forwarded-*` family and, when asked for, RFC 7239's `Forwarded`.
//!
//! **Trust rule**: what a client sent in `X-Forwarded-For` and `Forwarded` is kept
//! (and the router appends itself) only when the client's address is in
//! `forwarded.trusted`; from any other client both are replaced by what the router
//! saw, so a client cannot forge the chain. The default trusts every address (the
//! router has always appended, as OpenShift's router does by default): narrow it to
//! the load balancers or CDNs in front of the router.
//!
//! Everything else passes untouched, in order: Host, cookies (the gear haproxy's
//! `GEAR` stickiness cookie), authorization, and so on.

use super::trace::{Provenance, Trace};

use h1_codec::encode::field_line;
use h1_codec::encode::request::{RequestFraming, request_line};
use h1_codec::fields::{Fields, FieldsRef, Name};
use h1_codec::hop::{end_to_end, has_token, protected_bytes, tokens};
use h1_codec::request::is_underscored;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::request::connection::client_conn::ClientConn;

pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");

pub const FORWARDED: HeaderName = header::FORWARDED;

/// Whether the request asks to switch protocols (WebSocket): `Connection: upgrade`
/// plus an `Upgrade` header.
pub fn wants_upgrade<'a>(fields: impl Into<FieldsRef<'a>>) -> bool {
    let fields = fields.into();
    fields.contains(Name::Upgrade)
        && fields
            .values(Name::Connection)
            .any(|v| has_token(v, "upgrade"))
}

/// Removes the fields whose names hold `_` from a request on its way to a
/// member (h1_codec's rule, [`is_underscored`], says why). One pass over the
/// names; a removal only where there is one (rare).
pub fn remove_underscored(headers: &mut HeaderMap) {
    let gone: Vec<HeaderName> = headers
        .keys()
        .filter(|k| is_underscored(k.as_str().as_bytes()))
        .cloned()
        .collect();
    for name in gone {
        headers.remove(name);
    }
}

/// `value` as an RFC 7230 quoted-string.
fn quoted(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 2);
    out.push(b'"');
    for &b in value {
        if b == b'"' || b == b'\\' {
            out.push(b'\\');
        }
        out.push(b);
    }
    out.push(b'"');
    out
}

/// What becomes of the client's `Forwarded` field.
enum ForwardedField {
    /// Replaced by this (`forwarded` is on: the trusted client's list and the
    /// router's element).
    Set(HeaderValue),
    /// Removed (an untrusted client's).
    Remove,
    /// Passed on as it came (a trusted client's, `forwarded` off).
    Keep,
}

/// The forwarding fields of one request: `Forwarded`, and `X-Forwarded-For`
/// appended to (or, from an untrusted client, replaced). One rule for both
/// ways a request's fields are held ([`set_forwarded`], [`encode_for_member`]).
fn forwarding(
    fields: FieldsRef<'_>,
    conn: &ClientConn,
    host: &HeaderValue,
) -> (ForwardedField, HeaderValue) {
    let forwarded = if let Some(element) = &conn.forwarded {
        let mut list: Vec<u8> = Vec::with_capacity(96);
        if conn.trusted {
            for v in fields.values(Name::Forwarded) {
                list.extend_from_slice(v);
                list.extend_from_slice(b", ");
            }
        }
        list.extend_from_slice(element.as_bytes());
        list.extend_from_slice(b";host=");
        list.extend_from_slice(&quoted(host.as_bytes()));
        HeaderValue::from_bytes(&list).map_or(ForwardedField::Keep, ForwardedField::Set)
    } else if !conn.trusted {
        ForwardedField::Remove
    } else {
        ForwardedField::Keep
    };
    // Several X-Forwarded-For fields form one comma-separated list: join, then append.
    let xff = if conn.trusted && fields.contains(Name::XForwardedFor) {
        let mut list: Vec<u8> = Vec::with_capacity(64);
        for v in fields.values(Name::XForwardedFor) {
            list.extend_from_slice(v);
            list.extend_from_slice(b", ");
        }
        list.extend_from_slice(conn.ip_value.as_bytes());
        HeaderValue::from_bytes(&list).unwrap_or_else(|_| conn.ip_value.clone())
    } else {
        conn.ip_value.clone()
    };
    (forwarded, xff)
}

/// `X-Forwarded-Proto`'s value for the client's connection.
fn proto(conn: &ClientConn) -> HeaderValue {
    HeaderValue::from_static(if conn.https { "https" } else { "http" })
}

/// Appends the client to `X-Forwarded-For` (or, from an untrusted client, replaces
/// it) and sets `X-Forwarded-Proto/Host/Port`; the same for `Forwarded` when asked
/// for. `host` is the Host the client sent, verbatim.
pub fn set_forwarded(headers: &mut HeaderMap, conn: &ClientConn, host: &HeaderValue) {
    let (forwarded, xff) = forwarding(FieldsRef::Map(headers), conn, host);
    match forwarded {
        ForwardedField::Set(v) => {
            headers.insert(FORWARDED, v);
        }
        ForwardedField::Remove => {
            headers.remove(&FORWARDED);
        }
        ForwardedField::Keep => {}
    }
    headers.insert(X_FORWARDED_FOR, xff);
    headers.insert(X_FORWARDED_PROTO, proto(conn));
    headers.insert(X_FORWARDED_HOST, host.clone());
    headers.insert(X_FORWARDED_PORT, conn.port_value.clone());
    // A client's own certificate fields are never believed.
    for name in [X_SSL_CLIENT_VERIFY, X_SSL_CLIENT_DN, X_SSL_CLIENT_CERT] {
        headers.remove(name);
    }
    if let Some(cert) = &conn.client_cert {
        headers.insert(X_SSL_CLIENT_VERIFY, cert.verify.clone());
        for (name, value) in [(X_SSL_CLIENT_DN, &cert.dn), (X_SSL_CLIENT_CERT, &cert.cert)] {
            if let Some(v) = value {
                headers.insert(name, v.clone());
            }
        }
    }
}

/// What the client's certificate says, as lines of a member's head (see
/// [`set_forwarded`] for a map).
fn client_cert_lines(cert: &crate::tls::client_auth::ClientCert, out: &mut Vec<u8>) {
    field_line(b"x-ssl-client-verify", cert.verify.as_bytes(), out);
    if let Some(dn) = &cert.dn {
        field_line(b"x-ssl-client-dn", dn.as_bytes(), out);
    }
    if let Some(c) = &cert.cert {
        field_line(b"x-ssl-client-cert", c.as_bytes(), out);
    }
}

/// The fields the router says the client's certificate in (see
/// [`crate::tls::client_auth::ClientCert`]).
pub const X_SSL_CLIENT_VERIFY: HeaderName = HeaderName::from_static("x-ssl-client-verify");
pub const X_SSL_CLIENT_DN: HeaderName = HeaderName::from_static("x-ssl-client-dn");
pub const X_SSL_CLIENT_CERT: HeaderName = HeaderName::from_static("x-ssl-client-cert");

/// The request head a member gets, written from the client's fields as they
/// came (the own HTTP/1.1 path; no map built): the request line (`target`:
/// origin form, after the path mappings), the client's fields in order without
/// the hop-by-hop ones and those [`set_forwarded`] replaces, then the
/// forwarding fields as [`set_forwarded`] sets them in a map. The body's
/// framing is the client's `Content-Length`, passed on with its fields.
pub fn encode_for_member(
    (method, target): (&http::Method, &str),
    (fields, added): (&Fields, &[(HeaderName, HeaderValue)]),
    Provenance { conn, trace }: Provenance<'_>,
    host: &HeaderValue,
    out: &mut Vec<u8>,
) {
    let forwarding = forwarding(FieldsRef::Raw(fields), conn, host);
    let none = HeaderMap::new();
    // The fields the app's request actions set come after the client's
    // (which lost every field of those names).
    let added = added.iter().map(|(name, value)| {
        let name = name.as_str().as_bytes();
        (Name::of(name), name, value.as_bytes())
    });
    let fields = end_to_end(fields, &none)
        .filter(|(_, name, _)| !is_underscored(name))
        .chain(added);
    let added = (forwarding, conn, trace, host);
    write_member_head((method, target), fields, added, out);
}

/// The request head a member gets from a client whose fields are in a map
/// (h2, HTTP/3, and the HTTP/1 requests hyper reads), written as
/// [`encode_for_member`] writes it from fields as they came: the map is not
/// changed first (no removal of hop-by-hop fields, no insertion of the
/// forwarding ones: each of those hashes a name; an h2 request spent about a
/// tenth of its instructions in the map). The body's framing is decided here
/// ([`RequestFraming`]), as the map's own writer decided it.
pub fn encode_map_for_member(
    (method, target): (&http::Method, &str),
    headers: &HeaderMap,
    body_len: Option<Option<u64>>,
    Provenance { conn, trace }: Provenance<'_>,
    host: &HeaderValue,
    out: &mut Vec<u8>,
) -> h1_codec::BodyFraming {
    let framing = RequestFraming::of(headers, body_len);
    let forwarding = forwarding(FieldsRef::Map(headers), conn, host);
    // The client's `Content-Length` goes on unless the router frames the body
    // itself.
    let own_framing = matches!(framing, RequestFraming::Add(_) | RequestFraming::Chunked);
    let fields = end_to_end_map(headers).filter(move |(kind, name, _)| {
        !(own_framing && *kind == Name::ContentLength)
            && *kind != Name::TransferEncoding
            && !is_underscored(name)
    });
    let added = (forwarding, conn, trace, host);
    let end = write_member_head((method, target), fields, added, out);
    // The framing field goes after the others, before the blank line.
    out.truncate(end);
    let framing = framing.write(out);
    out.extend_from_slice(b"\r\n");
    framing
}

/// A map's fields the way the member gets them: without the hop-by-hop ones
/// and those a `Connection` field names (except [`protected`] ones), as
/// [`remove_hop_by_hop`] leaves them out. Each with its name's kind.
fn end_to_end_map(headers: &HeaderMap) -> impl Iterator<Item = (Name, &[u8], &[u8])> {
    let named: Vec<&[u8]> = headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| tokens(v.as_bytes()))
        .filter(|t| !t.is_empty() && !protected_bytes(t))
        .collect();
    headers
        .iter()
        .map(|(name, value)| {
            let name = name.as_str().as_bytes();
            (Name::of(name), name, value.as_bytes())
        })
        .filter(move |(kind, name, _)| {
            !kind.is_hop_by_hop()
                && (named.is_empty() || !named.iter().any(|n| n.eq_ignore_ascii_case(name)))
        })
}

/// What the router adds to a member's head: the forwarding fields (as
/// [`forwarding`] decided them) for the client's connection, its trace, and
/// the Host the client sent.
type Added<'a> = (
    (ForwardedField, HeaderValue),
    &'a ClientConn,
    &'a Trace,
    &'a HeaderValue,
);

/// Writes the request line, the client's end-to-end `fields` (those the
/// router replaces left out or put in their place), the forwarding fields and
/// the blank line; returns where the blank line starts. Inline: each of its
/// two callers is the only one of its kind of fields.
#[inline]
fn write_member_head<'a>(
    (method, target): (&http::Method, &str),
    fields: impl Iterator<Item = (Name, &'a [u8], &'a [u8])>,
    ((forwarded, xff), conn, trace, host): Added<'_>,
    out: &mut Vec<u8>,
) -> usize {
    request_line(method, target, out);
    // The request ID and `traceparent` take the place of the client's first
    // such field (as a map's `insert` does), or come last.
    let (mut wrote_id, mut wrote_parent) = (false, false);
    for (kind, name, value) in fields {
        let replaced = match kind {
            Name::Forwarded => !matches!(forwarded, ForwardedField::Keep),
            Name::XRequestId => {
                if !std::mem::replace(&mut wrote_id, true) {
                    field_line(b"x-request-id", trace.request_id.as_bytes(), out);
                }
                true
            }
            Name::Traceparent => {
                if !std::mem::replace(&mut wrote_parent, true) {
                    field_line(b"traceparent", trace.traceparent(), out);
                }
                true
            }
            Name::Tracestate => !trace.keep_state,
            k => k.is_forwarding(),
        };
        if !replaced {
            field_line(name, value, out);
        }
    }
    if let ForwardedField::Set(v) = &forwarded {
        field_line(b"forwarded", v.as_bytes(), out);
    }
    field_line(b"x-forwarded-for", xff.as_bytes(), out);
    field_line(b"x-forwarded-proto", proto(conn).as_bytes(), out);
    field_line(b"x-forwarded-host", host.as_bytes(), out);
    field_line(b"x-forwarded-port", conn.port_value.as_bytes(), out);
    if let Some(cert) = &conn.client_cert {
        client_cert_lines(cert, out);
    }
    if !wrote_id {
        field_line(b"x-request-id", trace.request_id.as_bytes(), out);
    }
    if !wrote_parent {
        field_line(b"traceparent", trace.traceparent(), out);
    }
    let end = out.len();
    out.extend_from_slice(b"\r\n");
    end
}

/// A head as written, for comparing two that may order fields of different
/// names differently and write names in another case: its first line, and each
/// name's values in order (lower-case names; a `trailer` list's lines joined).
#[cfg(test)]
pub(crate) fn head_by_name(
    head: &[u8],
) -> (String, std::collections::BTreeMap<String, Vec<String>>) {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n").filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or_default().to_owned();
    let mut fields = std::collections::BTreeMap::<String, Vec<String>>::new();
    for line in lines {
        let (name, value) = line.split_once(": ").unwrap_or((line, ""));
        let name = name.to_ascii_lowercase();
        let values = fields.entry(name.clone()).or_default();
        match values.last_mut() {
            Some(v) if name == "trailer" => *v = format!("{v}, {value}"),
            _ => values.push(value.to_owned()),
        }
    }
    (first, fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::connection::activity::Activity;
    use crate::request::connection::client_conn::ForwardedSettings;
    use h1_codec::hop::remove_hop_by_hop;
    use per_source::KeyRule;
    use std::net::IpAddr;

    /// The test's oracle: a request head written from a map the way the map says,
    /// changed first (what `encode_map_for_member` must write without changing it).
    ///
    /// `body_len`: `None` when the request has no body to send; otherwise its exact
    /// length if known. The framing follows what the headers say (the client's framing
    /// was checked on the way in: a single `chunked`, or a `Content-Length`); a body
    /// of unknown length without either is sent chunked (h2 clients).
    fn reference_head(
        method: &http::Method,
        target: &str,
        headers: &mut HeaderMap,
        body_len: Option<Option<u64>>,
        out: &mut Vec<u8>,
    ) -> h1_codec::BodyFraming {
        let framing = match body_len {
            None => {
                headers.remove(header::TRANSFER_ENCODING);
                h1_codec::BodyFraming::Empty
            }
            Some(len) => {
                if headers.contains_key(header::TRANSFER_ENCODING) {
                    headers.remove(header::CONTENT_LENGTH);
                    headers.insert(
                        header::TRANSFER_ENCODING,
                        HeaderValue::from_static("chunked"),
                    );
                    h1_codec::BodyFraming::Chunked
                } else if let Some(n) = h1_codec::length::content_length(
                    headers
                        .get_all(header::CONTENT_LENGTH)
                        .iter()
                        .map(HeaderValue::as_bytes),
                )
                .ok()
                .flatten()
                {
                    h1_codec::BodyFraming::Length(n)
                } else if let Some(n) = len {
                    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                    h1_codec::BodyFraming::Length(n)
                } else {
                    headers.insert(
                        header::TRANSFER_ENCODING,
                        HeaderValue::from_static("chunked"),
                    );
                    h1_codec::BodyFraming::Chunked
                }
            }
        };
        out.extend_from_slice(method.as_str().as_bytes());
        out.push(b' ');
        out.extend_from_slice(target.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in headers.iter() {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        framing
    }

    /// A map of `pairs`, in order (`collect` appends).
    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let field = |(k, v): &(&str, &str)| {
            let name = HeaderName::from_bytes(k.as_bytes()).expect("name");
            (name, HeaderValue::from_str(v).expect("value"))
        };
        pairs.iter().map(field).collect()
    }

    #[test]
    fn upgrade_is_asked_by_connection_and_upgrade() {
        assert!(wants_upgrade(&map(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket")
        ])));
        assert!(!wants_upgrade(&map(&[("upgrade", "websocket")])));
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
            KeyRule::default(),
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

    fn conn(ip: &str, https: bool, settings: &ForwardedSettings) -> ClientConn {
        ClientConn::new(
            ip.parse().expect("ip"),
            KeyRule::default(),
            443,
            https,
            Activity::new(None),
        )
        .with_forwarded(settings, Some("192.0.2.10:443".parse().expect("addr")))
    }

    #[test]
    fn the_slot_share_goes_by_the_real_client_only_behind_a_named_proxy() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let lb = ForwardedSettings {
            trusted: vec!["10.0.0.0/8".parse().expect("net")],
            ..ForwardedSettings::default()
        };
        let two = map(&[
            ("x-forwarded-for", "192.0.2.50"),
            ("x-forwarded-for", "203.0.113.9, 198.51.100.7"),
        ]);
        assert_eq!(
            conn("10.0.0.5", false, &lb).client(&two).ip,
            ip("198.51.100.7")
        );
        // Not the named proxy, or the default trust of everyone: its own address.
        assert_eq!(
            conn("192.0.2.1", false, &lb).client(&two).ip,
            ip("192.0.2.1")
        );
        let all = ForwardedSettings::default();
        assert_eq!(
            conn("10.0.0.5", false, &all).client(&two).ip,
            ip("10.0.0.5")
        );
        // A last entry that is no address, or none at all: the proxy's own.
        let junk = map(&[("x-forwarded-for", "203.0.113.9, unknown")]);
        assert_eq!(
            conn("10.0.0.5", false, &lb).client(&junk).ip,
            ip("10.0.0.5")
        );
        assert_eq!(
            conn("10.0.0.5", false, &lb).client(&map(&[])).ip,
            ip("10.0.0.5")
        );
    }

    #[test]
    fn forwarded_is_appended_for_trusted_clients_and_replaced_for_others() {
        let settings = ForwardedSettings {
            header: true,
            by: "_router1".into(),
            trusted: vec!["10.0.0.0/8".parse().expect("net")],
        };
        assert!(settings.by_is_valid());
        let sent = [
            ("forwarded", "for=198.51.100.7;proto=https"),
            ("x-forwarded-for", "198.51.100.7"),
        ];
        // From the trusted load balancer: appended.
        let mut h = map(&sent);
        set_forwarded(
            &mut h,
            &conn("10.1.2.3", true, &settings),
            &HeaderValue::from_static("Shop.example.com:8443"),
        );
        assert_eq!(
            h["forwarded"],
            "for=198.51.100.7;proto=https, for=10.1.2.3;proto=https;by=_router1;host=\"Shop.example.com:8443\""
        );
        assert_eq!(h["x-forwarded-for"], "198.51.100.7, 10.1.2.3");
        // From anyone else: replaced, so the chain cannot be forged.
        let mut h = map(&sent);
        set_forwarded(
            &mut h,
            &conn("203.0.113.5", false, &settings),
            &HeaderValue::from_static("a.test"),
        );
        assert_eq!(
            h["forwarded"],
            "for=203.0.113.5;proto=http;by=_router1;host=\"a.test\""
        );
        assert_eq!(h["x-forwarded-for"], "203.0.113.5");
        // IPv6 nodes are bracketed and quoted; by=ip is the local address.
        let ip = ForwardedSettings {
            header: true,
            by: "ip".into(),
            ..ForwardedSettings::default()
        };
        let mut h = HeaderMap::new();
        set_forwarded(
            &mut h,
            &conn("2001:db8::1", true, &ip),
            &HeaderValue::from_static("a.test"),
        );
        assert_eq!(
            h["forwarded"],
            "for=\"[2001:db8::1]\";proto=https;by=\"192.0.2.10:443\";host=\"a.test\""
        );
    }

    #[test]
    fn without_the_header_an_untrusted_clients_forwarded_is_dropped() {
        let settings = ForwardedSettings {
            trusted: vec!["10.0.0.0/8".parse().expect("net")],
            ..ForwardedSettings::default()
        };
        let mut h = map(&[("forwarded", "for=1.2.3.4"), ("x-forwarded-for", "1.2.3.4")]);
        set_forwarded(
            &mut h,
            &conn("203.0.113.5", false, &settings),
            &HeaderValue::from_static("a.test"),
        );
        assert!(!h.contains_key("forwarded"));
        assert_eq!(h["x-forwarded-for"], "203.0.113.5");
        // The default trusts everyone: the router appends, as it always has.
        let mut h = map(&[("x-forwarded-for", "1.2.3.4")]);
        set_forwarded(
            &mut h,
            &conn("203.0.113.5", false, &ForwardedSettings::default()),
            &HeaderValue::from_static("a.test"),
        );
        assert_eq!(h["x-forwarded-for"], "1.2.3.4, 203.0.113.5");
        assert!(
            !ForwardedSettings {
                by: "router".into(),
                ..ForwardedSettings::default()
            }
            .by_is_valid()
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// The head a member gets from the client's fields as they came (the own
        /// path, no map) says what the map path's says: the same request line
        /// and each name's values, hop-by-hop fields and the forwarding family
        /// handled alike, for trusted and untrusted clients, with `Forwarded`
        /// on and off, and the request ID and trace context set alike.
        #[test]
        fn a_request_written_from_its_fields_says_what_its_map_says(
            fields in proptest::collection::vec((
                proptest::sample::select(vec![
                    "Host", "Accept", "Cookie", "X-Forwarded-For", "x-forwarded-for",
                    "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Port",
                    "Forwarded", "Keep-Alive", "TE", "Connection", "Upgrade",
                    "Proxy-Connection", "Content-Length", "X-A", "X-Request-Id",
                    "traceparent", "tracestate",
                ]),
                proptest::sample::select(vec![
                    "1", "a.example", "keep-alive", "203.0.113.9, 198.51.100.7",
                    "for=192.0.2.60", "x-a", "X-A, keep-alive", "https", "v w",
                ]),
            ), 0..10),
            trusted in proptest::prelude::any::<bool>(),
            header in proptest::prelude::any::<bool>(),
            https in proptest::prelude::any::<bool>(),
            body_len in proptest::sample::select(vec![None, Some(Some(5u64)), Some(None)]),
        ) {
            let mut head = String::from("GET /p?q=1 HTTP/1.1\r\n");
            for (n, v) in &fields {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let raw = Fields::of_head(head.as_bytes()).expect("a whole head");
            let settings = ForwardedSettings {
                header,
                by: String::new(),
                trusted: if trusted { ForwardedSettings::default().trusted } else { vec!["10.0.0.0/8".parse().expect("net")] },
            };
            let conn = conn("192.0.2.1", https, &settings);
            let host = HeaderValue::from_static("a.example");
            let mut written = Vec::new();
            let trace = super::super::trace::Trace::of(FieldsRef::Raw(&raw), conn.trusted(), Default::default());
            encode_for_member((&http::Method::GET, "/p?q=1"), (&raw, &[]), Provenance { conn: &conn, trace: &trace }, &host, &mut written);
            let mut map = raw.to_map(6);
            remove_hop_by_hop(&mut map, false);
            set_forwarded(&mut map, &conn, &host);
            trace.set_in(&mut map);
            let mut mapped = Vec::new();
            reference_head(&http::Method::GET, "/p?q=1", &mut map, None, &mut mapped);
            proptest::prop_assert_eq!(head_by_name(&written), head_by_name(&mapped));
            // Written from an untouched map (h2 and hyper's HTTP/1 clients), with
            // a body or not: what the map, changed and then written, says; and
            // a chunked body never carries a `Content-Length` beside it.
            let mut from_map = Vec::new();
            let untouched = raw.to_map(6);
            let framing = encode_map_for_member(
                (&http::Method::GET, "/p?q=1"), &untouched, body_len, Provenance { conn: &conn, trace: &trace }, &host, &mut from_map,
            );
            let mut mapped = Vec::new();
            let mut map = raw.to_map(6);
            remove_hop_by_hop(&mut map, false);
            set_forwarded(&mut map, &conn, &host);
            trace.set_in(&mut map);
            let want = reference_head(&http::Method::GET, "/p?q=1", &mut map, body_len, &mut mapped);
            proptest::prop_assert_eq!(&framing, &want);
            let (line, mut fields) = head_by_name(&mapped);
            if framing == h1_codec::BodyFraming::Chunked {
                fields.remove("content-length");
            }
            proptest::prop_assert_eq!(head_by_name(&from_map), (line, fields));
            proptest::prop_assert!(from_map.ends_with(b"\r\n\r\n"));
        }
    }
}
