use super::forwarding::*;
use super::member_head::*;
use super::*;
use crate::request::connection::activity::Activity;
use crate::request::connection::client_conn::ClientConn;
use crate::request::connection::client_conn::ForwardedSettings;
use crate::request::phases::trace::Provenance;
use h1_codec::encode::request::RequestLine;
use h1_codec::fields::{Fields, FieldsRef};
use h1_codec::hop::remove_hop_by_hop;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use per_source::KeyRule;
use std::net::IpAddr;

/// The request line of the property test's requests.
const GET_P: RequestLine<'static> = RequestLine {
    method: &http::Method::GET,
    target: "/p?q=1",
};

/// The test's oracle: a request head written from a map the way the map says,
/// changed first (what `encode_map_for_member` must write without changing it).
///
/// `body_len`: `None` when the request has no body to send; otherwise its exact
/// length if known. The framing follows what the headers say (the client's framing
/// was checked on the way in: a single `chunked`, or a `Content-Length`); a body
/// of unknown length without either is sent chunked (h2 clients).
fn reference_head(
    method: &http::Method,
    target: &str,
    headers: &mut HeaderMap,
    body_len: Option<Option<u64>>,
    out: &mut Vec<u8>,
) -> h1_codec::BodyFraming {
    let framing = match body_len {
        None => {
            headers.remove(header::TRANSFER_ENCODING);
            h1_codec::BodyFraming::Empty
        }
        Some(len) => {
            if headers.contains_key(header::TRANSFER_ENCODING) {
                headers.remove(header::CONTENT_LENGTH);
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
                h1_codec::BodyFraming::Chunked
            } else if let Some(n) = h1_codec::length::content_length(
                headers
                    .get_all(header::CONTENT_LENGTH)
                    .iter()
                    .map(HeaderValue::as_bytes),
            )
            .ok()
            .flatten()
            {
                h1_codec::BodyFraming::Length(n)
            } else if let Some(n) = len {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                h1_codec::BodyFraming::Length(n)
            } else {
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
                h1_codec::BodyFraming::Chunked
            }
        }
    };
    out.extend_from_slice(method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in headers.iter() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    framing
}

/// A map of `pairs`, in order (`collect` appends).
fn map(pairs: &[(&str, &str)]) -> HeaderMap {
    let field = |(k, v): &(&str, &str)| {
        let name = HeaderName::from_bytes(k.as_bytes()).expect("name");
        (name, HeaderValue::from_str(v).expect("value"))
    };
    pairs.iter().map(field).collect()
}

#[test]
fn upgrade_is_asked_by_connection_and_upgrade() {
    assert!(wants_upgrade(&map(&[
        ("connection", "Upgrade"),
        ("upgrade", "websocket")
    ])));
    assert!(!wants_upgrade(&map(&[("upgrade", "websocket")])));
}

#[test]
fn forwarded_headers_append_and_set() {
    let mut h = map(&[
        ("x-forwarded-for", "1.1.1.1"),
        ("x-forwarded-for", "2.2.2.2"),
        ("x-forwarded-proto", "https"),
    ]);
    let conn = ClientConn::new(
        "::ffff:10.1.2.3".parse().expect("ip"),
        KeyRule::default(),
        8080,
        false,
        Activity::new(None),
    );
    set_forwarded(
        &mut h,
        &conn,
        &HeaderValue::from_static("App.example.com:8080"),
    );
    assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
    assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 10.1.2.3");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["x-forwarded-host"], "App.example.com:8080");
    assert_eq!(h["x-forwarded-port"], "8080");
}

fn conn(ip: &str, https: bool, settings: &ForwardedSettings) -> ClientConn {
    ClientConn::new(
        ip.parse().expect("ip"),
        KeyRule::default(),
        443,
        https,
        Activity::new(None),
    )
    .with_forwarded(settings, Some("192.0.2.10:443".parse().expect("addr")))
}

#[test]
fn the_slot_share_goes_by_the_real_client_only_behind_a_named_proxy() {
    let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
    let lb = ForwardedSettings {
        trusted: vec!["10.0.0.0/8".parse().expect("net")],
        ..ForwardedSettings::default()
    };
    let two = map(&[
        ("x-forwarded-for", "192.0.2.50"),
        ("x-forwarded-for", "203.0.113.9, 198.51.100.7"),
    ]);
    assert_eq!(
        conn("10.0.0.5", false, &lb).client(&two).ip,
        ip("198.51.100.7")
    );
    // Not the named proxy, or the default trust of everyone: its own address.
    assert_eq!(
        conn("192.0.2.1", false, &lb).client(&two).ip,
        ip("192.0.2.1")
    );
    let all = ForwardedSettings::default();
    assert_eq!(
        conn("10.0.0.5", false, &all).client(&two).ip,
        ip("10.0.0.5")
    );
    // A last entry that is no address, or none at all: the proxy's own.
    let junk = map(&[("x-forwarded-for", "203.0.113.9, unknown")]);
    assert_eq!(
        conn("10.0.0.5", false, &lb).client(&junk).ip,
        ip("10.0.0.5")
    );
    assert_eq!(
        conn("10.0.0.5", false, &lb).client(&map(&[])).ip,
        ip("10.0.0.5")
    );
}

#[test]
fn forwarded_is_appended_for_trusted_clients_and_replaced_for_others() {
    let settings = ForwardedSettings {
        header: true,
        by: "_router1".into(),
        trusted: vec!["10.0.0.0/8".parse().expect("net")],
    };
    assert!(settings.by_is_valid());
    let sent = [
        ("forwarded", "for=198.51.100.7;proto=https"),
        ("x-forwarded-for", "198.51.100.7"),
    ];
    // From the trusted load balancer: appended.
    let mut h = map(&sent);
    set_forwarded(
        &mut h,
        &conn("10.1.2.3", true, &settings),
        &HeaderValue::from_static("Shop.example.com:8443"),
    );
    assert_eq!(
        h["forwarded"],
        "for=198.51.100.7;proto=https, for=10.1.2.3;proto=https;by=_router1;host=\"Shop.example.com:8443\""
    );
    assert_eq!(h["x-forwarded-for"], "198.51.100.7, 10.1.2.3");
    // From anyone else: replaced, so the chain cannot be forged.
    let mut h = map(&sent);
    set_forwarded(
        &mut h,
        &conn("203.0.113.5", false, &settings),
        &HeaderValue::from_static("a.test"),
    );
    assert_eq!(
        h["forwarded"],
        "for=203.0.113.5;proto=http;by=_router1;host=\"a.test\""
    );
    assert_eq!(h["x-forwarded-for"], "203.0.113.5");
    // IPv6 nodes are bracketed and quoted; by=ip is the local address.
    let ip = ForwardedSettings {
        header: true,
        by: "ip".into(),
        ..ForwardedSettings::default()
    };
    let mut h = HeaderMap::new();
    set_forwarded(
        &mut h,
        &conn("2001:db8::1", true, &ip),
        &HeaderValue::from_static("a.test"),
    );
    assert_eq!(
        h["forwarded"],
        "for=\"[2001:db8::1]\";proto=https;by=\"192.0.2.10:443\";host=\"a.test\""
    );
}

#[test]
fn without_the_header_an_untrusted_clients_forwarded_is_dropped() {
    let settings = ForwardedSettings {
        trusted: vec!["10.0.0.0/8".parse().expect("net")],
        ..ForwardedSettings::default()
    };
    let mut h = map(&[("forwarded", "for=1.2.3.4"), ("x-forwarded-for", "1.2.3.4")]);
    set_forwarded(
        &mut h,
        &conn("203.0.113.5", false, &settings),
        &HeaderValue::from_static("a.test"),
    );
    assert!(!h.contains_key("forwarded"));
    assert_eq!(h["x-forwarded-for"], "203.0.113.5");
    // The default trusts everyone: the router appends, as it always has.
    let mut h = map(&[("x-forwarded-for", "1.2.3.4")]);
    set_forwarded(
        &mut h,
        &conn("203.0.113.5", false, &ForwardedSettings::default()),
        &HeaderValue::from_static("a.test"),
    );
    assert_eq!(h["x-forwarded-for"], "1.2.3.4, 203.0.113.5");
    assert!(
        !ForwardedSettings {
            by: "router".into(),
            ..ForwardedSettings::default()
        }
        .by_is_valid()
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    /// The head a member gets from the client's fields as they came (the own
    /// path, no map) says what the map path's says: the same request line
    /// and each name's values, hop-by-hop fields and the forwarding family
    /// handled alike, for trusted and untrusted clients, with `Forwarded`
    /// on and off, and the request ID and trace context set alike.
    #[test]
    fn a_request_written_from_its_fields_says_what_its_map_says(
        fields in proptest::collection::vec((
            proptest::sample::select(vec![
                "Host", "Accept", "Cookie", "X-Forwarded-For", "x-forwarded-for",
                "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Port",
                "Forwarded", "Keep-Alive", "TE", "Connection", "Upgrade",
                "Proxy-Connection", "Content-Length", "X-A", "X-Request-Id",
                "traceparent", "tracestate",
            ]),
            proptest::sample::select(vec![
                "1", "a.example", "keep-alive", "203.0.113.9, 198.51.100.7",
                "for=192.0.2.60", "x-a", "X-A, keep-alive", "https", "v w",
            ]),
        ), 0..10),
        trusted in proptest::prelude::any::<bool>(),
        header in proptest::prelude::any::<bool>(),
        https in proptest::prelude::any::<bool>(),
        body_len in proptest::sample::select(vec![None, Some(Some(5u64)), Some(None)]),
    ) {
        let mut head = String::from("GET /p?q=1 HTTP/1.1\r\n");
        for (n, v) in &fields {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let raw = Fields::of_head(head.as_bytes()).expect("a whole head");
        let settings = ForwardedSettings {
            header,
            by: String::new(),
            trusted: if trusted { ForwardedSettings::default().trusted } else { vec!["10.0.0.0/8".parse().expect("net")] },
        };
        let conn = conn("192.0.2.1", https, &settings);
        let host = HeaderValue::from_static("a.example");
        let mut written = Vec::new();
        let trace = super::super::trace::Trace::of(FieldsRef::Raw(&raw), conn.trusted(), Default::default());
        encode_for_member(GET_P, (&raw, None), Provenance { conn: &conn, trace: &trace }, &host, &mut written);
        let mut map = raw.to_map(6);
        remove_hop_by_hop(&mut map, false);
        set_forwarded(&mut map, &conn, &host);
        trace.set_in(&mut map);
        let mut mapped = Vec::new();
        reference_head(&http::Method::GET, "/p?q=1", &mut map, None, &mut mapped);
        proptest::prop_assert_eq!(head_by_name(&written), head_by_name(&mapped));
        // Written from an untouched map (h2 and hyper's HTTP/1 clients), with
        // a body or not: what the map, changed and then written, says; and
        // a chunked body never carries a `Content-Length` beside it.
        let mut from_map = Vec::new();
        let untouched = raw.to_map(6);
        let framing = encode_map_for_member(
            GET_P, &untouched, body_len, Provenance { conn: &conn, trace: &trace }, &host, &mut from_map,
        );
        let mut mapped = Vec::new();
        let mut map = raw.to_map(6);
        remove_hop_by_hop(&mut map, false);
        set_forwarded(&mut map, &conn, &host);
        trace.set_in(&mut map);
        let want = reference_head(&http::Method::GET, "/p?q=1", &mut map, body_len, &mut mapped);
        proptest::prop_assert_eq!(&framing, &want);
        let (line, mut fields) = head_by_name(&mapped);
        if framing == h1_codec::BodyFraming::Chunked {
            fields.remove("content-length");
        }
        proptest::prop_assert_eq!(head_by_name(&from_map), (line, fields));
        proptest::prop_assert!(from_map.ends_with(b"\r\n\r\n"));
    }
}
