//! The request head a member gets: written from the client's fields as they
//! came (the own HTTP/1.1 path) or from a map (h2, HTTP/3, hyper's HTTP/1),
//! the same head either way: the request line, the client's end-to-end fields
//! (those the router replaces left out or put in their place), the forwarding
//! fields ([`super::forwarding`]), the trace context, and the body's framing.

use h1_codec::encode::field_line;
use h1_codec::encode::request::{RequestFraming, RequestLine};
use h1_codec::fields::{Fields, FieldsRef, Name};
use h1_codec::hop::{end_to_end, protected_bytes, tokens};
use h1_codec::request::is_underscored;
use http::header::{self, HeaderMap, HeaderValue};

use super::forwarding::{ForwardedField, client_cert_lines, forwarding, proto};
use crate::policy::fields::RequestSets;
use crate::request::connection::client_conn::ClientConn;
use crate::request::phases::trace::{Provenance, Trace};

/// The request head a member gets, written from the client's fields as they
/// came (the own HTTP/1.1 path; no map built): the request line (`target`:
/// origin form, after the path mappings), the client's fields in order without
/// the hop-by-hop ones and those [`set_forwarded`] replaces, then the
/// forwarding fields as [`set_forwarded`] sets them in a map. The body's
/// framing is the client's `Content-Length`, passed on with its fields.
pub fn encode_for_member(
    line: RequestLine<'_>,
    (fields, sets): (&Fields, Option<&RequestSets<'_>>),
    Provenance { conn, trace }: Provenance<'_>,
    host: &HeaderValue,
    out: &mut Vec<u8>,
) {
    let forwarding = forwarding(FieldsRef::Raw(fields), conn, host);
    let none = HeaderMap::new();
    let fields = end_to_end(fields, &none).filter(|(_, name, _)| !is_underscored(name));
    let added = (forwarding, conn, trace, host);
    // The fields the app's request actions set come after the client's
    // (which lost every field of those names).
    let sets = |out: &mut Vec<u8>| {
        if let Some(sets) = sets {
            sets.write(out);
        }
    };
    write_member_head(line, fields, (added, sets), out);
}

/// The request head a member gets from a client whose fields are in a map
/// (h2, HTTP/3, and the HTTP/1 requests hyper reads), written as
/// [`encode_for_member`] writes it from fields as they came: the map is not
/// changed first (no removal of hop-by-hop fields, no insertion of the
/// forwarding ones: each of those hashes a name; an h2 request spent about a
/// tenth of its instructions in the map). The body's framing is decided here
/// ([`RequestFraming`]), as the map's own writer decided it.
pub fn encode_map_for_member(
    line: RequestLine<'_>,
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
    let end = write_member_head(line, fields, (added, |_: &mut Vec<u8>| {}), out);
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
    line: RequestLine<'_>,
    fields: impl Iterator<Item = (Name, &'a [u8], &'a [u8])>,
    (((forwarded, xff), conn, trace, host), sets): (Added<'_>, impl FnOnce(&mut Vec<u8>)),
    out: &mut Vec<u8>,
) -> usize {
    line.write(out);
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
    sets(out);
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
