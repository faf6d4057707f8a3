//! HPACK's static table (RFC 7541 Appendix A): 61 entries, index 1 first.

/// The static table; entry `i` (1 to 61) at `STATIC[i - 1]`.
pub const STATIC: [(&str, &str); 61] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
    ("accept-charset", ""),
    ("accept-encoding", "gzip, deflate"),
    ("accept-language", ""),
    ("accept-ranges", ""),
    ("accept", ""),
    ("access-control-allow-origin", ""),
    ("age", ""),
    ("allow", ""),
    ("authorization", ""),
    ("cache-control", ""),
    ("content-disposition", ""),
    ("content-encoding", ""),
    ("content-language", ""),
    ("content-length", ""),
    ("content-location", ""),
    ("content-range", ""),
    ("content-type", ""),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("expect", ""),
    ("expires", ""),
    ("from", ""),
    ("host", ""),
    ("if-match", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("if-range", ""),
    ("if-unmodified-since", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("max-forwards", ""),
    ("proxy-authenticate", ""),
    ("proxy-authorization", ""),
    ("range", ""),
    ("referer", ""),
    ("refresh", ""),
    ("retry-after", ""),
    ("server", ""),
    ("set-cookie", ""),
    ("strict-transport-security", ""),
    ("transfer-encoding", ""),
    ("user-agent", ""),
    ("vary", ""),
    ("via", ""),
    ("www-authenticate", ""),
];

/// The static index of a response field's name, for the names a response
/// carries (`None`: written as a literal name).
pub fn name_index(name: &str) -> Option<u8> {
    Some(match name {
        "accept-ranges" => 18,
        "access-control-allow-origin" => 20,
        "age" => 21,
        "allow" => 22,
        "cache-control" => 24,
        "content-disposition" => 25,
        "content-encoding" => 26,
        "content-language" => 27,
        "content-length" => 28,
        "content-location" => 29,
        "content-range" => 30,
        "content-type" => 31,
        "date" => 33,
        "etag" => 34,
        "expires" => 36,
        "last-modified" => 44,
        "link" => 45,
        "location" => 46,
        "proxy-authenticate" => 48,
        "refresh" => 52,
        "retry-after" => 53,
        "server" => 54,
        "set-cookie" => 55,
        "strict-transport-security" => 56,
        "vary" => 59,
        "via" => 60,
        "www-authenticate" => 61,
        _ => return None,
    })
}

/// The static index of `:status` with `code`'s value, when there is one.
pub fn status_index(code: u16) -> Option<u8> {
    Some(match code {
        200 => 8,
        204 => 9,
        206 => 10,
        304 => 11,
        400 => 12,
        404 => 13,
        500 => 14,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_indexes_name_their_entries() {
        for (name, _) in STATIC.iter().skip(14) {
            if let Some(i) = name_index(name) {
                assert_eq!(STATIC[usize::from(i) - 1].0, *name);
            }
        }
        for code in [200, 204, 206, 304, 400, 404, 500] {
            let i = status_index(code).expect("indexed");
            assert_eq!(STATIC[usize::from(i) - 1], (":status", &*code.to_string()));
        }
        assert_eq!(STATIC.len(), 61);
        assert_eq!(STATIC[60].0, "www-authenticate");
    }
}
