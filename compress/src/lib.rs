//! Response compression (`compression:`, and each app's `compression`
//! setting, off unless set): gzip, brotli or zstd, as the client's
//! `Accept-Encoding` asks, for the responses worth it.
//!
//! - **Which coding**: the one the client gives the highest q-value (`*`
//!   counts for codings it does not name, `q=0` refuses); on a tie the
//!   router's preference, zstd, then brotli, then gzip (zstd at level 3 packs
//!   as tight as brotli at 4 for a third of its CPU, and gzip trails both in
//!   bytes: `bench/RESULTS.md`, "Issue 51: spans, compression, slow start, the
//!   hybrid key exchange"). None acceptable: the
//!   response goes as it is (never a 406).
//! - **Which responses**: status 200, 403 or 404 (as nginx); a type in
//!   `compression.types`; no `Content-Encoding` of the member's own (an
//!   already-encoded response passes untouched); no `Cache-Control:
//!   no-transform`; not a range (`Range` asked, `Content-Range` answered); not
//!   shorter than `compression.min_length` when the length is known; not for
//!   `HEAD`, nor HTTP/1.0 (no chunked framing to end the body).
//! - **What changes**: `Content-Encoding` set, `Content-Length` and
//!   `Accept-Ranges` gone (the length is the compressed stream's, framed
//!   chunked on HTTP/1.1), a strong `ETag` made weak (the bytes differ), and
//!   `Vary: Accept-Encoding` on every response that would be compressed for a
//!   client taking a coding, sent compressed or not, so a cache keeps the two
//!   apart (as nginx's `gzip_vary`).
//! - **Bounds**: the body streams through the compressor ([`encode`]), never
//!   whole; each stream's memory is bounded by its window (gzip 32 KiB,
//!   brotli 256 KiB, zstd 512 KiB) and the compressor's tables: measured in
//!   flight, about 1.9 MiB a brotli stream, 1.5 MiB zstd, 0.36 MiB gzip
//!   (bench/RESULTS.md, "What compression.max_streams holds"); at most
//!   `compression.max_streams` responses are being compressed at once,
//!   `compression.max_streams_per_client` of them for one client (the next
//!   ones go uncompressed, counted); one poll compresses at most 256 KiB or
//!   2 ms before it yields the thread.

pub mod encode;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use h1_codec::fields::{Fields, FieldsRef};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::Body;
use per_source::{ClientKey, PerSource};
use serde::Deserialize;

use self::encode::{Compressing, Compressor, Levels, StreamSlot};

/// A response body compression takes and gives back: the router's own
/// (generic, so that this crate does not name it and it does not name
/// `Compressing`'s internals).
pub trait Compressible:
    Body<Data = bytes::Bytes, Error = encode::BodyError> + Unpin + Sized
{
    /// A body with nothing in it, left in the response while its own is
    /// wrapped.
    fn empty() -> Self;
    /// `compressing` as a body of this kind.
    fn compressed(compressing: Compressing<Self>) -> Self;
}

/// A content coding the router writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Coding {
    Gzip = 0,
    Brotli = 1,
    Zstd = 2,
}

impl Coding {
    /// Its `Content-Encoding` token.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// On a tie of q-values, the higher wins.
    fn preference(self) -> u8 {
        match self {
            Coding::Zstd => 3,
            Coding::Brotli => 2,
            Coding::Gzip => 1,
        }
    }
}

/// `compression:` in the configuration: how, once an app has it on.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionConfig {
    /// Media types compressed: `type/subtype`, `type/*`, or `+suffix`.
    pub types: Vec<String>,
    /// Responses known to be shorter go as they are.
    pub min_length: u64,
    pub gzip_level: u32,
    pub brotli_level: u32,
    pub zstd_level: i32,
    /// Responses being compressed at once at most; more go uncompressed.
    pub max_streams: usize,
    /// Of those, at most this many for one client (its key, as every
    /// per-client count): one client cannot hold every stream.
    pub max_streams_per_client: usize,
}

impl Default for CompressionConfig {
    fn default() -> CompressionConfig {
        CompressionConfig {
            types: [
                "text/*",
                "application/json",
                "application/javascript",
                "application/xml",
                "application/wasm",
                "image/svg+xml",
                "+json",
                "+xml",
            ]
            .map(String::from)
            .to_vec(),
            min_length: 1024,
            gzip_level: 2,
            brotli_level: 4,
            zstd_level: 3,
            max_streams: 256,
            max_streams_per_client: 32,
        }
    }
}

/// The slowest brotli level taken (see [`CompressionConfig::check`]).
pub const MAX_BROTLI: u32 = 9;
/// The slowest zstd level taken.
pub const MAX_ZSTD: i32 = 12;

impl CompressionConfig {
    /// Whether the settings can work: the field and the problem, if not.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(t) = self.types.iter().find(|t| !valid_type(t)) {
            return Err((
                "compression.types",
                format!("{t:?}: type/subtype, type/* or +suffix"),
            ));
        }
        if !(1..=9).contains(&self.gzip_level) {
            return Err(("compression.gzip_level", "1 to 9".into()));
        }
        // The slow levels are refused: brotli 10 and 11 took 58 and 111 ms a
        // 64 KiB chunk, zstd 15 and 19 17 and 35 ms, against 5 ms at brotli 9
        // and 3.4 ms at zstd 12 (bench/RESULTS.md, "Compression levels and
        // the poll's time"): a worker's other connections would wait that long.
        if !(1..=MAX_BROTLI).contains(&self.brotli_level) {
            return Err((
                "compression.brotli_level",
                format!(
                    "1 to {MAX_BROTLI} (10 and 11 compress at about 1 MB/s: a worker's other connections would wait on them)"
                ),
            ));
        }
        if !(1..=MAX_ZSTD).contains(&self.zstd_level) {
            return Err((
                "compression.zstd_level",
                format!(
                    "1 to {MAX_ZSTD} (from 15 on, 2 to 4 MB/s: a worker's other connections would wait on them)"
                ),
            ));
        }
        if !(1..=1_000_000).contains(&self.max_streams) {
            return Err(("compression.max_streams", "1 to 1000000".into()));
        }
        if !(1..=self.max_streams).contains(&self.max_streams_per_client) {
            return Err((
                "compression.max_streams_per_client",
                "1 to compression.max_streams".into(),
            ));
        }
        Ok(())
    }
}

fn valid_type(t: &str) -> bool {
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
    match t.split_once('/') {
        Some((a, "*")) => token(a),
        Some((a, b)) => token(a) && token(b),
        None => t.strip_prefix('+').is_some_and(token),
    }
}

/// What the request path holds: the settings, and how many streams are
/// being compressed now.
pub struct Compression {
    config: CompressionConfig,
    levels: Levels,
    active: Arc<AtomicUsize>,
    /// Streams each client holds (`max_streams_per_client`).
    per_client: Arc<PerSource>,
    /// `router_responses_compressed_total{coding}`.
    compressed: [prometheus::IntCounter; 3],
    /// Responses left uncompressed because `max_streams` were busy.
    over_limit: prometheus::IntCounter,
    /// Responses left uncompressed because their client held
    /// `max_streams_per_client`.
    over_client_share: prometheus::IntCounter,
}

/// What a request to an app that compresses asked for: its coding, if any
/// may be used for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asked(pub Option<Coding>);

impl Asked {
    /// What `req` (with its fields `fields`) takes: nothing for `HEAD`,
    /// HTTP/1.0, or a range.
    pub fn of<B>(req: &Request<B>, fields: FieldsRef<'_>) -> Asked {
        if req.method() == Method::HEAD
            || req.version() <= Version::HTTP_10
            || !named(fields, "range").is_empty()
        {
            return Asked(None);
        }
        Asked(negotiate(named(fields, "accept-encoding").into_iter()))
    }
}

/// The values of the fields called `name` (lower case).
fn named<'a>(fields: FieldsRef<'a>, name: &'static str) -> Vec<&'a [u8]> {
    match fields {
        FieldsRef::Raw(f) => f
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v)
            .collect(),
        FieldsRef::Map(m) => m.get_all(name).iter().map(HeaderValue::as_bytes).collect(),
    }
}

/// The coding `Accept-Encoding` values prefer, if any is acceptable.
pub fn negotiate<'a>(values: impl Iterator<Item = &'a [u8]>) -> Option<Coding> {
    let mut q = [None::<u16>; 3];
    let mut star = None;
    for element in values.flat_map(|v| v.split(|b| *b == b',')) {
        let mut parts = element.split(|b| *b == b';');
        let name = parts.next().unwrap_or_default().trim_ascii();
        let Some(weight) = parts.map(<[u8]>::trim_ascii).try_fold(1000, q_param) else {
            continue;
        };
        let slot = match name.to_ascii_lowercase().as_slice() {
            b"gzip" | b"x-gzip" => &mut q[0],
            b"br" => &mut q[1],
            b"zstd" => &mut q[2],
            b"*" => &mut star,
            _ => continue,
        };
        *slot = Some(slot.map_or(weight, |w: u16| w.max(weight)));
    }
    [Coding::Gzip, Coding::Brotli, Coding::Zstd]
        .into_iter()
        .zip(q)
        .filter_map(|(c, w)| Some((c, w.or(star)?)))
        .filter(|(_, w)| *w > 0)
        .max_by_key(|(c, w)| (*w, c.preference()))
        .map(|(c, _)| c)
}

/// One parameter of an element: `q=` sets its weight (in thousandths; an
/// invalid one drops the element), others are ignored.
fn q_param(weight: u16, param: &[u8]) -> Option<u16> {
    let Some(value) = param
        .strip_prefix(b"q=")
        .or_else(|| param.strip_prefix(b"Q="))
    else {
        return Some(weight);
    };
    let text = std::str::from_utf8(value).ok()?;
    let q: f32 = text.parse().ok().filter(|q| (0.0..=1.0).contains(q))?;
    Some((q * 1000.0).round() as u16)
}

/// A response's fields wherever they are: a member's as they came, and the
/// map (the router's additions then, or every field).
struct View<'a> {
    fields: Option<&'a Fields>,
    map: &'a HeaderMap,
}

impl<'a> View<'a> {
    fn values(&self, name: &'static str) -> Vec<&'a [u8]> {
        let mut v = self
            .fields
            .map(|f| named(FieldsRef::Raw(f), name))
            .unwrap_or_default();
        v.extend(self.map.get_all(name).iter().map(HeaderValue::as_bytes));
        v
    }

    fn first(&self, name: &'static str) -> Option<&'a [u8]> {
        self.values(name).into_iter().next()
    }
}

impl Compression {
    /// The settings, with their counters registered in `r`.
    pub fn new(
        config: CompressionConfig,
        r: &prometheus::Registry,
    ) -> prometheus::Result<Compression> {
        let compressed = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "router_responses_compressed_total",
                "Responses compressed by the router, by coding",
            ),
            &["coding"],
        )?;
        let over_limit = prometheus::IntCounter::new(
            "router_compression_over_limit_total",
            "Responses sent uncompressed because compression.max_streams were being compressed",
        )?;
        let over_client_share = prometheus::IntCounter::new(
            "router_compression_over_client_share_total",
            "Responses sent uncompressed because their client held compression.max_streams_per_client",
        )?;
        r.register(Box::new(compressed.clone()))?;
        r.register(Box::new(over_limit.clone()))?;
        r.register(Box::new(over_client_share.clone()))?;
        let by = |c: Coding| compressed.with_label_values(&[c.token()]);
        Ok(Compression {
            levels: Levels {
                gzip: config.gzip_level,
                brotli: config.brotli_level,
                zstd: config.zstd_level,
            },
            per_client: PerSource::new(config.max_streams_per_client),
            config,
            active: Arc::default(),
            compressed: [by(Coding::Gzip), by(Coding::Brotli), by(Coding::Zstd)],
            over_limit,
            over_client_share,
        })
    }

    /// A stream's place for `client`, within its share and the whole;
    /// counted when there is none.
    fn slot(&self, client: ClientKey) -> Option<StreamSlot> {
        let Some(share) = self.per_client.slot(client) else {
            self.over_client_share.inc();
            return None;
        };
        let Some(slot) = StreamSlot::take(&self.active, self.config.max_streams, share) else {
            self.over_limit.inc();
            return None;
        };
        Some(slot)
    }

    /// Settings with counters of their own (unit tests, benchmarks).
    pub fn detached(config: CompressionConfig) -> Compression {
        Compression::new(config, &prometheus::Registry::new()).unwrap_or_else(|_| unreachable!())
    }

    /// Compresses the response to a request that `asked`, when it is one
    /// worth compressing; marks it `Vary: Accept-Encoding` then either way.
    /// `fields`: an HTTP/1.1 member's as they came (moved into the map when
    /// the response is compressed); `client`: the requester's key.
    pub fn apply<B: Compressible>(
        &self,
        (asked, client): (Asked, ClientKey),
        response: &mut Response<B>,
        fields: &mut Option<Fields>,
    ) {
        let view = View {
            fields: fields.as_ref(),
            map: response.headers(),
        };
        if !self.worth(
            response.status(),
            &view,
            response.body().size_hint().exact(),
        ) {
            return;
        }
        let vary = vary_with_accept_encoding(&view.values("vary"));
        let stream = asked.0.and_then(|coding| {
            let slot = self.slot(client)?;
            Some((coding, Compressor::new(coding, self.levels).ok()?, slot))
        });
        let Some((coding, compressor, slot)) = stream else {
            if let Some(v) = vary {
                response.headers_mut().insert(header::VARY, v);
            }
            return;
        };
        self.compressed[coding as usize].inc();
        if let Some(f) = fields.take() {
            h1_codec::hop::member_map(&f, response.headers_mut());
        }
        let map = response.headers_mut();
        map.remove(header::CONTENT_LENGTH);
        map.remove(header::ACCEPT_RANGES);
        map.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(coding.token()),
        );
        if let Some(v) = vary {
            map.insert(header::VARY, v);
        }
        if let Some(weak) = map.get(header::ETAG).and_then(weakened) {
            map.insert(header::ETAG, weak);
        }
        let body = std::mem::replace(response.body_mut(), B::empty());
        *response.body_mut() = B::compressed(Compressing::new(body, compressor, slot));
    }

    /// Whether a response is one compression is for (whatever the client
    /// takes): its status, type, length, and no coding or range of its own.
    fn worth(&self, status: StatusCode, view: &View<'_>, length: Option<u64>) -> bool {
        let no_transform = view.values("cache-control").iter().any(|v| {
            v.split(|b| *b == b',')
                .any(|d| d.trim_ascii().eq_ignore_ascii_case(b"no-transform"))
        });
        let declared = view
            .first("content-length")
            .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<u64>().ok())
            .or(length);
        matches!(status.as_u16(), 200 | 403 | 404)
            && view
                .values("content-encoding")
                .iter()
                .all(|v| v.trim_ascii().eq_ignore_ascii_case(b"identity"))
            && view.first("content-range").is_none()
            && !no_transform
            && declared.is_none_or(|n| n >= self.config.min_length)
            && view
                .first("content-type")
                .is_some_and(|t| self.compressible_type(t))
    }

    fn compressible_type(&self, content_type: &[u8]) -> bool {
        let Ok(t) = std::str::from_utf8(content_type) else {
            return false;
        };
        let media = t
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let Some((kind, _)) = media.split_once('/') else {
            return false;
        };
        self.config.types.iter().any(|pattern| {
            let pattern = pattern.to_ascii_lowercase();
            match (pattern.strip_prefix('+'), pattern.strip_suffix("/*")) {
                (Some(suffix), _) => media.ends_with(&format!("+{suffix}")),
                (None, Some(k)) => k == kind,
                (None, None) => pattern == media,
            }
        })
    }
}

/// The `Vary` value with `Accept-Encoding` in it, or `None` when the
/// member's already has it (or `*`).
fn vary_with_accept_encoding(values: &[&[u8]]) -> Option<HeaderValue> {
    let tokens: Vec<&[u8]> = values
        .iter()
        .flat_map(|v| v.split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|t| !t.is_empty())
        .collect();
    if tokens
        .iter()
        .any(|t| *t == b"*" || t.eq_ignore_ascii_case(b"accept-encoding"))
    {
        return None;
    }
    let mut v = tokens.join(&b", "[..]);
    if !v.is_empty() {
        v.extend_from_slice(b", ");
    }
    v.extend_from_slice(b"Accept-Encoding");
    HeaderValue::from_bytes(&v).ok()
}

/// A strong `ETag` made weak (`W/` before it); a weak one stays.
fn weakened(etag: &HeaderValue) -> Option<HeaderValue> {
    let v = etag.as_bytes();
    if !v.starts_with(b"\"") {
        return None;
    }
    HeaderValue::from_bytes(&[b"W/", v].concat()).ok()
}

#[cfg(test)]
mod tests;
