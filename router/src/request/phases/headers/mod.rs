//! Header rewriting between client and member, by what it serves:
//! [`forwarding`] (the `X-Forwarded-*` family, RFC 7239's `Forwarded` when
//! asked for, the client certificate's fields, and the trust rule that decides
//! them) and [`member_head`] (the request head a member gets, written from the
//! client's fields as they came or from a map, with the forwarding fields in
//! place). What is hop-by-hop is h1-codec's (`h1_codec::hop`), the same rule
//! both ways. Here too: whether a request asks to switch protocols, and the
//! one rule for field names with `_`.
//!
//! Everything else passes untouched, in order: Host, cookies (the gear haproxy's
//! `GEAR` stickiness cookie), authorization, and so on.

pub mod forwarding;
pub mod member_head;

use h1_codec::fields::{FieldsRef, Name};
use h1_codec::hop::has_token;
use h1_codec::request::is_underscored;
use http::header::{HeaderMap, HeaderName};

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
mod tests;
