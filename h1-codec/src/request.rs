//! What a client's request fields may say before a member sees them: the two
//! rules a proxy and the servers behind it must agree on, in one place.
//!
//! - [`framing_is_clear`]: the body's length is beyond doubt, or the request is
//!   refused (400), as the framing reader ([`crate::framing`]) refuses on the
//!   wire what hyper would otherwise let through.
//! - [`is_underscored`]: a field name with `_` never reaches a member. CGI, WSGI,
//!   Rack, PHP and most frameworks after them name a field `HTTP_` plus its name
//!   with `-` turned into `_`, so `Transfer_Encoding: chunked` beside
//!   `Content-Length: 5` reaches such an app as a `Transfer-Encoding` it never
//!   saw framed (an external smuggling scanner's `underjoin1` shape), and
//!   `X_Forwarded_For` as the `X-Forwarded-For` the router sets. The field is
//!   dropped, not refused: nginx does the same by default
//!   (`underscores_in_headers off`), so clients and apps that rely on such names
//!   are already rare, and a 400 would break a request that is harmless once the
//!   field is gone.

use crate::fields::{FieldsRef, Name};

/// Whether an HTTP/1 request's body length is beyond doubt (RFC 9112 §6): with a
/// `Transfer-Encoding`, it must be HTTP/1.1, name exactly one coding, `chunked`
/// (over one header or several), and come without `Content-Length`. Anything else
/// is how request smuggling makes two parsers disagree: `Content-Length` beside
/// `Transfer-Encoding` (hyper would let chunked win), `chunked` twice, or a coding
/// the router would drop with the hop-by-hop header (`gzip, chunked`).
/// (Malformed `Content-Length` values and codings not ending in `chunked` never
/// get here: hyper answers 400 itself.) A name spelled with `_` is none of these:
/// it is dropped ([`is_underscored`]), so the member frames the body as this did.
pub fn framing_is_clear<'a>(fields: impl Into<FieldsRef<'a>>, version: http::Version) -> bool {
    let fields = fields.into();
    let mut codings = fields.values(Name::TransferEncoding).peekable();
    if codings.peek().is_none() {
        return true;
    }
    if version != http::Version::HTTP_11 || fields.contains(Name::ContentLength) {
        return false;
    }
    let mut chunked = 0;
    for value in codings {
        // Visible ASCII only (what `HeaderValue::to_str` takes).
        let Some(text) = std::str::from_utf8(value)
            .ok()
            .filter(|t| t.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)))
        else {
            return false;
        };
        for coding in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !coding.eq_ignore_ascii_case("chunked") {
                return false;
            }
            chunked += 1;
        }
    }
    chunked == 1
}

/// Whether a request field's name holds `_`: such a field is dropped before the
/// request goes to a member (see the module's doc for why).
pub fn is_underscored(name: &[u8]) -> bool {
    memchr::memchr(b'_', name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_map as map;

    #[test]
    fn framing_is_clear_only_for_one_chunked_or_none() {
        let v11 = http::Version::HTTP_11;
        let clear = |pairs: &[(&str, &str)]| framing_is_clear(&map(pairs), v11);
        assert!(clear(&[]));
        assert!(clear(&[("content-length", "5")]));
        assert!(clear(&[("transfer-encoding", "chunked")]));
        assert!(clear(&[("transfer-encoding", "Chunked ")]));
        assert!(!clear(&[
            ("transfer-encoding", "chunked"),
            ("content-length", "5")
        ]));
        assert!(!clear(&[("transfer-encoding", "chunked, chunked")]));
        assert!(!clear(&[
            ("transfer-encoding", "chunked"),
            ("transfer-encoding", "chunked")
        ]));
        assert!(!clear(&[("transfer-encoding", "gzip, chunked")]));
        assert!(!clear(&[("transfer-encoding", "xchunked")]));
        assert!(!clear(&[("transfer-encoding", "")]));
        assert!(!framing_is_clear(
            &map(&[("transfer-encoding", "chunked")]),
            http::Version::HTTP_10
        ));
        // Spelled with `_`, it frames nothing here (and is dropped on the way).
        assert!(clear(&[
            ("transfer_encoding", "chunked"),
            ("content-length", "5")
        ]));
    }

    #[test]
    fn underscored_names_are_the_ones_with_an_underscore() {
        for name in [
            "Transfer_Encoding",
            "content_length",
            "X_Forwarded_For",
            "_",
            "a_",
        ] {
            assert!(is_underscored(name.as_bytes()), "{name}");
        }
        for name in ["Transfer-Encoding", "X-Forwarded-For", "host", ""] {
            assert!(!is_underscored(name.as_bytes()), "{name}");
        }
    }
}
