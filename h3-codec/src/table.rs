//! QPACK's static table (RFC 9204 Appendix A): the 99 fields both ends know by
//! index.

/// Index → (name, value).
pub const STATIC: [(&str, &str); 99] = [
    (":authority", ""),
    (":path", "/"),
    ("age", "0"),
    ("content-disposition", ""),
    ("content-length", "0"),
    ("cookie", ""),
    ("date", ""),
    ("etag", ""),
    ("if-modified-since", ""),
    ("if-none-match", ""),
    ("last-modified", ""),
    ("link", ""),
    ("location", ""),
    ("referer", ""),
    ("set-cookie", ""),
    (":method", "CONNECT"),
    (":method", "DELETE"),
    (":method", "GET"),
    (":method", "HEAD"),
    (":method", "OPTIONS"),
    (":method", "POST"),
    (":method", "PUT"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "103"),
    (":status", "200"),
    (":status", "304"),
    (":status", "404"),
    (":status", "503"),
    ("accept", "*/*"),
    ("accept", "application/dns-message"),
    ("accept-encoding", "gzip, deflate, br"),
    ("accept-ranges", "bytes"),
    ("access-control-allow-headers", "cache-control"),
    ("access-control-allow-headers", "content-type"),
    ("access-control-allow-origin", "*"),
    ("cache-control", "max-age=0"),
    ("cache-control", "max-age=2592000"),
    ("cache-control", "max-age=604800"),
    ("cache-control", "no-cache"),
    ("cache-control", "no-store"),
    ("cache-control", "public, max-age=31536000"),
    ("content-encoding", "br"),
    ("content-encoding", "gzip"),
    ("content-type", "application/dns-message"),
    ("content-type", "application/javascript"),
    ("content-type", "application/json"),
    ("content-type", "application/x-www-form-urlencoded"),
    ("content-type", "image/gif"),
    ("content-type", "image/jpeg"),
    ("content-type", "image/png"),
    ("content-type", "text/css"),
    ("content-type", "text/html; charset=utf-8"),
    ("content-type", "text/plain"),
    ("content-type", "text/plain;charset=utf-8"),
    ("range", "bytes=0-"),
    ("strict-transport-security", "max-age=31536000"),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains",
    ),
    (
        "strict-transport-security",
        "max-age=31536000; includesubdomains; preload",
    ),
    ("vary", "accept-encoding"),
    ("vary", "origin"),
    ("x-content-type-options", "nosniff"),
    ("x-xss-protection", "1; mode=block"),
    (":status", "100"),
    (":status", "204"),
    (":status", "206"),
    (":status", "302"),
    (":status", "400"),
    (":status", "403"),
    (":status", "421"),
    (":status", "425"),
    (":status", "500"),
    ("accept-language", ""),
    ("access-control-allow-credentials", "FALSE"),
    ("access-control-allow-credentials", "TRUE"),
    ("access-control-allow-headers", "*"),
    ("access-control-allow-methods", "get"),
    ("access-control-allow-methods", "get, post, options"),
    ("access-control-allow-methods", "options"),
    ("access-control-expose-headers", "content-length"),
    ("access-control-request-headers", "content-type"),
    ("access-control-request-method", "get"),
    ("access-control-request-method", "post"),
    ("alt-svc", "clear"),
    ("authorization", ""),
    (
        "content-security-policy",
        "script-src 'none'; object-src 'none'; base-uri 'none'",
    ),
    ("early-data", "1"),
    ("expect-ct", ""),
    ("forwarded", ""),
    ("if-range", ""),
    ("origin", ""),
    ("purpose", "prefetch"),
    ("server", ""),
    ("timing-allow-origin", "*"),
    ("upgrade-insecure-requests", "1"),
    ("user-agent", ""),
    ("x-forwarded-for", ""),
    ("x-frame-options", "deny"),
    ("x-frame-options", "sameorigin"),
];

/// The first index with this name (entries of one name follow each other,
/// except `:status` and `access-control-allow-headers`, whose later runs the
/// encoder does not look for).
pub fn first_with_name(name: &str) -> Option<usize> {
    Some(match name {
        "age" => 2,
        "content-disposition" => 3,
        "content-length" => 4,
        "cookie" => 5,
        "date" => 6,
        "etag" => 7,
        "if-modified-since" => 8,
        "if-none-match" => 9,
        "last-modified" => 10,
        "link" => 11,
        "location" => 12,
        "referer" => 13,
        "set-cookie" => 14,
        "accept" => 29,
        "accept-encoding" => 31,
        "accept-ranges" => 32,
        "access-control-allow-headers" => 33,
        "access-control-allow-origin" => 35,
        "cache-control" => 36,
        "content-encoding" => 42,
        "content-type" => 44,
        "range" => 55,
        "strict-transport-security" => 56,
        "vary" => 59,
        "x-content-type-options" => 61,
        "x-xss-protection" => 62,
        "accept-language" => 72,
        "access-control-allow-credentials" => 73,
        "access-control-allow-methods" => 76,
        "access-control-expose-headers" => 79,
        "access-control-request-headers" => 80,
        "access-control-request-method" => 81,
        "alt-svc" => 83,
        "authorization" => 84,
        "content-security-policy" => 85,
        "early-data" => 86,
        "expect-ct" => 87,
        "forwarded" => 88,
        "if-range" => 89,
        "origin" => 90,
        "purpose" => 91,
        "server" => 92,
        "timing-allow-origin" => 93,
        "upgrade-insecure-requests" => 94,
        "user-agent" => 95,
        "x-forwarded-for" => 96,
        "x-frame-options" => 97,
        _ => return None,
    })
}

/// The index of `:status` with this code, if the table has it.
pub fn status(code: u16) -> Option<usize> {
    Some(match code {
        103 => 24,
        200 => 25,
        304 => 26,
        404 => 27,
        503 => 28,
        100 => 63,
        204 => 64,
        206 => 65,
        302 => 66,
        400 => 67,
        403 => 68,
        421 => 69,
        425 => 70,
        500 => 71,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_lookup_finds_the_first_entry_of_its_name() {
        for (i, (name, _)) in STATIC.iter().enumerate() {
            if name.starts_with(':') {
                continue;
            }
            let first = STATIC.iter().position(|(n, _)| n == name);
            assert_eq!(first_with_name(name), first, "{name} at {i}");
        }
        for (i, (name, value)) in STATIC.iter().enumerate() {
            if *name == ":status" {
                assert_eq!(status(value.parse().expect("a code")), Some(i));
            }
        }
    }
}
