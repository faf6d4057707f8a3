//! A strict HTTP/1.1 request reader written from RFC 9112 alone, sharing no code
//! with the router: the fuzzer's second opinion on where each request of a byte
//! stream begins and ends, and what it says.
//!
//! Strict on purpose: it reads a request only if every reader must read it the same
//! way (CRLF line ends, no obsolete folding, one framing, `Transfer-Encoding` only
//! `chunked`, equal `Content-Length` values, exactly one `Host` in HTTP/1.1, no
//! fragment, no control bytes). The router may refuse more than this (limits, a
//! `404` for an unknown Host); it must never forward less strict input, and what it
//! forwards must be what this reader read.

/// One request as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Vec<u8>,
    pub target: Vec<u8>,
    /// `HTTP/1.0` or `HTTP/1.1`.
    pub minor: u8,
    /// In arrival order: the name in lower case, the value without surrounding
    /// blanks.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body's bytes (chunked: decoded).
    pub body: Vec<u8>,
    /// Whether it came chunked.
    pub chunked: bool,
}

/// Why reading stopped short of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The bytes end inside a request (or there are none).
    Incomplete,
    /// Not a request every reader reads the same way.
    Invalid(&'static str),
}

/// How large a head this reader takes.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub fields: usize,
    pub bytes: usize,
}

/// A client's request: what this reader calls valid.
pub const CLIENT: Bounds = Bounds {
    fields: 100,
    bytes: 8192,
};

/// What the member may get for a valid client request: the router adds up to
/// seven fields (`X-Forwarded-For`, `-Proto`, `-Host`, `-Port`, `Forwarded`,
/// `X-Request-Id`, `traceparent`), the host and the client's address among
/// their values, so the head may grow by that much. (Found by the fuzzer: a
/// client head of 100 fields reached the member with 104, which a reader
/// holding the member to the client's bounds refused.)
pub const MEMBER: Bounds = Bounds {
    fields: CLIENT.fields + 7,
    bytes: 4 * CLIENT.bytes,
};

/// Reads the client request at the start of `bytes`: it and the bytes it took.
pub fn next(bytes: &[u8]) -> Result<(Request, usize), Stop> {
    next_within(bytes, CLIENT)
}

/// [`next`] within other bounds (the member's side: [`MEMBER`]).
pub fn next_within(bytes: &[u8], bounds: Bounds) -> Result<(Request, usize), Stop> {
    let mut at = 0;
    // RFC 9112 §2.2: empty lines before a request line may be ignored.
    while bytes[at..].starts_with(b"\r\n") {
        at += 2;
    }
    let (line, next) = line_at(bytes, at)?;
    let (method, target, minor) = request_line(line)?;
    at = next;
    let mut fields = Vec::new();
    loop {
        let (line, next) = line_at(bytes, at)?;
        at = next;
        if line.is_empty() {
            break;
        }
        fields.push(field(line)?);
        if fields.len() > bounds.fields || at > bounds.bytes {
            return Err(Stop::Invalid("head too large"));
        }
    }
    let mut request = Request {
        method,
        target,
        minor,
        fields,
        body: Vec::new(),
        chunked: false,
    };
    check_host(&request)?;
    match framing(&request)? {
        Framing::Length(n) => {
            let n = usize::try_from(n).map_err(|_| Stop::Invalid("length too large"))?;
            let end = at.checked_add(n).ok_or(Stop::Invalid("length too large"))?;
            let body = bytes.get(at..end).ok_or(Stop::Incomplete)?;
            request.body = body.to_vec();
            at = end;
        }
        Framing::Chunked => {
            request.chunked = true;
            at = chunked(bytes, at, &mut request.body)?;
        }
    }
    Ok((request, at))
}

/// Every request `bytes` holds from its start, and why reading stopped; after a
/// request that ends its connection, nothing more is read.
pub fn all(bytes: &[u8]) -> (Vec<Request>, Stop) {
    let mut requests = Vec::new();
    let mut at = 0;
    loop {
        if at == bytes.len() {
            return (requests, Stop::Incomplete);
        }
        match next(&bytes[at..]) {
            Ok((request, used)) => {
                let last = closes(&request);
                requests.push(request);
                at += used;
                if last {
                    return (requests, Stop::Incomplete);
                }
            }
            Err(stop) => return (requests, stop),
        }
    }
}

/// The line from `at` to its CRLF, and where the next begins. A CR or LF alone is
/// invalid (RFC 9112 §2.2 lets a reader take a bare LF; two readers may not agree).
fn line_at(bytes: &[u8], at: usize) -> Result<(&[u8], usize), Stop> {
    let rest = &bytes[at.min(bytes.len())..];
    for (i, &b) in rest.iter().enumerate() {
        match b {
            b'\n' => return Err(Stop::Invalid("bare LF")),
            b'\r' => {
                return match rest.get(i + 1) {
                    Some(b'\n') => Ok((&rest[..i], at + i + 2)),
                    Some(_) => Err(Stop::Invalid("bare CR")),
                    None => Err(Stop::Incomplete),
                };
            }
            _ => {}
        }
    }
    Err(Stop::Incomplete)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn request_line(line: &[u8]) -> Result<(Vec<u8>, Vec<u8>, u8), Stop> {
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Stop::Invalid("request line"));
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return Err(Stop::Invalid("method"));
    }
    // Visible ASCII, and no fragment (RFC 9112 §3.2).
    if target.is_empty()
        || !target
            .iter()
            .all(|&b| (0x21..0x7f).contains(&b) && b != b'#')
    {
        return Err(Stop::Invalid("target"));
    }
    let form =
        target[0] == b'/' || (target == b"*" && method == b"OPTIONS") || absolute(target).is_some();
    if !form {
        return Err(Stop::Invalid("target form"));
    }
    let minor = match version {
        b"HTTP/1.1" => 1,
        b"HTTP/1.0" => 0,
        _ => return Err(Stop::Invalid("version")),
    };
    Ok((method.to_vec(), target.to_vec(), minor))
}

/// An absolute-form target (RFC 9112 §3.2.2) without user information: its
/// authority, and its path and query in origin form.
pub fn absolute(target: &[u8]) -> Option<(&[u8], Vec<u8>)> {
    let lower = target.to_ascii_lowercase();
    let scheme = [&b"http://"[..], b"https://"]
        .into_iter()
        .find(|s| lower.starts_with(s))?;
    let rest = &target[scheme.len()..];
    let end = rest
        .iter()
        .position(|&b| b == b'/' || b == b'?')
        .unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() || authority.contains(&b'@') {
        return None;
    }
    let mut origin = Vec::with_capacity(path.len() + 1);
    if !path.starts_with(b"/") {
        origin.push(b'/');
    }
    origin.extend_from_slice(path);
    Some((authority, origin))
}

fn is_blank(b: &u8) -> bool {
    *b == b' ' || *b == b'\t'
}

fn trim(mut v: &[u8]) -> &[u8] {
    while v.first().is_some_and(is_blank) {
        v = &v[1..];
    }
    while v.last().is_some_and(is_blank) {
        v = &v[..v.len() - 1];
    }
    v
}

/// `name: value` (RFC 9110 §5.5): a token, no blank before the colon, a value of
/// visible bytes, blanks and obs-text; a line starting with a blank is obsolete
/// folding (RFC 9112 §5.2 lets a server refuse it).
fn field(line: &[u8]) -> Result<(Vec<u8>, Vec<u8>), Stop> {
    if line.first().is_some_and(is_blank) {
        return Err(Stop::Invalid("obsolete line folding"));
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or(Stop::Invalid("field without a colon"))?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(Stop::Invalid("field name"));
    }
    if !value
        .iter()
        .all(|&b| b == b'\t' || b == b' ' || (0x21..0x7f).contains(&b) || b >= 0x80)
    {
        return Err(Stop::Invalid("field value"));
    }
    Ok((name.to_ascii_lowercase(), trim(value).to_vec()))
}

/// The values of every field called `name`.
pub fn values<'a>(request: &'a Request, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    request
        .fields
        .iter()
        .filter(move |(n, _)| n == name)
        .map(|(_, v)| v.as_slice())
}

/// The comma-separated elements of every field called `name`, blanks trimmed,
/// empty ones dropped.
pub fn list<'a>(request: &'a Request, name: &'a [u8]) -> Vec<&'a [u8]> {
    values(request, name)
        .flat_map(|v| v.split(|&b| b == b','))
        .map(trim)
        .filter(|e| !e.is_empty())
        .collect()
}

/// RFC 9112 §3.2: an HTTP/1.1 request has exactly one Host; HTTP/1.0 at most one.
fn check_host(request: &Request) -> Result<(), Stop> {
    let hosts = values(request, b"host").count();
    if hosts > 1 || (request.minor == 1 && hosts == 0) {
        return Err(Stop::Invalid("Host"));
    }
    Ok(())
}

enum Framing {
    Length(u64),
    Chunked,
}

/// RFC 9112 §6: `Transfer-Encoding` (HTTP/1.1 only) naming exactly `chunked` and
/// without `Content-Length`; or `Content-Length` values that are one number; or
/// no body.
fn framing(request: &Request) -> Result<Framing, Stop> {
    let codings = list(request, b"transfer-encoding");
    let has_te = values(request, b"transfer-encoding").next().is_some();
    let lengths: Vec<&[u8]> = values(request, b"content-length")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(trim)
        .collect();
    if has_te {
        if request.minor == 0 || !lengths.is_empty() {
            return Err(Stop::Invalid(
                "Transfer-Encoding with Content-Length or in HTTP/1.0",
            ));
        }
        return match codings.as_slice() {
            [c] if c.eq_ignore_ascii_case(b"chunked") => Ok(Framing::Chunked),
            _ => Err(Stop::Invalid("a coding other than chunked")),
        };
    }
    let mut length = None;
    for l in lengths {
        if l.is_empty() || l.len() > 18 || !l.iter().all(u8::is_ascii_digit) {
            return Err(Stop::Invalid("Content-Length"));
        }
        let n: u64 = l.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0'));
        if length.is_some_and(|m| m != n) {
            return Err(Stop::Invalid("Content-Length values differ"));
        }
        length = Some(n);
    }
    Ok(Framing::Length(length.unwrap_or(0)))
}

/// A chunked body from `at` (RFC 9112 §7.1) into `body`: where it ends.
fn chunked(bytes: &[u8], mut at: usize, body: &mut Vec<u8>) -> Result<usize, Stop> {
    loop {
        let (line, next) = line_at(bytes, at)?;
        let size = chunk_size(line)?;
        at = next;
        if size == 0 {
            // Trailer fields, then an empty line.
            loop {
                let (line, next) = line_at(bytes, at)?;
                at = next;
                if line.is_empty() {
                    return Ok(at);
                }
                field(line)?;
            }
        }
        let end = at.checked_add(size).ok_or(Stop::Invalid("chunk size"))?;
        let data = bytes.get(at..end).ok_or(Stop::Incomplete)?;
        body.extend_from_slice(data);
        match bytes.get(end..end + 2) {
            Some(b"\r\n") => at = end + 2,
            Some(_) => return Err(Stop::Invalid("chunk data not followed by CRLF")),
            None if bytes.len() > end && bytes[end] != b'\r' => {
                return Err(Stop::Invalid("chunk data not followed by CRLF"));
            }
            None => return Err(Stop::Incomplete),
        }
    }
}

/// `1*HEXDIG [ chunk-ext ]`; extensions are `;` parts of visible bytes, blanks and
/// obs-text (a quoted string may hold it), never a control byte.
fn chunk_size(line: &[u8]) -> Result<usize, Stop> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 15 {
        return Err(Stop::Invalid("chunk size"));
    }
    let ext = trim_start(&line[digits..]);
    if !(ext.is_empty() || ext[0] == b';')
        || !ext
            .iter()
            .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b) || b >= 0x80)
    {
        return Err(Stop::Invalid("chunk extension"));
    }
    let text = std::str::from_utf8(&line[..digits]).map_err(|_| Stop::Invalid("chunk size"))?;
    usize::from_str_radix(text, 16).map_err(|_| Stop::Invalid("chunk size"))
}

fn trim_start(mut v: &[u8]) -> &[u8] {
    while v.first().is_some_and(is_blank) {
        v = &v[1..];
    }
    v
}

/// Whether the connection ends after this request (RFC 9112 §9.3).
pub fn closes(request: &Request) -> bool {
    let tokens = list(request, b"connection");
    let has = |t: &[u8]| tokens.iter().any(|x| x.eq_ignore_ascii_case(t));
    has(b"close") || (request.minor == 0 && !has(b"keep-alive"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pipelined_requests_with_both_framings() {
        let s = b"POST /a HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\
                  POST /b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2;x=y\r\nde\r\n0\r\nT: 1\r\n\r\n\
                  GET /c HTT";
        let (requests, stop) = all(s);
        assert_eq!(stop, Stop::Incomplete);
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].body, b"abc");
        assert_eq!(requests[1].body, b"de");
        assert!(requests[1].chunked);
    }

    #[test]
    fn refuses_what_readers_may_read_differently() {
        for (bad, why) in [
            (&b"GET / HTTP/1.1\nHost: h\r\n\r\n"[..], "bare LF"),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\n x\r\n\r\n",
                "obsolete line folding",
            ),
            (b"GET /#f HTTP/1.1\r\nHost: h\r\n\r\n", "target"),
            (b"GET / HTTP/1.1\r\n\r\n", "Host"),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1, 2\r\n\r\n",
                "Content-Length values differ",
            ),
            (
                b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: +1\r\n\r\n",
                "Content-Length",
            ),
        ] {
            assert_eq!(
                next(bad),
                Err(Stop::Invalid(why)),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let te_cl = b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n";
        assert!(matches!(next(te_cl), Err(Stop::Invalid(_))));
    }

    #[test]
    fn http_1_0_and_close_end_the_connection() {
        let s = b"GET / HTTP/1.0\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
        assert_eq!(all(s).0.len(), 1);
        let s = b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n";
        assert_eq!(all(s).0.len(), 1);
    }
}
