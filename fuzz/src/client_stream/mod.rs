//! `client_stream`: a client's HTTP/1 bytes through the whole router, differential.
//!
//! The router runs in this process on loopback, with one app routed to a member
//! ([`member`]) that reads what it is sent with a strict reader written from RFC
//! 9112 alone ([`oracle`]) and answers each request with a digest of what it read.
//! Each input is one client connection (from an address of its own): its bytes
//! are written in two pieces (the first input byte chooses where), and every
//! answer is read until the router closes. Then:
//!
//! - every request the member answered is one the strict reader read from the
//!   client's bytes, at the same place in the stream, with the same method, target
//!   (origin form), Host, end-to-end fields and body: the router and the member
//!   agree on where each request ends and what it says;
//! - the member read as many requests from this connection as the client got
//!   answers from it: nothing the router refused (or cut) reached the member;
//! - what the router sent the member is one unambiguous HTTP/1.1 stream
//!   (checked in [`member`]);
//! - the router answers or closes: it never waits on a request the strict
//!   reader found whole.
//!
//! This covers every reader a client's bytes meet in the router: the framing
//! reader and its cut, the own HTTP/1 path, hyper after the hand-off, and the
//! forwarding to the member.

mod harness;
mod member;
pub mod oracle;

use std::hash::{Hash, Hasher};

/// A request as a member should see it: what the comparison covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct View {
    method: String,
    target: String,
    host: Option<String>,
    /// End-to-end fields, by name (values of one name in order).
    fields: Vec<(String, String)>,
    body_len: usize,
    body: Vec<u8>,
}

/// Fields the router owns: hop-by-hop ones (RFC 9110 §7.6.1), the framing, the
/// `X-Forwarded-*` family it sets, and the request ID and trace context it sets
/// or continues (`request::trace`, tested on their own).
fn routers_own(name: &[u8]) -> bool {
    matches!(
        name,
        b"connection"
            | b"proxy-connection"
            | b"keep-alive"
            | b"te"
            | b"transfer-encoding"
            | b"upgrade"
            | b"content-length"
            | b"host"
            | b"x-request-id"
            | b"traceparent"
            | b"tracestate"
    ) || name.starts_with(b"x-forwarded-")
}

/// A field name with `_`: the router drops it (CGI-style members would read it
/// as the field spelled with `-`). This reader's own test, not the codec's.
fn underscored(name: &[u8]) -> bool {
    name.contains(&b'_')
}

impl View {
    /// The view of `request` with `target` and `host`, leaving out the router's own
    /// fields and those in `dropped`.
    fn new(
        request: &oracle::Request,
        target: Vec<u8>,
        host: Option<Vec<u8>>,
        dropped: &[Vec<u8>],
    ) -> View {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut fields: Vec<(String, String)> = request
            .fields
            .iter()
            .filter(|(n, _)| !routers_own(n) && !dropped.contains(n) && !underscored(n))
            .map(|(n, v)| (text(n), text(v)))
            .collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        View {
            method: text(&request.method),
            target: text(&target),
            host: host.as_deref().map(text),
            fields,
            body_len: request.body.len(),
            body: request.body.clone(),
        }
    }

    /// What a member must see of `request` as the client sent it: an absolute-form
    /// target becomes origin form and its authority the Host (RFC 9112 §3.2.2);
    /// fields the `Connection` header names are dropped, except Host and the
    /// `X-Forwarded-*` family.
    fn sent(request: &oracle::Request) -> View {
        let (target, host) = match oracle::absolute(&request.target) {
            Some((authority, origin)) => (origin, Some(authority.to_vec())),
            None => (
                request.target.clone(),
                oracle::values(request, b"host").next().map(<[u8]>::to_vec),
            ),
        };
        let dropped: Vec<Vec<u8>> = oracle::list(request, b"connection")
            .into_iter()
            .map(<[u8]>::to_ascii_lowercase)
            .collect();
        View::new(request, target, host, &dropped)
    }

    fn digest(&self) -> u64 {
        // `DefaultHasher::new()` has fixed keys: the same view, the same digest.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }
}

/// The check behind the `client_stream` target (see the module doc).
pub fn client_stream(data: &[u8]) {
    let Some((at, stream)) = crate::split(data) else {
        return;
    };
    // h2 with prior knowledge: not HTTP/1 (h2 is another target's subject).
    if stream.starts_with(b"PRI ") {
        return;
    }
    let (requests, stop) = oracle::all(stream);
    let run = harness::get().exchange(stream, at, &requests);
    if std::env::var_os("FUZZ_SHOW").is_some() {
        eprintln!(
            "strict reader: {} requests, then {stop:?}; answers {:?}; member answers in all {}; member read {}{}",
            requests.len(),
            run.answers,
            run.member_answers_in_all,
            run.member_read,
            if run.reset { "; reset" } else { "" }
        );
    }
    for (i, digest) in run.member_answers() {
        let Some(request) = requests.get(i) else {
            panic!(
                "the member answered request {i}; the strict reader reads {} and then {stop:?}",
                requests.len()
            );
        };
        let want = View::sent(request);
        assert!(
            want.digest() == digest,
            "request {i} reached the member otherwise than sent:\n  sent: {want:?}\n  read: {:?}",
            harness::get().member_view(digest)
        );
    }
    assert_eq!(
        run.member_answers_in_all,
        run.member_answers().count(),
        "the member answered a request the strict reader does not read ({} then {stop:?})",
        requests.len()
    );
    if !run.reset {
        assert_eq!(
            run.member_read,
            run.member_answers_in_all,
            "the member read requests of this connection its client got no answer to \
             ({} answers in all; the strict reader reads {} and then {stop:?})",
            run.answers.len(),
            requests.len()
        );
    }
}
