//! The checks behind each fuzz target, one function per parser that reads bytes
//! from outside. Each is called by its libFuzzer binary (`fuzz_targets/`,
//! `cargo +nightly fuzz run NAME --features libfuzzer`) and, on stable, by
//! `tests/corpora.rs`, which replays every committed corpus file: a regression on
//! a known input fails the build without a nightly toolchain.
//!
//! A check fails by panicking. Besides "no panic, no unbounded memory" in the code
//! under test, each states a property that two readings must share:
//! - `client_framing`: the framing reader cuts a client's stream at the same byte
//!   whatever the read split (the first input byte chooses the split);
//! - `client_head`: what the router's own HTTP/1 path reads is the client's bytes
//!   as the framing reader passes them (cut, the poison in place of the rest); a
//!   request it takes must end before the cut, and httparse (the member side's
//!   parser) must read the same head length, method, target and fields;
//! - `member_response`: a member's response head and chunked body decode to the
//!   same bytes, trailers and end whatever the read split, and a response read
//!   whole is one hyper's client reads with the same status, body and trailers;
//! - `proxy_header`: a PROXY header the portproxy accepts is one `ppp` accepts with
//!   the same addresses, and every shorter prefix of it reads as incomplete;
//! - `stomp_frames`: STOMP frames decode the same whatever the read split;
//! - `routing_event`: an event that decodes applies idempotently (twice = once);
//! - `client_stream`: a client's bytes through the whole router to a member,
//!   compared with a strict reader of its own (see [`client_stream`]);
//! - `tls_hello`: the ClientHello reader behind SNI passthrough gives the same
//!   name at any split, keeps every byte, and agrees with a reader of our own;
//! - `cluster_wire`: the portproxies' request and answer lines read the same at
//!   any split, and a request line names the port `ppp` reads;
//! - `router_config`, `cluster_files`: a file is settings or an error, never a
//!   panic;
//! - `app_settings`: an admin API body is settings or a 400, and settings that
//!   check out survive JSON both ways and compile; a `Cookie` header names at most
//!   one member, and the cookie the router sets names exactly the member it was
//!   set for;
//! - `compression`: an `Accept-Encoding` value chooses the same read as one
//!   line or two, and a body compressed as the router streams it decodes to
//!   its bytes;
//! - `h1_encode`: a response head and a request head h1-codec writes read back
//!   through its own readers with the same status, fields and framing.

mod client_stream;
mod cluster_wire;
mod compression;
mod h1_encode;
mod h2_frames;
mod h3_frames;
mod member_response;
mod tls_hello;

pub use client_stream::client_stream;
pub use cluster_wire::cluster_wire;
pub use compression::compression;
pub use h1_encode::h1_encode;
pub use h2_frames::h2_frames;
pub use h3_frames::h3_frames;
pub use member_response::member_response;
pub use tls_hello::tls_hello;

use bytes::BytesMut;

/// A target's check: panics on a failed property.
pub type Check = fn(&[u8]);

/// Every target, by the name of its binary in `fuzz_targets/` and its corpus.
pub const TARGETS: [(&str, Check); 19] = [
    ("client_framing", client_framing),
    ("client_head", client_head),
    ("client_stream", client_stream),
    ("member_response", member_response),
    ("proxy_header", proxy_header),
    ("stomp_frames", stomp_frames),
    ("routing_event", routing_event),
    ("router_config", router_config),
    ("cluster_files", cluster_files),
    ("cluster_wire", cluster_wire),
    ("tls_hello", tls_hello),
    ("app_settings", app_settings),
    ("compression", compression),
    ("h3_frames", h3_frames),
    ("pair_bodies", pair_bodies),
    ("log_template", log_template),
    ("ocsp_answer", ocsp_answer),
    ("h1_encode", h1_encode),
    ("h2_frames", h2_frames),
];

/// The check of the target called `name`.
pub fn check(name: &str) -> Option<Check> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}
use tokio_util::codec::Decoder;

/// Where to split `data[1..]`, chosen by its first byte; the rest.
fn split(data: &[u8]) -> Option<(usize, &[u8])> {
    let (&first, rest) = data.split_first()?;
    let at = if rest.is_empty() {
        0
    } else {
        usize::from(first) * rest.len() / 256
    };
    Some((at, rest))
}

/// The framing reader's verdict on `pieces` fed in order: the absolute offset of
/// the cut and why, if any, and the heads it reported (each start it could be asked
/// about: every offset of the stream).
fn framing_cut(pieces: &[&[u8]]) -> (Option<(usize, &'static str)>, Vec<h1_codec::framing::Head>) {
    framing_cut_resting(pieces, false)
}

/// [`framing_cut`]; with `rest`, the framing is replaced by a resumed one
/// wherever it says it is at rest (what an idle connection does).
fn framing_cut_resting(
    pieces: &[&[u8]],
    rest: bool,
) -> (Option<(usize, &'static str)>, Vec<h1_codec::framing::Head>) {
    use h1_codec::framing::Framing;
    let mut f = Framing::new();
    let mut offset = 0;
    let mut heads = Vec::new();
    let mut cut = None;
    for piece in pieces {
        let got = f.feed(piece);
        // Every head finished in this piece is still remembered (a piece holds
        // fewer than the reader keeps, or the report is lost for all splits alike).
        let upto = offset + got.map_or(piece.len(), |(i, _)| i);
        for start in 0..=upto as u64 {
            if let Some(h) = f.head_at(start)
                && !heads.contains(&h)
            {
                heads.push(h);
            }
        }
        if let Some((i, why)) = got {
            cut = Some((offset + i, why.as_str()));
            break;
        }
        offset += piece.len();
        if rest && let Some(pos) = f.at_rest() {
            assert_eq!(pos, offset as u64, "resting where the stream stands");
            f = Framing::resume(pos);
        }
    }
    heads.sort_by_key(|h| h.start);
    (cut, heads)
}

pub fn client_framing(data: &[u8]) {
    let Some((at, stream)) = split(data) else {
        return;
    };
    let whole = framing_cut(&[stream]);
    let (a, b) = stream.split_at(at);
    let two = framing_cut(&[a, b]);
    assert_eq!(two.0, whole.0, "split at {at}");
    // Resting between the pieces (where the framing says it may) changes nothing.
    let rested = framing_cut_resting(&[a, b], true);
    assert_eq!(rested, two, "split at {at}, resting between");
    // A split loses no head (the whole may have forgotten the oldest ones).
    for h in &whole.1 {
        assert!(two.1.contains(h), "split at {at}: {h:?} not reported");
    }
    if stream.len() <= 64 {
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        let each = framing_cut(&bytes);
        assert_eq!(each.0, whole.0, "byte by byte");
        assert_eq!(
            framing_cut_resting(&bytes, true),
            each,
            "byte by byte, resting wherever it may"
        );
        for h in &whole.1 {
            assert!(each.1.contains(h), "byte by byte: {h:?} not reported");
        }
    }
}

pub fn client_head(data: &[u8]) {
    use h1_codec::framing::{Framing, POISON};
    use router::request::connection::h1::head::{HeadLimits, Parsed, parse};
    let limits = HeadLimits {
        max_bytes: 64 * 1024,
        max_headers: 100,
        max_body: 16 * 1024,
    };
    // What the own path reads: the client's bytes as the framing reader passes
    // them (cut, with the poison in place of the rest), and its report.
    let mut framing = Framing::new();
    let cut = framing.feed(data);
    let seen = match cut {
        Some((at, _)) => [&data[..at], POISON].concat(),
        None => data.to_vec(),
    };
    let framed = framing.head_at(0);
    let mut buf = bytes::BytesMut::from(&seen[..]);
    let Parsed::Request {
        head,
        body,
        parts,
        fields: taken,
    } = parse(&mut buf, &limits, framed)
    else {
        // Left as it was for hyper.
        assert_eq!(&buf[..], &seen[..], "a request not taken is left whole");
        return;
    };
    assert_eq!(&seen[head..head + body.len()], &body[..], "the body");
    assert_eq!(&buf[..], &seen[head + body.len()..], "what follows stays");
    let body = body.len();
    let Some(framed) = framed else {
        panic!("the own path took a request the framing reader did not report");
    };
    assert_eq!(
        framed.end, head as u64,
        "the head ends where the reader said"
    );
    if let Some((at, why)) = cut {
        assert!(
            head + body <= at,
            "the own path took a request past the framing reader's cut at {at} ({why:?})"
        );
    }
    let mut fields = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(&seen) {
        Ok(httparse::Status::Complete(n)) => assert_eq!(n, head, "head length"),
        other => panic!("httparse disagrees on a head the own path took: {other:?}"),
    }
    assert_eq!(req.method, Some(parts.method.as_str()));
    assert_eq!(req.path, Some(parts.uri.to_string().as_str()));
    assert_eq!(req.headers.len(), taken.len(), "field count");
    for (h, (name, value)) in req.headers.iter().zip(taken.iter()) {
        assert_eq!(
            (h.name.as_bytes(), h.value),
            (name, value),
            "the fields as they came"
        );
    }
    // Its body's length is the one Content-Length rule's, over every field.
    let lengths = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| h.value);
    match h1_codec::length::content_length(lengths) {
        Ok(n) => assert_eq!(n.unwrap_or(0), body as u64, "body length"),
        Err(e) => panic!("the own path took a request with a bad length: {e:?}"),
    }
}

pub fn proxy_header(data: &[u8]) {
    use proxy_protocol::header::{Inspect, inspect};
    let Inspect::Header {
        len,
        source,
        destination,
        ..
    } = inspect(data)
    else {
        return;
    };
    assert!(len <= data.len());
    for k in 0..len {
        assert_eq!(
            inspect(&data[..k]),
            Inspect::Incomplete,
            "a prefix of {k} of a {len}-byte header"
        );
    }
    let header = &data[..len];
    let theirs = if header.starts_with(b"PROXY ") {
        std::str::from_utf8(header)
            .ok()
            .and_then(|t| ppp::v1::Header::try_from(t).ok())
            .map(|h| match h.addresses {
                ppp::v1::Addresses::Tcp4(a) => Some((
                    std::net::SocketAddr::from((a.source_address, a.source_port)),
                    std::net::SocketAddr::from((a.destination_address, a.destination_port)),
                )),
                ppp::v1::Addresses::Tcp6(a) => Some((
                    std::net::SocketAddr::from((a.source_address, a.source_port)),
                    std::net::SocketAddr::from((a.destination_address, a.destination_port)),
                )),
                ppp::v1::Addresses::Unknown => None,
            })
    } else {
        ppp::v2::Header::try_from(header)
            .ok()
            .map(|h| match h.addresses {
                ppp::v2::Addresses::IPv4(a) => Some((
                    std::net::SocketAddr::from((a.source_address, a.source_port)),
                    std::net::SocketAddr::from((a.destination_address, a.destination_port)),
                )),
                ppp::v2::Addresses::IPv6(a) => Some((
                    std::net::SocketAddr::from((a.source_address, a.source_port)),
                    std::net::SocketAddr::from((a.destination_address, a.destination_port)),
                )),
                _ => None,
            })
    };
    let Some(theirs) = theirs else {
        panic!("ppp refuses a header the portproxy accepts: {header:?}");
    };
    if let (Some(s), Some(d)) = (source, destination) {
        let unmap =
            |a: std::net::SocketAddr| std::net::SocketAddr::new(a.ip().to_canonical(), a.port());
        let theirs = theirs.map(|(s, d)| (unmap(s), unmap(d)));
        assert_eq!(Some((unmap(s), unmap(d))), theirs, "addresses");
    }
}

/// STOMP items decoded from `pieces` arriving in order, as text to compare.
fn stomp_reading(pieces: &[&[u8]]) -> String {
    use spi_consumer::source::stomp::frame::{Codec, Limits};
    let mut codec = Codec::new(Limits {
        max_head: 4096,
        max_headers: 32,
        max_body: 64 * 1024,
    });
    let mut buf = BytesMut::new();
    let mut out = String::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(item)) => out.push_str(&format!("{item:?};")),
                Ok(None) => break,
                Err(e) => return format!("{out} error {e}"),
            }
        }
    }
    out
}

pub fn stomp_frames(data: &[u8]) {
    let Some((at, stream)) = split(data) else {
        return;
    };
    let (a, b) = stream.split_at(at);
    assert_eq!(
        stomp_reading(&[a, b]),
        stomp_reading(&[stream]),
        "split at {at}"
    );
}

pub fn routing_event(data: &[u8]) {
    use spi_consumer::decode::{Decoded, decode, flat_differs};
    if let Some(diff) = flat_differs(data) {
        panic!("the flat reader and serde-saphyr disagree:\n{diff}");
    }
    let Ok(Decoded::Event(event)) = decode(data) else {
        return;
    };
    let mut once = spi_consumer::RoutingState::new();
    once.apply(&event);
    let mut twice = once.clone();
    twice.apply(&event);
    assert!(
        once == twice,
        "applying {} twice changed the state",
        event.action()
    );
}

pub fn router_config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = router::config::Config::parse(&text, "fuzz.yaml");
}

/// An app's header actions on a client's fields as they came (the own
/// HTTP/1.1 path): every field an action names is gone from them, and the
/// lines they add read back as fields, each name at most once, every one set
/// by an action; the response's likewise.
fn header_actions(settings: &router::policy::settings::AppSettings) {
    use router::policy::fields::{Action, FieldRules, RequestSets, Vars};
    let Some(rules) = FieldRules::of(settings.hsts.as_ref(), settings.headers.as_ref()) else {
        return;
    };
    let head =
        b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\nUser-Agent: u\r\nCookie: c\r\nx-a: 2\r\n\r\n";
    let Some(mut raw) = h1_codec::fields::Fields::of_head(head) else {
        return;
    };
    let vars = Vars {
        client_ip: b"192.0.2.1",
        request_id: b"id",
        sni: "h.example.com",
        app: Some(("app", "ns")),
        host: "h.example.com",
    };
    rules.on_raw_request(&mut raw);
    left_out(&raw, &rules.request);
    let mut added = Vec::new();
    RequestSets {
        rules: &rules,
        vars: Vars { ..vars },
    }
    .write(&mut added);
    set_once(b"GET / HTTP/1.1\r\n", &added, &rules.request);
    let head = b"HTTP/1.1 200 OK\r\nServer: s\r\nX-A: 1\r\nStrict-Transport-Security: x\r\n\r\n";
    let Some(mut raw) = h1_codec::fields::Fields::of_head(head) else {
        return;
    };
    let mut map = http::HeaderMap::new();
    if let Some(added) = rules.on_raw_response(&mut raw, &mut map, true, &vars) {
        left_out(&raw, &rules.response);
        let hsts = rules.hsts.is_some();
        assert!(
            !hsts
                || raw
                    .iter()
                    .all(|(n, _)| !n.eq_ignore_ascii_case(b"strict-transport-security")),
            "the member's HSTS left beside the router's"
        );
        set_once(b"HTTP/1.1 200 OK\r\n", &added, &rules.response);
    }

    fn left_out(raw: &h1_codec::fields::Fields, actions: &[Action]) {
        for action in actions {
            let (Action::Set(name, _) | Action::Delete(name)) = action;
            assert!(
                raw.iter()
                    .all(|(n, _)| !n.eq_ignore_ascii_case(name.as_str().as_bytes())),
                "{name} left in the message's fields"
            );
        }
    }

    fn set_once(line: &[u8], added: &[u8], actions: &[Action]) {
        let head = [line, added, b"\r\n"].concat();
        let Some(read) = h1_codec::fields::Fields::of_head(&head) else {
            panic!(
                "the lines the actions add do not read back: {:?}",
                String::from_utf8_lossy(added)
            );
        };
        let names: Vec<&[u8]> = read.iter().map(|(n, _)| n).collect();
        for (i, name) in names.iter().enumerate() {
            let text = String::from_utf8_lossy(name);
            if *name == b"strict-transport-security" {
                continue;
            }
            assert!(!names[..i].contains(name), "{text} added twice");
            assert!(
                actions
                    .iter()
                    .any(|a| matches!(a, Action::Set(n, _) if n.as_str().as_bytes() == *name)),
                "{text} added by no action"
            );
        }
    }
}

pub fn app_settings(data: &[u8]) {
    use router::policy::affinity::AffinityKey;
    use router::policy::settings::AppSettings;
    let key = AffinityKey::from_secret(b"fuzz affinity secret, 32 bytes!!");
    if let Ok(s) = serde_json::from_slice::<AppSettings>(data)
        && s.check().is_ok()
    {
        let json = serde_json::to_vec(&s).expect("settings serialise");
        let back: AppSettings = serde_json::from_slice(&json).expect("and read back");
        assert_eq!(back, s, "settings change through JSON");
        let _ = s.summary();
        header_actions(&s.over(&AppSettings::default()));
        let _ = router::policy::Policy::new("fuzz".into(), s.over(&AppSettings::default()), &key);
    }
    path_rules(data);
    cookies(data, &key);
}

/// The bytes as a name's path rules: checked, and every prefix they hold
/// finds a rule for itself (the longest prefix it is under), whose rewrite
/// makes a path the member can be sent.
fn path_rules(data: &[u8]) {
    if let Ok(rules) = serde_json::from_slice::<router::table::paths::PathRules>(data)
        && let Ok(table) = router::table::paths::PathTable::new(rules.clone())
    {
        // The lookup by first segment finds what a scan of every prefix,
        // longest first, finds.
        let mut scan: Vec<(&str, &str)> = rules
            .iter()
            .map(|(p, r)| (p.trim_end_matches('/'), r.app.as_str()))
            .map(|(p, a)| (if p.is_empty() { "/" } else { p }, a))
            .collect();
        scan.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        let under = |path: &str, p: &str| {
            p == "/"
                || path
                    .strip_prefix(p)
                    .is_some_and(|r| r.is_empty() || r.starts_with('/'))
        };
        for prefix in rules.keys() {
            for path in [
                prefix.clone(),
                format!("{prefix}/x"),
                format!("{prefix}x"),
                "/".into(),
            ] {
                let got = table.find(&path).map(|m| m.app.to_string());
                let want = scan
                    .iter()
                    .find(|(p, _)| under(&path, p))
                    .and_then(|(_, a)| spi_consumer::AppKey::parse(a))
                    .map(|k| k.to_string());
                assert_eq!(got, want, "{path}: the lookup against a scan");
            }
            let found = table.find(prefix).expect("a prefix is under its own rule");
            if let Some((len, to)) = found.rewrite {
                let path = router::table::paths::rewritten(&format!("{prefix}/x?q"), (len, &to));
                assert!(path.starts_with('/'), "{path}");
                assert!(http::Uri::try_from(path.as_str()).is_ok(), "{path}");
            }
        }
    }
}

/// The bytes as Cookie headers (split at newlines): no panic; and the
/// router's own cookie for the bytes as a member address names that member.
fn cookies(data: &[u8], key: &router::policy::affinity::AffinityKey) {
    use router::policy::affinity::Affinity;
    use router::policy::settings::AffinitySettings;
    let affinity = Affinity::new(AffinitySettings::default(), key.clone());
    let mut headers = http::HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        if let Ok(v) = http::HeaderValue::from_bytes(line) {
            headers.append(http::header::COOKIE, v);
        }
    }
    let _ = affinity.requested(&headers);
    let member = String::from_utf8_lossy(data);
    let https = data.first().is_some_and(|b| b & 1 == 1);
    if let Some(set) = affinity.set_cookie(key.id(&member), https) {
        let pair = set
            .to_str()
            .expect("ascii")
            .split(';')
            .next()
            .expect("name=value");
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            http::HeaderValue::from_str(pair).expect("value"),
        );
        assert_eq!(affinity.requested(&h), Some(key.id(&member)));
    }
}

pub fn cluster_files(data: &[u8]) {
    use portproxy::cluster::files::{parse_hosts_conf, parse_port_mappings, parse_proxy_conf};
    let text = String::from_utf8_lossy(data);
    let _ = parse_hosts_conf(&text, "hosts.conf");
    let _ = parse_port_mappings(&text, "portmappings.conf", 2222);
    let _ = parse_proxy_conf(&text, "proxy.conf", std::path::Path::new("/nonexistent"));
}

/// The bodies of the pair's link (`POST /pair/updates`, `POST /pair/counts`),
/// read as the admin API reads them: each update judged against the clock
/// bound, its value read as its key's kind reads it, the newer ones saved to
/// a state in memory (which must then send back only what it holds, never
/// a version from beyond the bound); the counts taken by a client table.
/// No panic, whatever the bytes.
pub fn pair_bodies(data: &[u8]) {
    use pair_state::now_ms;
    use router::pair::link::Updates;
    use router::pair::{Key, Node, State};
    if let Ok(updates) = serde_json::from_slice::<Updates>(data) {
        let state = State::in_memory(Node::A);
        let now = now_ms();
        for u in &updates.updates {
            if state.ahead(u, now).is_some() {
                continue;
            }
            let readable = match &u.key {
                Key::Settings(_) => serde_json::from_value::<
                    Option<router::policy::settings::AppSettings>,
                >(u.value.clone())
                .is_ok_and(|s| s.is_none_or(|s| s.check().is_ok())),
                Key::Split(_) => serde_json::from_value::<
                    Option<std::collections::BTreeMap<String, u32>>,
                >(u.value.clone())
                .is_ok_and(|w| w.is_none_or(|w| router::table::split::Split::new(w).is_ok())),
                Key::Rotate(_) => serde_json::from_value::<bool>(u.value.clone()).is_ok(),
                Key::Paths(_) => serde_json::from_value::<Option<router::table::paths::PathRules>>(
                    u.value.clone(),
                )
                .is_ok_and(|r| r.is_none_or(|r| router::table::paths::PathTable::new(r).is_ok())),
            };
            let mut turn = state.turn();
            if readable && turn.is_newer(u) {
                turn.remote(u).expect("in memory, a save cannot fail");
            }
        }
        let (sent, _, _) = state.since(0, usize::MAX);
        for u in &sent {
            assert!(
                state.ahead(u, now).is_none(),
                "a version beyond the bound kept"
            );
            assert_eq!(Key::parse(&u.key.text()).as_ref(), Some(&u.key));
        }
        // The state's own next write is above all it holds.
        let top = sent.iter().map(|u| u.version).max().unwrap_or(0);
        let mine = state
            .turn()
            .local(&Key::Settings("fuzz-ns".into()), serde_json::Value::Null)
            .expect("a version below the bound leaves room above");
        assert!(mine > top, "{mine} above {top}");
    }
    if let Ok(counts) = serde_json::from_slice::<router::pair::counts::Counts>(data) {
        let clients = router::policy::clients::Clients::new(prometheus_counter());
        let (entries, _) = counts.entries();
        for c in &entries {
            clients.add_peer(c);
        }
        let (held, _) = counts.held();
        clients.set_peer_held(&held, std::time::Duration::from_secs(1));
    }
}

/// A counter registered nowhere (what the client table counts into).
fn prometheus_counter() -> prometheus::IntCounter {
    prometheus::IntCounter::new("fuzz_untracked", "fuzz").expect("a valid name")
}

/// The access-log template parser (`access_log.template`) on any text, with
/// captures named after the input's first words: never a panic; a template
/// that compiles names only variables it knows and captures it was given,
/// and its literal text is what the input said outside `%{...}`.
pub fn log_template(data: &[u8]) {
    use router::log_format::{Captures, Part, Template, Var};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let words: Vec<String> = text
        .split_whitespace()
        .take(3)
        .map(str::to_string)
        .collect();
    let caps = Captures {
        request: &words,
        response: &words,
        cookies: &words,
    };
    if let Ok(t) = Template::parse(text, &caps) {
        for part in &t.parts {
            match part {
                Part::Var(Var::Request(i) | Var::Response(i) | Var::Cookie(i)) => {
                    assert!(*i < words.len(), "a capture beyond those given");
                }
                Part::Text(t) => assert!(!t.is_empty(), "an empty text piece"),
                Part::Var(_) => {}
            }
        }
    }
    line_cursor(data);
}

/// A syslog line written by its cursor (`router::syslog::Line`) from pieces
/// the input chooses is exactly their concatenation, cut at the line's
/// longest (one of four buffer sizes, the shipped one among them).
fn line_cursor(data: &[u8]) {
    use router::syslog::{LINE_MAX, SLACK};
    let Some((&size, rest)) = data.split_first() else {
        return;
    };
    let (got, want, end) = match size % 4 {
        0 => line_of::<{ 40 + SLACK }>(rest),
        1 => line_of::<{ 200 + SLACK }>(rest),
        2 => line_of::<{ 1000 + SLACK }>(rest),
        _ => line_of::<{ LINE_MAX + SLACK }>(rest),
    };
    let cut = want.len().min(end);
    assert_eq!(
        got,
        want[..cut],
        "the line is what was put, cut at its longest"
    );
}

/// The line the pieces of `data` make in a buffer of `SIZE` bytes, what
/// they concatenate to, and the line's longest.
fn line_of<const SIZE: usize>(mut rest: &[u8]) -> (Vec<u8>, Vec<u8>, usize) {
    use router::log_format::Literal;
    let mut want = Vec::new();
    let got = router::syslog::written::<SIZE>(|line| {
        while let Some((&op, more)) = rest.split_first() {
            let n = usize::from(op >> 2).min(more.len());
            let (piece, after) = more.split_at(n);
            rest = after;
            // A long run now and then: the shipped buffer's cut is reached.
            let times = if piece.first() == Some(&0xFF) {
                2_000
            } else {
                1
            };
            let number = u64::from(op).pow(u32::from(op % 5) + 1) * 7;
            for _ in 0..times {
                match op & 3 {
                    0 => line.put(piece),
                    1 => line.literal(&Literal::of(piece)),
                    2 => line.byte(op),
                    _ => line.number(number),
                }
                match op & 3 {
                    0 | 1 => want.extend_from_slice(piece),
                    2 => want.push(op),
                    _ => want.extend_from_slice(number.to_string().as_bytes()),
                }
            }
        }
    });
    (got, want, SIZE - router::syslog::SLACK)
}

/// An OCSP responder's answer (any bytes) checked against the fixture
/// certificate (`fixtures/ocsp/`): never a panic, and an answer accepted for
/// stapling is current at the time it was checked.
pub fn ocsp_answer(data: &[u8]) {
    use router::tls::ocsp::answer::{SKEW, Subject};
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    static SUBJECT: std::sync::OnceLock<Subject> = std::sync::OnceLock::new();
    const NOW: u64 = 1_795_936_400;
    let subject = SUBJECT.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/ocsp/");
        let chain: Vec<CertificateDer<'static>> = ["leaf.crt", "ca.crt"]
            .iter()
            .map(|f| {
                let pem = std::fs::read(format!("{dir}{f}")).expect("fixture");
                CertificateDer::from_pem_slice(&pem).expect("pem")
            })
            .collect();
        Subject::new(&chain).expect("the fixture chain")
    });
    let algs = rustls::crypto::aws_lc_rs::default_provider()
        .signature_verification_algorithms
        .all;
    if let Ok(c) = subject.check(data, NOW, algs) {
        assert!(c.this_update <= NOW + SKEW.as_secs() && NOW < c.next_update);
    }
}
