//! Which fields of an HTTP/1 message are for this hop only (RFC 9110 §7.6.1):
//! the hop-by-hop ones and those a `Connection` field names. One rule for a map
//! ([`remove_hop_by_hop`]) and for fields as they came ([`end_to_end`]), the
//! same in both directions (a client's request on its way to a member, a
//! member's response on its way to a client).
//!
//! Never removed because a `Connection` field names them ([`protected`]):
//! `Host` (the next hop needs it) and the `X-Forwarded-*` family, which a proxy
//! sets itself (`Connection: host` must not strip the Host on the way).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};

use crate::fields::{Fields, FieldsRef, Name};

/// Whether a `Connection` value names `close`, token by token from the bytes (a
/// byte outside ASCII in one token does not hide the others).
pub fn says_close(value: &[u8]) -> bool {
    tokens(value).any(|t| t.eq_ignore_ascii_case(b"close"))
}

/// The comma-separated tokens of a list value, trimmed, read from the bytes.
pub fn tokens(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|b| *b == b',').map(<[u8]>::trim_ascii)
}

pub fn has_token(value: &[u8], token: &str) -> bool {
    // Visible ASCII only (what `HeaderValue::to_str` takes).
    value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
        && tokens(value).any(|t| t.eq_ignore_ascii_case(token.as_bytes()))
}

/// Never removed because a `Connection` header names them: the member needs Host,
/// and the router sets the `X-Forwarded-*` family itself (`Connection: host` must not
/// strip the Host header on its way to the member).
pub fn protected(name: &HeaderName) -> bool {
    *name == header::HOST || name.as_str().starts_with("x-forwarded-")
}

/// Removes hop-by-hop headers and every header the `Connection` headers name (all of
/// them, however many there are), except [`protected`] ones.
/// With `keep_upgrade`, `Connection: upgrade` and `Upgrade` survive so that the next
/// hop can switch protocols too.
///
/// Most messages carry none of these or one: one pass over the names finds out,
/// and only the names present are removed (each removal hashes a name; this runs
/// twice per request).
pub fn remove_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    // Which of them are here: usually none, or one (`Connection`, `Keep-Alive` or
    // `Transfer-Encoding`), and only those are removed.
    let mut present = [false; 6];
    for k in headers.keys() {
        if let Some(i) = hop_by_hop_index(k) {
            present[i] = true;
        }
    }
    if !present.contains(&true) {
        return;
    }
    // Token by token from the bytes: a byte outside ASCII in one token must not
    // hide the others (found by the `client_stream` fuzz target: `Connection:
    // x-drop, cl\xe9se` forwarded X-Drop).
    let named: Vec<HeaderName> = if present[0] {
        headers
            .get_all(header::CONNECTION)
            .iter()
            .flat_map(|v| tokens(v.as_bytes()))
            .filter_map(|t| HeaderName::from_bytes(t).ok())
            .filter(|n| !(protected(n) || (keep_upgrade && *n == header::UPGRADE)))
            .collect()
    } else {
        Vec::new()
    };
    for name in named {
        headers.remove(name);
    }
    for (kind, _) in Name::HOP_BY_HOP
        .iter()
        .zip(present)
        .filter(|(_, here)| *here)
    {
        if keep_upgrade && matches!(kind, Name::Connection | Name::Upgrade) {
            continue;
        }
        if let Some(name) = kind.header_name() {
            headers.remove(name);
        }
    }
    if keep_upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// A member's fields as they came, the way the client gets them: in order,
/// without the hop-by-hop ones and those a `Connection` field names (except
/// [`protected`] ones), as [`remove_hop_by_hop`] leaves them out of a map, and
/// without those the router puts in place of the member's (`added`: any name
/// there but `Set-Cookie`, which is added to the member's). Each with its
/// name's kind.
pub fn end_to_end<'a>(
    fields: &'a Fields,
    added: &'a HeaderMap,
) -> impl Iterator<Item = (Name, &'a [u8], &'a [u8])> + 'a {
    // Most responses have no `Connection` field, or name nothing in it.
    let named: Vec<&[u8]> = fields
        .get_all(Name::Connection)
        .flat_map(tokens)
        .filter(|t| !t.is_empty() && !protected_bytes(t))
        .collect();
    fields.iter_named().filter(move |(kind, name, _)| {
        if kind.is_hop_by_hop() {
            return false;
        }
        if !named.is_empty() && named.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return false;
        }
        added.is_empty()
            || *kind == Name::SetCookie
            || !added
                .keys()
                .any(|k| k.as_str().as_bytes().eq_ignore_ascii_case(name))
    })
}

/// A member's fields and the router's additions as one map, for a server that
/// takes one (hyper's, h3's): the member's without the hop-by-hop ones, then
/// `added` (`Set-Cookie` added to the member's, any other name in place of it).
/// What [`end_to_end`] writes, as a map.
pub fn member_map(fields: &Fields, added: &mut HeaderMap) {
    // The member's end-to-end fields as `end_to_end` gives them (never put in
    // the map and taken out again: each removal hashes a name), then `added`,
    // whose names other than `Set-Cookie` were left out of the member's.
    let mut map = HeaderMap::with_capacity(fields.len() + added.len());
    for (_, name, value) in end_to_end(fields, added) {
        if let (Ok(name), Some(value)) = (
            HeaderName::from_bytes(name),
            FieldsRef::Raw(fields).header_value(value),
        ) {
            map.append(name, value);
        }
    }
    let mut current: Option<HeaderName> = None;
    for (name, value) in std::mem::take(added).into_iter() {
        match name {
            Some(name) => {
                map.append(name.clone(), value);
                current = Some(name);
            }
            None => {
                if let Some(name) = &current {
                    map.append(name.clone(), value);
                }
            }
        }
    }
    *added = map;
}

/// [`protected`] for a name as bytes (any case).
pub fn protected_bytes(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"host")
        || name
            .get(..12)
            .is_some_and(|p| p.eq_ignore_ascii_case(b"x-forwarded-"))
}

/// `name`'s place in [`Name::HOP_BY_HOP`], by its text: no array of names
/// made, compared and dropped per field.
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    let kind = Name::of(name.as_str().as_bytes());
    Name::HOP_BY_HOP.iter().position(|h| *h == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_names_are_found_by_text_in_their_order() {
        for (i, kind) in Name::HOP_BY_HOP.iter().enumerate() {
            let name = kind.header_name().expect("a name");
            assert_eq!(hop_by_hop_index(&name), Some(i), "{name}");
        }
        assert_eq!(hop_by_hop_index(&header::HOST), None);
    }

    use crate::test_map as map;

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
    fn a_non_ascii_token_does_not_hide_the_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_bytes(b"x-drop, cl\xe9se").expect("obs-text is a valid value"),
        );
        h.insert("x-drop", HeaderValue::from_static("1"));
        remove_hop_by_hop(&mut h, false);
        assert!(h.is_empty(), "{h:?}");
    }

    #[test]
    fn upgrade_survives_when_asked() {
        let mut h = map(&[("connection", "Upgrade"), ("upgrade", "websocket")]);
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
}
