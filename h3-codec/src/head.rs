//! A request head from its decoded field section (RFC 9114 §4.3.1): the
//! pseudo-header fields first, each once; then lowercase fields, none of
//! HTTP/1's connection-specific ones. A request that breaks these is malformed:
//! a stream error, H3_MESSAGE_ERROR. HTTP/2's rules are the same (RFC 9113
//! §8.3, a stream PROTOCOL_ERROR): `h2-codec` builds its heads with
//! [`request_from`] and its own [`Rules`].

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Uri};

use crate::error::{Code, Error, Failure, Named};
use crate::qpack::{self, Text};

/// What is wrong with a head, before its protocol names it.
type Malformed = &'static str;

const fn malformed(what: &'static str) -> Error {
    Error::stream(Code::MESSAGE_ERROR, what)
}

/// How a protocol's request heads are made and refused.
pub struct Rules<C: Named> {
    pub version: http::Version,
    /// The code of a stream error for a malformed head.
    pub malformed: C,
    /// The error for a head past its decoded-size bound.
    pub too_large: Failure<C>,
}

/// HTTP/3's.
pub const H3: Rules<Code> = Rules {
    version: http::Version::HTTP_3,
    malformed: Code::MESSAGE_ERROR,
    too_large: TOO_LARGE,
};

/// Fields HTTP/3 forbids (RFC 9114 §4.2): HTTP/1's connection-specific ones. A
/// request carrying one is malformed; a response's are dropped before it is sent.
pub const CONNECTION_SPECIFIC: [HeaderName; 5] = [
    http::header::CONNECTION,
    http::header::TRANSFER_ENCODING,
    http::header::UPGRADE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// The decoded size past which a section is refused (RFC 9114 §4.2.2 counts
/// each field's name and value and 32 bytes more): a stream error with
/// H3_EXCESSIVE_LOAD, which the server answers with 431.
pub const TOO_LARGE: Error = Error::stream(Code::EXCESSIVE_LOAD, "field section too large");

#[derive(Default)]
struct Pseudo {
    method: Option<Text>,
    scheme: Option<Text>,
    authority: Option<Text>,
    path: Option<Text>,
}

/// The request a HEADERS frame's `section` carries, its decoded size at most
/// `max_size`.
pub fn request(section: &Bytes, max_size: usize) -> Result<Request<()>, Error> {
    request_from(&H3, max_size, |field| qpack::decode(section, field))
}

/// One field of a head being read: the next decoded name and value.
pub type Field<'a, C> = &'a mut dyn FnMut(Text, Text) -> Result<(), Failure<C>>;

/// The request whose fields `decode` hands, one by one, to the field it is
/// given; its decoded size at most `max_size`; refused as `rules` say.
pub fn request_from<C: Named>(
    rules: &Rules<C>,
    max_size: usize,
    decode: impl FnOnce(Field<'_, C>) -> Result<(), Failure<C>>,
) -> Result<Request<()>, Failure<C>> {
    let refuse = |what| Failure::stream(rules.malformed, what);
    let mut pseudo = Pseudo::default();
    let mut headers = HeaderMap::new();
    let mut size = 0usize;
    decode(&mut |name, value| {
        size += name.as_bytes().len() + value.as_bytes().len() + 32;
        if size > max_size {
            return Err(rules.too_large);
        }
        if let Some(slot) = pseudo_slot(&mut pseudo, name.as_bytes()).map_err(refuse)? {
            if !headers.is_empty() {
                return Err(refuse("a pseudo-header field after a regular field"));
            }
            if slot.replace(value).is_some() {
                return Err(refuse("a pseudo-header field twice"));
            }
            return Ok(());
        }
        let (name, value) = regular(name, value).map_err(refuse)?;
        headers.append(name, value);
        Ok(())
    })?;
    let mut req = build(pseudo, headers).map_err(refuse)?;
    *req.version_mut() = rules.version;
    Ok(req)
}

/// Checks trailers: decodable, within the size bound, no pseudo-header field.
/// (They are not forwarded: members get HTTP/1.1, where few read them.)
pub fn trailers(section: &Bytes, max_size: usize) -> Result<(), Error> {
    let mut size = 0usize;
    qpack::decode(section, |name, value| {
        size += name.as_bytes().len() + value.as_bytes().len() + 32;
        if size > max_size {
            return Err(TOO_LARGE);
        }
        if name.as_bytes().first() == Some(&b':') {
            return Err(malformed("a pseudo-header field in trailers"));
        }
        Ok(())
    })
}

fn pseudo_slot<'a>(
    p: &'a mut Pseudo,
    name: &[u8],
) -> Result<Option<&'a mut Option<Text>>, Malformed> {
    Ok(Some(match name {
        b":method" => &mut p.method,
        b":scheme" => &mut p.scheme,
        b":authority" => &mut p.authority,
        b":path" => &mut p.path,
        [b':', ..] => return Err("an unknown pseudo-header field"),
        _ => return Ok(None),
    }))
}

fn regular(name: Text, value: Text) -> Result<(HeaderName, HeaderValue), Malformed> {
    let name = match name {
        Text::Static(s) => HeaderName::from_static(s),
        Text::Owned(b) => {
            if b.iter().any(u8::is_ascii_uppercase) {
                return Err("an uppercase field name");
            }
            HeaderName::from_bytes(&b).map_err(|_| "an invalid field name")?
        }
    };
    let value = match value {
        Text::Static(s) => HeaderValue::from_static(s),
        Text::Owned(b) => {
            HeaderValue::from_maybe_shared(b).map_err(|_| "an invalid field value")?
        }
    };
    if CONNECTION_SPECIFIC.contains(&name) || (name == http::header::TE && value != "trailers") {
        return Err("a connection-specific field");
    }
    Ok((name, value))
}

fn build(p: Pseudo, headers: HeaderMap) -> Result<Request<()>, Malformed> {
    let method = p.method.ok_or("no :method")?;
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| "an invalid :method")?;
    let mut uri = http::uri::Parts::default();
    if let Some(a) = &p.authority {
        if a.as_bytes().is_empty() {
            return Err("an empty :authority");
        }
        let a = Authority::from_maybe_shared(a.to_bytes()).map_err(|_| "an invalid :authority")?;
        if a.as_str().contains('@') {
            return Err("userinfo in :authority");
        }
        if let Some(host) = headers.get(http::header::HOST)
            && host.as_bytes() != a.as_str().as_bytes()
        {
            return Err(":authority and Host differ");
        }
        uri.authority = Some(a);
    }
    if method == Method::CONNECT {
        // Extended CONNECT (:protocol) is not offered: :authority alone.
        if p.scheme.is_some() || p.path.is_some() || uri.authority.is_none() {
            return Err("CONNECT takes :authority only");
        }
    } else {
        let scheme = p.scheme.ok_or("no :scheme")?;
        let path = p.path.ok_or("no :path")?;
        if path.as_bytes().is_empty() {
            return Err("an empty :path");
        }
        let scheme = Scheme::try_from(scheme.as_bytes()).map_err(|_| "an invalid :scheme")?;
        let web = scheme == Scheme::HTTP || scheme == Scheme::HTTPS;
        if web
            && uri.authority.is_none()
            && headers.get(http::header::HOST).is_none_or(|h| h.is_empty())
        {
            return Err("neither :authority nor Host");
        }
        uri.scheme = Some(scheme);
        uri.path_and_query =
            Some(PathAndQuery::from_maybe_shared(path.to_bytes()).map_err(|_| "an invalid :path")?);
    }
    let uri = Uri::from_parts(uri).map_err(|_| "an invalid request target")?;
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut as _;

    /// A section of literal fields with literal names (no Huffman).
    fn section(fields: &[(&str, &str)]) -> Bytes {
        let mut out = bytes::BytesMut::new();
        out.put_slice(&[0, 0]);
        for (n, v) in fields {
            crate::qpack::prefixed(0x20, 3, n.len() as u64, &mut out);
            out.put_slice(n.as_bytes());
            crate::qpack::prefixed(0, 7, v.len() as u64, &mut out);
            out.put_slice(v.as_bytes());
        }
        out.freeze()
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "app.example.com"),
        (":path", "/a?x=1"),
    ];

    #[test]
    fn a_request_head_becomes_a_request() {
        let mut fields = GET.to_vec();
        fields.push(("user-agent", "test"));
        fields.push(("te", "trailers"));
        let req = request(&section(&fields), 16_384).expect("a request");
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri().to_string(), "https://app.example.com/a?x=1");
        assert_eq!(req.headers()["user-agent"], "test");
        assert_eq!(req.version(), http::Version::HTTP_3);
    }

    #[test]
    fn malformed_heads_are_stream_errors() {
        let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
            (GET[1..].to_vec(), "no :method"),
            (vec![GET[0], GET[1], GET[2]], "no :path"),
            ([&GET[..], &[(":path", "/again")]].concat(), "twice"),
            (
                [&GET[..], &[(":protocol", "websocket")]].concat(),
                "unknown pseudo",
            ),
            (
                vec![GET[0], ("accept", "*/*"), GET[1], GET[2], GET[3]],
                "pseudo after regular",
            ),
            ([&GET[..], &[("Accept", "*/*")]].concat(), "uppercase"),
            (
                [&GET[..], &[("connection", "close")]].concat(),
                "connection-specific",
            ),
            (
                [&GET[..], &[("transfer-encoding", "chunked")]].concat(),
                "transfer-encoding",
            ),
            ([&GET[..], &[("te", "gzip")]].concat(), "te"),
            (
                [&GET[..], &[("host", "other.example.com")]].concat(),
                "host differs",
            ),
            (vec![GET[0], GET[1], GET[3]], "no authority"),
            (
                vec![
                    (":method", "CONNECT"),
                    (":authority", "a:443"),
                    (":path", "/"),
                ],
                "CONNECT with a path",
            ),
            ([&GET[..], &[("x", "a\rb")]].concat(), "CR in a value"),
        ];
        for (fields, why) in cases {
            let err = request(&section(&fields), 16_384).expect_err(why);
            assert_eq!(
                (err.code, err.connection),
                (Code::MESSAGE_ERROR, false),
                "{why}"
            );
        }
        let ok = [(":method", "CONNECT"), (":authority", "a.example.com:443")];
        assert_eq!(
            request(&section(&ok), 16_384).expect("CONNECT").method(),
            Method::CONNECT
        );
    }

    #[test]
    fn a_section_past_the_bound_is_too_large() {
        let big = "v".repeat(100);
        let mut fields = GET.to_vec();
        fields.push(("x-big", &big));
        let size: usize = fields.iter().map(|(n, v)| n.len() + v.len() + 32).sum();
        assert!(request(&section(&fields), size).is_ok());
        assert_eq!(
            request(&section(&fields), size - 1).expect_err("over"),
            TOO_LARGE
        );
        assert!(trailers(&section(&[("x-sum", "1")]), 100).is_ok());
        assert!(trailers(&section(&[(":path", "/")]), 100).is_err());
    }
}
