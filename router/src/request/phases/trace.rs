//! Each request's ID and W3C trace context (<https://www.w3.org/TR/trace-context/>).
//!
//! - **`X-Request-Id`**: the client's, when `forwarded.trusted` trusts the client
//!   (the same rule as for `X-Forwarded-For`) and the value is a plain token of at
//!   most [`MAX_ID`] bytes; else one made here (32 hex digits). It goes to the
//!   member, back to the client, into the access log and into the router's own
//!   error pages, so one value finds a request everywhere.
//! - **`traceparent`**: a valid one from the client is continued (its trace ID and
//!   flags, the router's own span ID as the parent the member sees) and its
//!   `tracestate` passed on; none, or an invalid one, starts a trace (a new trace
//!   ID, the sampled flag set only for the share `traces.sample_ratio` samples
//!   when spans are exported, see [`spans`]) and any `tracestate` is dropped, as the
//!   recommendation says. The access log carries the trace ID.
//!
//! IDs are made from a per-process random seed and a per-thread counter through
//! SplitMix64: unique, unpredictable enough for correlation (they guard nothing),
//! and about 30 instructions an ID, where a system call per request for random
//! bytes would cost more than the rest of this module.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use h1_codec::fields::{FieldsRef, Name};
use http::HeaderValue;

use crate::request::connection::client_conn::ClientConn;
use spans::Sample;

pub const X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");
const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
const TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// A client's `X-Request-Id` longer than this is replaced.
pub const MAX_ID: usize = 128;

/// `00-` + 32 + `-` + 16 + `-` + 2.
const TRACEPARENT_LEN: usize = 55;

/// Where a request comes from, as its member is told: the client's
/// connection (address, TLS, the forwarding trust rule) and the request's
/// trace (its ID and context). Passed together wherever a request's head or
/// its variables are written.
#[derive(Clone, Copy)]
pub struct Provenance<'a> {
    pub conn: &'a ClientConn,
    pub trace: &'a Trace,
}

/// A request's ID and the trace context it carries to the member.
#[derive(Clone, Debug)]
pub struct Trace {
    /// `X-Request-Id`: the client's (trusted, well-formed) or made here.
    pub request_id: RequestId,
    /// `traceparent` towards the member: the trace's ID, the router's span as
    /// the parent, the flags.
    traceparent: [u8; TRACEPARENT_LEN],
    /// The client's `tracestate` goes on (its `traceparent` was valid).
    pub keep_state: bool,
    /// The client's span (its `traceparent`'s parent ID), when it sent a valid one.
    pub parent: Option<[u8; 16]>,
}

/// A request's ID: one made here (32 hex digits: the trace ID when the trace
/// starts here, so one value finds the request in logs and traces), or the
/// client's. Either is visible ASCII, so it is a header value and a `str`.
#[derive(Clone, Debug)]
pub struct RequestId(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Made([u8; 32]),
    Kept(HeaderValue),
}

impl RequestId {
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Made(hex) => hex,
            Repr::Kept(v) => v.as_bytes(),
        }
    }

    /// A client's ID, kept as it came.
    pub fn kept(value: HeaderValue) -> RequestId {
        RequestId(Repr::Kept(value))
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("-")
    }

    /// As a header value (for a map: hyper's and h3's servers and clients),
    /// marked never to be indexed: every request's ID is new, so in an h2
    /// connection's HPACK table each would push out a field that repeats, and
    /// the `h2` crate compares a new value with every one of that name already
    /// in the table (about 50 comparisons a response once the table is full of
    /// IDs: 1 100 instructions of an h2 request, `bench/instructions.py --h2`).
    pub fn header_value(&self) -> HeaderValue {
        let mut value = match &self.0 {
            Repr::Made(hex) => {
                HeaderValue::from_bytes(hex).unwrap_or(HeaderValue::from_static("-"))
            }
            Repr::Kept(v) => v.clone(),
        };
        value.set_sensitive(true);
        value
    }
}

impl Trace {
    /// The trace of a request whose fields are `fields`, from a client whose
    /// forwarding fields are trusted or not.
    /// New traces are sampled by `sample` (`traces.sample_ratio`; see
    /// [`spans`]); a continued one keeps its parent's flags.
    pub fn of(fields: FieldsRef<'_>, trusted: bool, sample: Sample) -> Trace {
        // Most requests carry neither field: one bit test each.
        let kept = (trusted && fields.contains(Name::XRequestId))
            .then(|| {
                let mut given = fields.values(Name::XRequestId);
                match (given.next(), given.next()) {
                    (Some(v), None) if is_plain_id(v) => fields.header_value(v),
                    _ => None,
                }
            })
            .flatten()
            .map(|h| RequestId(Repr::Kept(h)));
        let parent = fields
            .contains(Name::Traceparent)
            .then(|| {
                let mut parents = fields.values(Name::Traceparent);
                match (parents.next(), parents.next()) {
                    (Some(v), None) => parse_traceparent(v),
                    _ => None,
                }
            })
            .flatten();
        let mut traceparent = [0u8; TRACEPARENT_LEN];
        traceparent[..3].copy_from_slice(b"00-");
        traceparent[35] = b'-';
        traceparent[52] = b'-';
        let keep_state = parent.is_some();
        let parent_span = parent.map(|p| p.2);
        let request_id = match parent {
            Some((trace_id, flags, _)) => {
                let [span] = ids::<1>();
                traceparent[3..35].copy_from_slice(&trace_id);
                write_hex(span, &mut traceparent[36..52]);
                traceparent[53..].copy_from_slice(&flags);
                kept.unwrap_or_else(|| RequestId(Repr::Made(hex32(ids::<2>()))))
            }
            None => {
                let [high, low, span] = ids::<3>();
                let trace_id = hex32([high, low]);
                traceparent[3..35].copy_from_slice(&trace_id);
                write_hex(span, &mut traceparent[36..52]);
                let flags = if sample.new_trace(low) { b"01" } else { b"00" };
                traceparent[53..].copy_from_slice(flags);
                kept.unwrap_or(RequestId(Repr::Made(trace_id)))
            }
        };
        Trace {
            request_id,
            traceparent,
            keep_state,
            parent: parent_span,
        }
    }

    /// Whether the trace is sampled (its flags' low bit): a span is exported
    /// for it when spans are on.
    pub fn sampled(&self) -> bool {
        matches!(
            self.traceparent[54],
            b'1' | b'3' | b'5' | b'7' | b'9' | b'b' | b'd' | b'f'
        )
    }

    /// The `traceparent` value the member gets.
    pub fn traceparent(&self) -> &[u8] {
        &self.traceparent
    }

    /// The trace ID's low 64 bits (what the ratio samples on): its last 16
    /// hex digits, read without a `str` (`from_str_radix` took 300
    /// instructions a sampled request).
    pub fn low_bits(&self) -> u64 {
        self.traceparent[19..35]
            .iter()
            .try_fold(0u64, |bits, &d| {
                Some(bits << 4 | u64::from(char::from(d).to_digit(16)?))
            })
            .unwrap_or(0)
    }

    /// The trace ID (32 hex digits), for the access log.
    pub fn trace_id(&self) -> &str {
        std::str::from_utf8(&self.traceparent[3..35]).unwrap_or("")
    }

    /// Sets the request ID and the trace context in a request's map (what the
    /// member gets through hyper's clients: h2 members, upgrades): what
    /// `headers::encode_for_member` writes for the own path.
    pub fn set_in(&self, headers: &mut http::HeaderMap) {
        headers.insert(X_REQUEST_ID, self.request_id.header_value());
        if let Ok(v) = HeaderValue::from_bytes(&self.traceparent) {
            headers.insert(TRACEPARENT, v);
        }
        if !self.keep_state {
            headers.remove(TRACESTATE);
        }
    }
}

/// A request ID a client may set: visible ASCII without space, quote, backslash
/// or comma (it is written into log lines and pages), at most [`MAX_ID`] bytes.
fn is_plain_id(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_ID
        && v.iter()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b','))
}

/// A `traceparent` value's trace ID and flags, if it is valid (version `00`
/// exactly as long as that version says; a later version at least that long
/// with `-` after it; lower-case hex; no all-zero trace or parent ID; never
/// version `ff`).
fn parse_traceparent(v: &[u8]) -> Option<([u8; 32], [u8; 2], [u8; 16])> {
    let v = trim(v);
    if v.len() < TRACEPARENT_LEN {
        return None;
    }
    let hex = |s: &[u8]| s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let (version, trace, parent, flags) = (&v[0..2], &v[3..35], &v[36..52], &v[53..55]);
    let dashes = v[2] == b'-' && v[35] == b'-' && v[52] == b'-';
    let fits = match version {
        b"00" => v.len() == TRACEPARENT_LEN,
        b"ff" => false,
        _ => v.len() == TRACEPARENT_LEN || v[TRACEPARENT_LEN] == b'-',
    };
    let zero = |s: &[u8]| s.iter().all(|b| *b == b'0');
    if !(dashes && fits && hex(version) && hex(trace) && hex(parent) && hex(flags))
        || zero(trace)
        || zero(parent)
    {
        return None;
    }
    Some((
        trace.try_into().ok()?,
        flags.try_into().ok()?,
        parent.try_into().ok()?,
    ))
}

fn trim(v: &[u8]) -> &[u8] {
    v.trim_ascii()
}

/// `N` new 64-bit IDs.
fn ids<const N: usize>() -> [u64; N] {
    thread_local! {
        static NEXT: Cell<u64> = Cell::new(seed());
    }
    NEXT.with(|next| {
        std::array::from_fn(|_| {
            let n = next.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
            next.set(n);
            splitmix(n)
        })
    })
}

/// Per thread: the process's random seed and the thread's own offset.
fn seed() -> u64 {
    static PROCESS: OnceLock<u64> = OnceLock::new();
    let process = *PROCESS.get_or_init(|| std::hash::RandomState::new().build_hasher().finish());
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u64(process);
    process ^ h.finish().rotate_left(17)
}

fn splitmix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Two hex digits for each byte value: a byte a lookup, not a nibble a branch.
const HEX_PAIRS: [[u8; 2]; 256] = {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut pairs = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        pairs[i] = [DIGITS[i >> 4], DIGITS[i & 0xf]];
        i += 1;
    }
    pairs
};

/// `v` as 16 hex digits into the first 16 bytes of `out`.
fn write_hex(v: u64, out: &mut [u8]) {
    for (pair, byte) in out.chunks_exact_mut(2).zip(v.to_be_bytes()) {
        pair.copy_from_slice(&HEX_PAIRS[usize::from(byte)]);
    }
}

fn hex32(v: [u64; 2]) -> [u8; 32] {
    let mut out = [0u8; 32];
    write_hex(v[0], &mut out[..16]);
    write_hex(v[1], &mut out[16..]);
    out
}

#[cfg(test)]
mod tests;
