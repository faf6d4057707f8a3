//! One line per request, through `tracing` (target `access`), written when the
//! response is finished so that it carries the bytes sent and the full duration.
//! Text or JSON follows the process's log format (`access_log.format`); with
//! `access_log.syslog` the same request is also written to syslog in the
//! operator's template (see [`crate::syslog`], [`crate::log_format`]).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use h1_codec::fields::{FieldsRef, Name};

use crate::log_format::{Part, Var};
use crate::syslog::Sink;

/// What is known of a request when it arrives; completed by [`AccessRecord::emit`].
pub struct AccessRecord {
    pub client: IpAddr,
    pub method: http::Method,
    pub host: String,
    pub path: String,
    pub version: http::Version,
    /// The member it went to, if any.
    pub upstream: Option<Arc<str>>,
    /// From the request head to the response head (the member's, or the router's
    /// own answer): with `duration_ms`, where a slow request spent its time, as
    /// haproxy's `Tr` and nginx's `$upstream_header_time` tell.
    pub head: Option<Duration>,
    /// The request's ID and trace (see `request::trace`).
    pub ids: Option<super::trace::Trace>,
    /// The syslog sink and what it captured (none without `access_log.syslog`).
    pub syslog: Option<Box<Captured>>,
}

/// What a syslog line needs beside the record: the sink, the app, and the
/// captured request fields, cookies and response fields.
pub struct Captured {
    pub sink: Arc<Sink>,
    pub app: Option<String>,
    pub request: Vec<String>,
    pub cookies: Vec<String>,
    pub response: Vec<String>,
}

impl AccessRecord {
    /// What the log line will say of `req` (its fields `fields`) from `client`
    /// (`host`: as it was read for routing).
    pub fn of<B>(
        req: &http::Request<B>,
        fields: FieldsRef<'_>,
        client: IpAddr,
        (host, sink): (Option<&http::HeaderValue>, Option<&Arc<Sink>>),
    ) -> Self {
        AccessRecord {
            client,
            method: req.method().clone(),
            host: host
                .and_then(|h| h.to_str().ok().map(str::to_owned))
                .unwrap_or_default(),
            path: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.uri().to_string(), |p| p.as_str().to_owned()),
            version: req.version(),
            upstream: None,
            head: None,
            ids: None,
            syslog: sink.map(|s| Box::new(Captured::of_request(s, fields))),
        }
    }

    /// The response head is final: how long it took from `start`, the
    /// request's IDs, the member that answered.
    pub fn head_known(
        &mut self,
        trace: &super::trace::Trace,
        start: std::time::Instant,
        upstream: Option<Arc<str>>,
    ) {
        self.head = Some(start.elapsed());
        self.ids = Some(trace.clone());
        self.upstream = upstream;
    }

    /// The response's captures, for the syslog line (none without it).
    pub fn response(&mut self, map: &http::HeaderMap, raw: Option<&h1_codec::fields::Fields>) {
        if let Some(c) = self.syslog.as_mut() {
            c.response(map, raw);
        }
    }

    pub fn emit(self, status: u16, bytes: u64, duration: Duration, aborted: bool) {
        if let Some(captured) = &self.syslog {
            let line = self.render(captured, (status, bytes, duration, aborted));
            captured.sink.send(&line, std::time::SystemTime::now());
        }
        tracing::info!(
            target: "access",
            client = %self.client.to_canonical(),
            host = %self.host,
            method = %self.method,
            path = %self.path,
            version = ?self.version,
            status,
            upstream = self.upstream.as_deref().unwrap_or("-"),
            bytes,
            head_ms = self.head.map_or(0.0, |h| h.as_secs_f64() * 1000.0),
            duration_ms = duration.as_secs_f64() * 1000.0,
            aborted,
            request_id = self.ids.as_ref().map_or("-", |t| t.request_id.as_str()),
            trace_id = self.ids.as_ref().map_or("-", |t| t.trace_id()),
        );
    }

    /// The syslog line, in the sink's template.
    fn render(
        &self,
        c: &Captured,
        (status, bytes, duration, aborted): (u16, u64, Duration, bool),
    ) -> String {
        use std::fmt::Write as _;
        let mut out = String::with_capacity(256);
        let now = std::time::SystemTime::now();
        let pick = |list: &[String], i: usize| list.get(i).map_or("-", String::as_str).to_string();
        for part in &c.sink.template.parts {
            let _ = match part {
                Part::Text(t) => out.write_str(t),
                Part::Var(v) => match v {
                    Var::ClientIp => write!(out, "{}", self.client.to_canonical()),
                    Var::Time => out.write_str(&crate::syslog::httpdate_rfc3339(now)),
                    Var::TimeHaproxy => out.write_str(&crate::syslog::haproxy_time(now)),
                    Var::Method => out.write_str(self.method.as_str()),
                    Var::Host => out.write_str(or_dash(&self.host)),
                    Var::Path => out.write_str(&self.path),
                    Var::Version => out.write_str(version(self.version)),
                    Var::Status => write!(out, "{status}"),
                    Var::Bytes => write!(out, "{bytes}"),
                    Var::HeadMs => write!(out, "{}", self.head.map_or(0, |h| h.as_millis())),
                    Var::DurationMs => write!(out, "{}", duration.as_millis()),
                    Var::App => out.write_str(c.app.as_deref().unwrap_or("-")),
                    Var::Upstream => out.write_str(self.upstream.as_deref().unwrap_or("-")),
                    Var::RequestId => {
                        out.write_str(self.ids.as_ref().map_or("-", |t| t.request_id.as_str()))
                    }
                    Var::TraceId => out.write_str(self.ids.as_ref().map_or("-", |t| t.trace_id())),
                    Var::Aborted => write!(out, "{aborted}"),
                    Var::Request(i) => out.write_str(&pick(&c.request, *i)),
                    Var::Response(i) => out.write_str(&pick(&c.response, *i)),
                    Var::Cookie(i) => out.write_str(&pick(&c.cookies, *i)),
                },
            };
        }
        out
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

fn version(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

impl Captured {
    /// The request side's captures of `fields` (its fields and cookies).
    fn of_request(sink: &Arc<Sink>, fields: FieldsRef<'_>) -> Captured {
        let c = &sink.capture;
        let request = crate::syslog::capture(&c.request, |n| value(fields, n), c.length);
        let cookies = crate::syslog::capture(
            &c.cookies,
            |n| {
                fields
                    .values(Name::Cookie)
                    .flat_map(|v| v.split(|b| *b == b';'))
                    .find_map(|pair| {
                        pair.trim_ascii()
                            .strip_prefix(n.as_bytes())?
                            .strip_prefix(b"=")
                    })
            },
            c.length,
        );
        Captured {
            sink: sink.clone(),
            app: None,
            request,
            cookies,
            response: Vec::new(),
        }
    }

    /// The response side's captures: its map, then a member's fields as
    /// they came.
    pub fn response(&mut self, map: &http::HeaderMap, raw: Option<&h1_codec::fields::Fields>) {
        let c = &self.sink.capture;
        if c.response.is_empty() {
            return;
        }
        self.response = crate::syslog::capture(
            &c.response,
            |n| {
                map.get(n)
                    .map(|v| v.as_bytes())
                    .or_else(|| raw.and_then(|f| value(FieldsRef::Raw(f), n)))
            },
            c.length,
        );
    }
}

/// The first value of the field called `name` (any case).
fn value<'a>(fields: FieldsRef<'a>, name: &str) -> Option<&'a [u8]> {
    match fields {
        FieldsRef::Raw(f) => f
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, v)| v),
        FieldsRef::Map(m) => m.get(name).map(|v| v.as_bytes()),
    }
}
