//! The forwarding fields a member gets: `X-Forwarded-For` (appended to),
//! `X-Forwarded-Proto/Host/Port`, RFC 7239's `Forwarded` when asked for, and
//! what the client's certificate says (`X-SSL-Client-*`).
//!
//! **Trust rule**: what a client sent in `X-Forwarded-For` and `Forwarded` is kept
//! (and the router appends itself) only when the client's address is in
//! `forwarded.trusted`; from any other client both are replaced by what the router
//! saw, so a client cannot forge the chain. The default trusts every address (the
//! router has always appended, as OpenShift's router does by default): narrow it to
//! the load balancers or CDNs in front of the router.

use h1_codec::encode::field_line;
use h1_codec::fields::{FieldsRef, Name};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::request::connection::client_conn::ClientConn;

pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub const X_FORWARDED_PORT: HeaderName = HeaderName::from_static("x-forwarded-port");

pub const FORWARDED: HeaderName = header::FORWARDED;

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
pub(super) enum ForwardedField {
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
pub(super) fn forwarding(
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
pub(super) fn proto(conn: &ClientConn) -> HeaderValue {
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
pub(super) fn client_cert_lines(cert: &crate::tls::client_auth::ClientCert, out: &mut Vec<u8>) {
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
