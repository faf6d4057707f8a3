//! A parsed head's fields as the bytes they arrived in, with an index of where
//! each name and value lies: what a proxy passes on from one HTTP/1 connection to
//! another without building a map of them and encoding that map again (haproxy's
//! HTX and nginx's buffers keep a head the same way).
//!
//! Why: building a `HeaderMap` from a member's response head (each name parsed
//! and hashed, each value wrapped) and encoding it again for the client cost
//! about 4 500 of the 29 300 user-space instructions of a proxied HTTP/1.1 GET
//! (`bench/instructions.py`, `bench/RESULTS.md`). [`Fields::to_map`] builds the
//! map only where one is needed (h2 and HTTP/3 clients, whose server is hyper's
//! or h3's).
//!
//! Names and values are what `httparse` accepted: names are tokens and values
//! hold no control byte but tab, the rules `http`'s `HeaderName` and
//! `HeaderValue` apply too, so [`Fields::to_map`] drops nothing a map would
//! have taken.

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue};

/// The names an HTTP/1 hop reads or treats apart, found once per field when the
/// head is read (by length, then without case): what framing, keep-alive and
/// hop-by-hop decisions ask for is then a byte compare, not a name compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Name {
    Connection,
    ContentLength,
    TransferEncoding,
    KeepAlive,
    ProxyConnection,
    Te,
    Upgrade,
    Trailer,
    Date,
    SetCookie,
    Host,
    Cookie,
    Forwarded,
    XForwardedFor,
    XForwardedProto,
    XForwardedHost,
    XForwardedPort,
    /// `X-Request-Id`, `traceparent`, `tracestate`: what a proxy sets or
    /// continues itself (the request ID and the W3C trace context).
    XRequestId,
    Traceparent,
    Tracestate,
    /// `X-SSL-Client-Cert`, `-Verify`, `-DN`: what a TLS-terminating proxy
    /// says of the client's certificate (never a client's own).
    XSslClientCert,
    XSslClientVerify,
    XSslClientDn,
    Other,
}

/// `name` is `known` (lower case letters and `-`, as long as `name`) in any
/// case, for a token `name` (what httparse accepts as a name): with the case bit
/// set, a letter is its lower case and `-` itself (the one other byte it then
/// equals, CR, is no token byte). Eight bytes a compare: a name is read this way
/// once per field of every head, and a byte-by-byte compare cost about 150
/// instructions a field.
fn folded_eq(name: &[u8], known: &[u8]) -> bool {
    const FOLD: u64 = 0x2020_2020_2020_2020;
    let n = name.len();
    if n != known.len() {
        return false;
    }
    if n < 8 {
        return name.iter().zip(known).all(|(a, k)| a | 0x20 == *k);
    }
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map_or(0, u64::from_le_bytes)
    };
    // Whole words from the start, then the last eight bytes (overlapping).
    let mut at = 0;
    while at + 8 < n {
        if word(name, at) | FOLD != word(known, at) {
            return false;
        }
        at += 8;
    }
    word(name, n - 8) | FOLD == word(known, n - 8)
}

impl Name {
    /// Which of the names `name` (a token) is, in any case.
    pub fn of(name: &[u8]) -> Name {
        // By length, then one byte where names of one length differ.
        let first = name.first().map_or(0, |b| b | 0x20);
        let (known, kind): (&[u8], Name) = match name.len() {
            2 => (b"te", Name::Te),
            4 if first == b'h' => (b"host", Name::Host),
            4 => (b"date", Name::Date),
            6 => (b"cookie", Name::Cookie),
            7 if first == b'u' => (b"upgrade", Name::Upgrade),
            7 => (b"trailer", Name::Trailer),
            9 => (b"forwarded", Name::Forwarded),
            10 if first == b'c' => (b"connection", Name::Connection),
            10 if first == b'k' => (b"keep-alive", Name::KeepAlive),
            10 if first == b't' => (b"tracestate", Name::Tracestate),
            11 => (b"traceparent", Name::Traceparent),
            12 => (b"x-request-id", Name::XRequestId),
            10 => (b"set-cookie", Name::SetCookie),
            14 => (b"content-length", Name::ContentLength),
            15 if name[2] | 0x20 == b's' => (b"x-ssl-client-dn", Name::XSslClientDn),
            15 => (b"x-forwarded-for", Name::XForwardedFor),
            16 if first == b'p' => (b"proxy-connection", Name::ProxyConnection),
            16 if name[12] | 0x20 == b'h' => (b"x-forwarded-host", Name::XForwardedHost),
            16 => (b"x-forwarded-port", Name::XForwardedPort),
            17 if first == b't' => (b"transfer-encoding", Name::TransferEncoding),
            17 if name[2] | 0x20 == b's' => (b"x-ssl-client-cert", Name::XSslClientCert),
            17 => (b"x-forwarded-proto", Name::XForwardedProto),
            19 => (b"x-ssl-client-verify", Name::XSslClientVerify),
            _ => return Name::Other,
        };
        if folded_eq(name, known) {
            kind
        } else {
            Name::Other
        }
    }

    /// The fields that describe one connection, not the message (RFC 9110
    /// §7.6.1, with the non-standard `Proxy-Connection` and `Keep-Alive` old
    /// peers still send): a proxy does not pass them on. `Connection` first.
    pub const HOP_BY_HOP: [Name; 6] = [
        Name::Connection,
        Name::ProxyConnection,
        Name::KeepAlive,
        Name::Te,
        Name::TransferEncoding,
        Name::Upgrade,
    ];

    /// One of [`Name::HOP_BY_HOP`].
    pub fn is_hop_by_hop(self) -> bool {
        Name::HOP_BY_HOP.contains(&self)
    }

    /// One of the `X-Forwarded-*` family, `Forwarded` or `X-SSL-Client-*`:
    /// what a proxy sets itself.
    pub fn is_forwarding(self) -> bool {
        matches!(
            self,
            Name::Forwarded
                | Name::XForwardedFor
                | Name::XForwardedProto
                | Name::XForwardedHost
                | Name::XForwardedPort
                | Name::XSslClientCert
                | Name::XSslClientVerify
                | Name::XSslClientDn
        )
    }

    /// Its name in a map (`None` for [`Name::Other`]).
    pub fn header_name(self) -> Option<HeaderName> {
        use http::header;
        Some(match self {
            Name::Connection => header::CONNECTION,
            Name::ContentLength => header::CONTENT_LENGTH,
            Name::TransferEncoding => header::TRANSFER_ENCODING,
            Name::KeepAlive => HeaderName::from_static("keep-alive"),
            Name::ProxyConnection => HeaderName::from_static("proxy-connection"),
            Name::Te => header::TE,
            Name::Upgrade => header::UPGRADE,
            Name::Trailer => header::TRAILER,
            Name::Date => header::DATE,
            Name::SetCookie => header::SET_COOKIE,
            Name::Host => header::HOST,
            Name::Cookie => header::COOKIE,
            Name::Forwarded => header::FORWARDED,
            Name::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            Name::XForwardedProto => HeaderName::from_static("x-forwarded-proto"),
            Name::XForwardedHost => HeaderName::from_static("x-forwarded-host"),
            Name::XForwardedPort => HeaderName::from_static("x-forwarded-port"),
            Name::XRequestId => HeaderName::from_static("x-request-id"),
            Name::Traceparent => HeaderName::from_static("traceparent"),
            Name::XSslClientCert => HeaderName::from_static("x-ssl-client-cert"),
            Name::XSslClientVerify => HeaderName::from_static("x-ssl-client-verify"),
            Name::XSslClientDn => HeaderName::from_static("x-ssl-client-dn"),
            Name::Tracestate => HeaderName::from_static("tracestate"),
            Name::Other => return None,
        })
    }

    fn bit(self) -> u32 {
        1 << self as u8
    }
}

/// One field's place in the head: offsets and lengths in bytes, and its name's
/// kind.
#[derive(Clone, Copy, Debug)]
struct Field {
    name: u32,
    name_len: u32,
    value: u32,
    value_len: u32,
    kind: Name,
}

/// The fields of one head: a copy of the head's bytes and where each field lies.
#[derive(Clone, Debug, Default)]
pub struct Fields {
    head: Bytes,
    index: Vec<Field>,
    /// Which [`Name`]s are present, a bit each.
    present: u32,
}

/// Where each field of a head lies, found while the head is still borrowed
/// from the buffer it was read into; [`Fields::with_head`] then takes the head
/// out of that buffer without a copy.
#[derive(Debug)]
pub struct FieldIndex {
    index: Vec<Field>,
    present: u32,
    /// The head's length in bytes.
    len: usize,
}

impl FieldIndex {
    /// Where the fields httparse found in `buf`'s first `len` bytes (the head)
    /// lie. `None`: a field lies outside the head (not what httparse returns)
    /// or the head is over 4 GiB.
    pub fn new(buf: &[u8], len: usize, fields: &[httparse::Header<'_>]) -> Option<FieldIndex> {
        let base = buf.as_ptr() as usize;
        if len > buf.len() {
            return None;
        }
        let at = |s: &[u8]| -> Option<(u32, u32)> {
            let start = (s.as_ptr() as usize).checked_sub(base)?;
            if start + s.len() > len {
                return None;
            }
            Some((u32::try_from(start).ok()?, u32::try_from(s.len()).ok()?))
        };
        let mut index = Vec::with_capacity(fields.len());
        let mut present = 0;
        for h in fields {
            let (name, name_len) = at(h.name.as_bytes())?;
            let (value, value_len) = at(h.value)?;
            let kind = Name::of(h.name.as_bytes());
            present |= kind.bit();
            index.push(Field {
                name,
                name_len,
                value,
                value_len,
                kind,
            });
        }
        Some(FieldIndex {
            index,
            present,
            len,
        })
    }
}

impl Fields {
    /// The fields httparse found in `buf`'s first `len` bytes (the head), the
    /// head copied. `None`: as [`FieldIndex::new`].
    pub fn new(buf: &[u8], len: usize, fields: &[httparse::Header<'_>]) -> Option<Fields> {
        let index = FieldIndex::new(buf, len, fields)?;
        Fields::with_head(Bytes::copy_from_slice(buf.get(..len)?), index)
    }

    /// The fields of `head`, the bytes `index` was found in (taken out of
    /// their buffer, not copied: a connection reads its next head into that
    /// buffer again once these fields are dropped). `None`: `head` is not as
    /// long as the head `index` was found in.
    pub fn with_head(head: Bytes, index: FieldIndex) -> Option<Fields> {
        (head.len() == index.len).then_some(Fields {
            head,
            index: index.index,
            present: index.present,
        })
    }

    /// The fields of the whole head at the start of `head` (a response's if it
    /// begins `HTTP/`, else a request's): for tests and tools; the connections
    /// parse their heads themselves, with their limits.
    pub fn of_head(head: &[u8]) -> Option<Fields> {
        let mut slots = [httparse::EMPTY_HEADER; crate::MAX_HEADERS];
        let (len, fields) = if head.starts_with(b"HTTP/") {
            let mut res = httparse::Response::new(&mut slots);
            match res.parse(head) {
                Ok(httparse::Status::Complete(len)) => (len, res.headers),
                _ => return None,
            }
        } else {
            let mut req = httparse::Request::new(&mut slots);
            match req.parse(head) {
                Ok(httparse::Status::Complete(len)) => (len, req.headers),
                _ => return None,
            }
        };
        Fields::new(head, len, fields)
    }

    /// The head's length in bytes.
    pub fn head_len(&self) -> usize {
        self.head.len()
    }

    /// How many fields.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Every field as `(name, value)`, in the order they arrived; names as sent
    /// (any case).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.index.iter().map(|f| self.field(f))
    }

    /// Every field as its name's kind, name and value, in the order they arrived.
    pub fn iter_named(&self) -> impl Iterator<Item = (Name, &[u8], &[u8])> + '_ {
        self.index.iter().map(|f| {
            let (name, value) = self.field(f);
            (f.kind, name, value)
        })
    }

    /// The values of every field of the kind `name` (not [`Name::Other`]).
    pub fn get_all(&self, name: Name) -> FieldValues<'_> {
        let index = if self.contains(name) {
            &self.index[..]
        } else {
            &[]
        };
        FieldValues {
            fields: self,
            index: index.iter(),
            name,
        }
    }

    /// The head's bytes from `start`, `len` of them (shared, not a copy); `None`
    /// past its end.
    pub fn head_slice(&self, start: usize, len: usize) -> Option<Bytes> {
        let end = start.checked_add(len)?;
        (end <= self.head.len()).then(|| self.head.slice(start..end))
    }

    /// `part` (a name or value of these fields) as shared bytes of the head, not
    /// a copy; a copy if it is not one of them.
    pub fn share(&self, part: &[u8]) -> Bytes {
        let start = (part.as_ptr() as usize).wrapping_sub(self.head.as_ptr() as usize);
        match start.checked_add(part.len()) {
            Some(end) if end <= self.head.len() => self.head.slice(start..end),
            _ => Bytes::copy_from_slice(part),
        }
    }

    /// Whether a field of the kind `name` (not [`Name::Other`]) is present.
    pub fn contains(&self, name: Name) -> bool {
        self.present & name.bit() != 0
    }

    /// The fields as a map (with room for `room` more), values sharing the head's
    /// bytes.
    pub fn to_map(&self, room: usize) -> HeaderMap {
        let mut map = HeaderMap::with_capacity(self.index.len() + room);
        for f in &self.index {
            let (name, _) = self.field(f);
            let start = f.value as usize;
            let value = self.head.slice(start..start + f.value_len as usize);
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name),
                HeaderValue::from_maybe_shared(value),
            ) {
                map.append(name, value);
            }
        }
        map
    }

    /// Takes out every field named `name` (any case): a header action's
    /// deletion on fields that are written as they came, without putting
    /// them in a map first.
    pub fn remove(&mut self, name: &[u8]) {
        self.retain_names(|n| !n.eq_ignore_ascii_case(name));
    }

    /// Keeps the fields whose name (as sent) `keep` says to keep: one pass
    /// for all of a message's deletions.
    pub fn retain_names(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        let head = &self.head;
        let before = self.index.len();
        self.index.retain(|f| {
            let at = f.name as usize;
            head.get(at..at + f.name_len as usize).is_none_or(&mut keep)
        });
        if self.index.len() != before {
            self.present = self.index.iter().fold(0, |bits, f| bits | f.kind.bit());
        }
    }

    fn field(&self, f: &Field) -> (&[u8], &[u8]) {
        let name = f.name as usize;
        let value = f.value as usize;
        (
            &self.head[name..name + f.name_len as usize],
            &self.head[value..value + f.value_len as usize],
        )
    }
}

/// Field names a message's fields are matched against, any case (an app's
/// header actions, the access log's captures), in lower case and in the
/// order given. Most of a message's fields are not among them and differ in
/// length from each: `lengths` has bit `n % 64` set for a name of `n` bytes,
/// so such a field is passed on one test, without a comparison.
#[derive(Clone, Debug, Default)]
pub struct NameSet {
    names: Vec<Box<[u8]>>,
    lengths: u64,
}

impl NameSet {
    /// The set of `names`, each kept once (`dedup`) or each in its place.
    pub fn of<'a>(names: impl IntoIterator<Item = &'a [u8]>, dedup: bool) -> NameSet {
        let mut out = NameSet::default();
        for n in names {
            let n = n.to_ascii_lowercase();
            if !(dedup && out.names.iter().any(|o| **o == *n)) {
                out.lengths |= 1 << (n.len() % 64);
                out.names.push(n.into());
            }
        }
        out
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether a field named `name` (as sent, any case) is one of them.
    #[inline]
    pub fn contains(&self, name: &[u8]) -> bool {
        self.may_hold(name) && self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }

    /// Whether a name of `name`'s length is among them (no comparison made).
    #[inline]
    pub fn may_hold(&self, name: &[u8]) -> bool {
        self.lengths & (1 << (name.len() % 64)) != 0
    }

    /// The places of the names `name` is (any case), in order.
    pub fn places<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
        let any = self.may_hold(name);
        self.names
            .iter()
            .enumerate()
            .filter(move |(_, n)| any && n.eq_ignore_ascii_case(name))
            .map(|(i, _)| i)
    }
}

/// The values of one kind of field, in order ([`Fields::get_all`]).
pub struct FieldValues<'a> {
    fields: &'a Fields,
    index: std::slice::Iter<'a, Field>,
    name: Name,
}

impl<'a> Iterator for FieldValues<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let name = self.name;
        let f = self.index.find(|f| f.kind == name)?;
        Some(self.fields.field(f).1)
    }
}

impl DoubleEndedIterator for FieldValues<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let name = self.name;
        let f = self.index.rfind(|f| f.kind == name)?;
        Some(self.fields.field(f).1)
    }
}

/// A message's fields as a reader takes them, whichever form they are in: a map
/// (what hyper's and h3's servers give) or as they came ([`Fields`]: the own
/// HTTP/1.1 path builds no map). Read by kind ([`Name`]).
#[derive(Clone, Copy, Debug)]
pub enum FieldsRef<'a> {
    Map(&'a HeaderMap),
    Raw(&'a Fields),
}

impl<'a> From<&'a HeaderMap> for FieldsRef<'a> {
    fn from(map: &'a HeaderMap) -> Self {
        FieldsRef::Map(map)
    }
}

impl<'a> From<&'a Fields> for FieldsRef<'a> {
    fn from(fields: &'a Fields) -> Self {
        FieldsRef::Raw(fields)
    }
}

impl<'a> FieldsRef<'a> {
    /// A request's fields: as they came (`raw`, whose request's map is then
    /// empty), else in its map.
    #[inline]
    pub fn of<B>(req: &'a http::Request<B>, raw: Option<&'a Fields>) -> FieldsRef<'a> {
        raw.map_or(FieldsRef::Map(req.headers()), FieldsRef::Raw)
    }

    /// The values of every field of the kind `name`, in order. Inline: the
    /// request path asks this of the same fields several times, and each call
    /// is a few instructions once the variant is known.
    #[inline]
    pub fn values(self, name: Name) -> Values<'a> {
        match self {
            FieldsRef::Raw(f) => Values::Raw(f.get_all(name)),
            FieldsRef::Map(m) => match name.header_name() {
                Some(n) => Values::Map(m.get_all(n).into_iter()),
                None => Values::None,
            },
        }
    }

    /// Whether a field of the kind `name` is present.
    #[inline(always)]
    pub fn contains(self, name: Name) -> bool {
        match self {
            FieldsRef::Raw(f) => f.contains(name),
            FieldsRef::Map(m) => name.header_name().is_some_and(|n| m.contains_key(n)),
        }
    }

    /// One of its values as a `HeaderValue` (shared bytes when the fields came
    /// as they were sent, not a copy); `None` for bytes a `HeaderValue` refuses.
    pub fn header_value(self, value: &[u8]) -> Option<HeaderValue> {
        match self {
            FieldsRef::Raw(f) => HeaderValue::from_maybe_shared(f.share(value)).ok(),
            FieldsRef::Map(_) => HeaderValue::from_bytes(value).ok(),
        }
    }
}

/// The values [`FieldsRef::values`] yields.
pub enum Values<'a> {
    Map(http::header::ValueIter<'a, HeaderValue>),
    Raw(FieldValues<'a>),
    None,
}

impl<'a> Iterator for Values<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        match self {
            Values::Map(i) => i.next().map(HeaderValue::as_bytes),
            Values::Raw(i) => i.next(),
            Values::None => None,
        }
    }
}

impl DoubleEndedIterator for Values<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        match self {
            Values::Map(i) => i.next_back().map(HeaderValue::as_bytes),
            Values::Raw(i) => i.next_back(),
            Values::None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_set_matches_any_case_and_keeps_places_or_dedups() {
        let names: [&[u8]; 3] = [b"User-Agent", b"x-a", b"user-agent"];
        let places = NameSet::of(names, false);
        assert_eq!(places.len(), 3);
        assert!(places.contains(b"USER-AGENT") && places.contains(b"X-A"));
        assert!(!places.contains(b"x-b") && !places.contains(b"Accept"));
        assert_eq!(places.places(b"user-Agent").collect::<Vec<_>>(), [0, 2]);
        assert_eq!(places.places(b"host").count(), 0);
        let once = NameSet::of(names, true);
        assert_eq!(once.len(), 2);
        assert!(NameSet::of([], true).is_empty() && !NameSet::default().contains(b""));
    }

    fn parse(head: &[u8]) -> Fields {
        Fields::of_head(head).expect("a whole head")
    }

    #[test]
    fn fields_are_kept_in_order_as_sent_and_found_without_case() {
        let f = parse(
            b"HTTP/1.1 200 OK\r\nX-A: 1\r\nset-cookie: a\r\nX-B:  2 \r\nSet-Cookie: b\r\n\r\n",
        );
        let all: Vec<_> = f.iter().collect();
        assert_eq!(
            all,
            [
                (&b"X-A"[..], &b"1"[..]),
                (b"set-cookie", b"a"),
                (b"X-B", b"2"),
                (b"Set-Cookie", b"b")
            ]
        );
        assert_eq!(f.get_all(Name::SetCookie).collect::<Vec<_>>(), [b"a", b"b"]);
        assert!(f.contains(Name::SetCookie) && !f.contains(Name::Date));
        assert!(f.get_all(Name::Date).next().is_none());
        let map = f.to_map(0);
        assert_eq!(map.len(), 4);
        assert_eq!(map.get_all("set-cookie").iter().count(), 2);
        assert_eq!(map.get("x-a").map(HeaderValue::as_bytes), Some(&b"1"[..]));
        // Removed by name in any case, the others kept in order.
        let mut f = f;
        f.remove(b"SET-COOKIE");
        assert_eq!(
            f.iter().collect::<Vec<_>>(),
            [(&b"X-A"[..], &b"1"[..]), (b"X-B", b"2")]
        );
        assert!(!f.contains(Name::SetCookie) && f.get_all(Name::SetCookie).next().is_none());
        f.remove(b"x-none");
        assert_eq!(f.len(), 2);
    }

    #[test]
    fn every_name_read_apart_is_known_in_any_case_and_no_other_is() {
        let known = [
            ("connection", Name::Connection),
            ("content-length", Name::ContentLength),
            ("transfer-encoding", Name::TransferEncoding),
            ("keep-alive", Name::KeepAlive),
            ("proxy-connection", Name::ProxyConnection),
            ("te", Name::Te),
            ("upgrade", Name::Upgrade),
            ("trailer", Name::Trailer),
            ("date", Name::Date),
            ("set-cookie", Name::SetCookie),
            ("host", Name::Host),
            ("cookie", Name::Cookie),
            ("forwarded", Name::Forwarded),
            ("x-forwarded-for", Name::XForwardedFor),
            ("x-forwarded-proto", Name::XForwardedProto),
            ("x-forwarded-host", Name::XForwardedHost),
            ("x-forwarded-port", Name::XForwardedPort),
            ("x-request-id", Name::XRequestId),
            ("traceparent", Name::Traceparent),
            ("tracestate", Name::Tracestate),
            ("x-ssl-client-cert", Name::XSslClientCert),
            ("x-ssl-client-verify", Name::XSslClientVerify),
            ("x-ssl-client-dn", Name::XSslClientDn),
        ];
        for (name, kind) in known {
            assert_eq!(
                kind.header_name().map(|n| n.to_string()).as_deref(),
                Some(name)
            );
            assert_eq!(Name::of(name.as_bytes()), kind, "{name}");
            assert_eq!(Name::of(name.to_uppercase().as_bytes()), kind, "{name}");
            let mut near = name.as_bytes().to_vec();
            near[1] ^= 1;
            assert_eq!(Name::of(&near), Name::Other, "{name}");
        }
        for other in [
            "",
            "x",
            "tf",
            "dat",
            "content-type",
            "keep-alivf",
            "connectioN2",
        ] {
            assert_eq!(Name::of(other.as_bytes()), Name::Other, "{other}");
        }
    }

    proptest::proptest! {
        /// For any token, the kind is the one whose name it equals without case.
        #[test]
        fn any_token_is_named_as_a_compare_without_case_says(
            name in "[a-zA-Z0-9!#$%&'*+.^_`|~-]{0,20}",
            known in proptest::sample::select(vec![
                "connection", "content-length", "transfer-encoding", "keep-alive",
                "proxy-connection", "te", "upgrade", "trailer", "date", "set-cookie",
                "host", "cookie", "forwarded", "x-forwarded-for", "x-forwarded-proto",
                "x-forwarded-host", "x-forwarded-port", "x-request-id", "traceparent",
                "tracestate", "x-ssl-client-cert", "x-ssl-client-verify", "x-ssl-client-dn",
            ]),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
            upper in proptest::prelude::any::<bool>(),
        ) {
            let mut near = known.as_bytes().to_vec();
            if upper { near.make_ascii_uppercase(); }
            let i = flip.index(near.len());
            near[i] ^= 0x01;
            for candidate in [name.as_bytes(), known.as_bytes(), &near[..]] {
                let expected = [
                    ("connection", Name::Connection), ("content-length", Name::ContentLength),
                    ("transfer-encoding", Name::TransferEncoding), ("keep-alive", Name::KeepAlive),
                    ("proxy-connection", Name::ProxyConnection), ("te", Name::Te),
                    ("upgrade", Name::Upgrade), ("trailer", Name::Trailer), ("date", Name::Date),
                    ("set-cookie", Name::SetCookie), ("host", Name::Host), ("cookie", Name::Cookie),
                    ("forwarded", Name::Forwarded), ("x-forwarded-for", Name::XForwardedFor),
                    ("x-forwarded-proto", Name::XForwardedProto),
                    ("x-forwarded-host", Name::XForwardedHost),
                    ("x-forwarded-port", Name::XForwardedPort),
                    ("x-request-id", Name::XRequestId), ("traceparent", Name::Traceparent),
                    ("tracestate", Name::Tracestate),
                    ("x-ssl-client-cert", Name::XSslClientCert),
                    ("x-ssl-client-verify", Name::XSslClientVerify),
                    ("x-ssl-client-dn", Name::XSslClientDn),
                ]
                .iter()
                .find(|(n, _)| n.as_bytes().eq_ignore_ascii_case(candidate))
                .map_or(Name::Other, |(_, k)| *k);
                proptest::prop_assert_eq!(Name::of(candidate), expected, "{:?}", String::from_utf8_lossy(candidate));
            }
        }
    }

    #[test]
    fn a_field_outside_the_head_is_refused() {
        let head = b"HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\n";
        let other = b"X-B";
        let fields = [httparse::Header {
            name: std::str::from_utf8(other).expect("ascii"),
            value: b"2",
        }];
        assert!(Fields::new(head, head.len(), &fields).is_none());
    }
}
