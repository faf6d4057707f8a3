//! The admin API's small answers and query helpers.

use super::*;

pub(super) fn json<T: Serialize>(doc: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(doc) {
        Ok(json) => {
            let mut r = Response::new(Full::new(Bytes::from(json)));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
    }
}

/// `k=v` pairs of a query string (none without one).
pub(super) fn query_params(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.split_once('='))
}

/// `%3A` and friends, for clients that escape the `:` or brackets of an address.
/// A `%` not followed by two hex digits is refused (a typo must not be remembered).
pub(super) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let malformed = b.iter().enumerate().any(|(i, c)| {
        *c == b'%'
            && !b
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    percent_encoding::percent_decode(b)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// An embedded file of the status page: it may load only itself (no other origin,
/// no inline script), and is never framed.
pub(super) fn asset(body: &'static str, kind: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(kind));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("default-src 'self'; frame-ancestors 'none'"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-store"),
    );
    r
}

pub(super) fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::copy_from_slice(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// The body, up to `limit` bytes within `deadline`: 413 beyond, 408 late, 400 if it
/// breaks off.
pub(super) async fn read_limited(
    body: Incoming,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, StatusCode> {
    use http_body_util::BodyExt;
    let read = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout(deadline, read).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        }
        Ok(Err(_)) => Err(StatusCode::BAD_REQUEST),
        Err(_) => Err(StatusCode::REQUEST_TIMEOUT),
    }
}
