//! One line per request, through `tracing` (target `access`), written when the
//! response is finished so that it carries the bytes sent and the full duration.
//! Text or JSON follows the process's log format (`access_log.format`); with
//! `access_log.syslog` the same request is also written to syslog in the
//! operator's template (see [`crate::syslog`], [`crate::log_format`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use h1_codec::fields::{FieldsRef, Name};

use crate::log_format::Var;
use crate::syslog::{Line, Sink, TimeText, Values, capture_cookies};
use crate::table::Route;

/// What is known of a request when it arrives; completed by [`AccessRecord::emit`].
pub struct AccessRecord {
    /// The client's address as text (its connection's, made once).
    pub client: http::HeaderValue,
    pub method: http::Method,
    /// The host as it was read for routing, and the request's target: both
    /// share the request head's bytes (no copy a request).
    pub host: Option<http::HeaderValue>,
    target: Target,
    pub version: http::Version,
    /// The member it went to, if any.
    pub upstream: Option<Arc<str>>,
    /// From the request head to the response head (the member's, or the router's
    /// own answer): with `duration_ms`, where a slow request spent its time, as
    /// haproxy's `Tr` and nginx's `$upstream_header_time` tell.
    pub head: Option<Duration>,
    /// The request's ID and trace (see `request::trace`), when a line reads
    /// them.
    pub ids: Option<Box<super::trace::Trace>>,
    /// What the lines read of the request beyond its head: its IDs, the time
    /// to its response head (neither kept when none does).
    reads: (bool, bool),
    /// The syslog sink and what it captured (none without `access_log.syslog`;
    /// not boxed: the record is).
    pub syslog: Option<Captured>,
    /// The line to stderr too (`access_log.stderr`).
    pub stderr: bool,
}

/// A request's target as a line writes it: its path and query (a share of
/// the request head's bytes: a clone of a whole `Uri`, its scheme and
/// authority too, cost three times as much), or the whole target as text
/// when it has no path (an authority).
enum Target {
    Path(http::uri::PathAndQuery),
    Whole(Box<str>),
}

/// How a request ended: its status, the bytes sent, its duration, whether
/// it was cut short.
type End = (u16, u64, Duration, bool);

/// What a syslog line needs beside the record: the sink, the app, and the
/// captured request fields, cookies and response fields, all in one buffer.
pub struct Captured {
    pub sink: Arc<Sink>,
    /// None when nothing is captured (a record stays small to build and
    /// to drop).
    values: Option<Box<Values>>,
    /// Where the cookies' values start in `values` (the request's start at 0).
    cookies_at: usize,
    /// Where the response's start, once captured.
    response_at: Option<usize>,
    /// The app's route (its `name-namespace` for `%{app}`), once routed.
    app: Option<Arc<Route>>,
}

impl AccessRecord {
    /// What the log line will say of `req` (its fields `fields`) from `client`
    /// (its address as text; `host`: as it was read for routing), on the
    /// heap at once (built on the stack and moved, it cost a copy of its
    /// 280 bytes).
    #[inline(always)]
    pub fn boxed<B>(
        req: &http::Request<B>,
        fields: FieldsRef<'_>,
        client: &http::HeaderValue,
        (host, sink, stderr): (Option<&http::HeaderValue>, Option<&Arc<Sink>>, bool),
    ) -> Box<Self> {
        let reads = sink.map_or((false, false), |s| (s.reads_ids, s.reads_head));
        let room = Box::new_uninit();
        Box::write(
            room,
            AccessRecord {
                client: client.clone(),
                method: req.method().clone(),
                // Kept only for a line that reads it (`httplog` does not).
                host: host
                    .filter(|_| stderr || sink.is_some_and(|s| s.reads_host))
                    .cloned(),
                target: match req.uri().path_and_query() {
                    Some(path) => Target::Path(path.clone()),
                    None => Target::Whole(req.uri().to_string().into()),
                },
                version: req.version(),
                upstream: None,
                head: None,
                ids: None,
                reads: (reads.0 || stderr, reads.1 || stderr),
                syslog: sink.map(|s| Captured::of_request(s, fields)),
                stderr,
            },
        )
    }

    /// The response head is final: how long it took from `start`, the
    /// request's IDs, the member that answered.
    #[inline]
    pub fn head_known(
        &mut self,
        trace: &super::trace::Trace,
        start: std::time::Instant,
        upstream: Option<Arc<str>>,
    ) {
        let (ids, head) = self.reads;
        if head {
            self.head = Some(start.elapsed());
        }
        if ids {
            self.ids = Some(Box::new(trace.clone()));
        }
        self.upstream = upstream;
    }

    /// The response's captures, for the syslog line (none without it, or
    /// without response fields to capture: no call then).
    #[inline]
    pub fn response(&mut self, map: &http::HeaderMap, raw: Option<&h1_codec::fields::Fields>) {
        if let Some(c) = self.syslog.as_mut()
            && !c.sink.capture.response.is_empty()
        {
            c.response(map, raw);
        }
    }

    /// The request ended at `at` (`duration` after it started).
    pub fn emit(&self, at: Instant, status: u16, bytes: u64, duration: Duration, aborted: bool) {
        if let Some(captured) = &self.syslog {
            let end = (status, bytes, duration, aborted);
            let render = |line: &mut Line<'_>| self.render(captured, end, line);
            captured.sink.write(at, render);
        }
        if !self.stderr {
            return;
        }
        tracing::info!(
            target: "access",
            client = self.client.to_str().unwrap_or("-"),
            host = self.host.as_ref().and_then(|h| h.to_str().ok()).unwrap_or(""),
            method = %self.method,
            path = %self.path(),
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

    /// The syslog line's message, in the sink's template, written after the
    /// line's head: `httplog` by its own writer, any other template step by
    /// step.
    fn render(&self, c: &Captured, end: End, line: &mut Line<'_>) {
        if c.sink.httplog {
            self.httplog(c, end, line);
        } else {
            self.steps(c, end, line);
        }
    }

    /// The template's steps: its texts and variables, each a branch.
    fn steps(&self, c: &Captured, end: End, line: &mut Line<'_>) {
        let steps = &c.sink.steps;
        line.literal(&steps.lead);
        for (var, after) in &steps.steps {
            self.var(var, c, end, line);
            line.literal(after);
        }
    }

    /// The `httplog` preset ([`crate::log_format`]'s `HTTPLOG`, which the
    /// test `httplog_writes_what_its_template_does` holds this to): the
    /// same variables in the same texts, written straight, its texts as
    /// constants (stores of immediates) and no branch on a variable. The
    /// template stepped through cost about 550 instructions a line, this
    /// about 250 (`bench/RESULTS.md`, "A syslog line by position").
    fn httplog(&self, c: &Captured, end: End, line: &mut Line<'_>) {
        self.var(&Var::ClientIp, c, end, line);
        line.text(b":0 [");
        self.var(&Var::TimeHaproxy, c, end, line);
        line.text(b"] router ");
        self.var(&Var::App, c, end, line);
        line.byte(b'/');
        self.var(&Var::Upstream, c, end, line);
        line.text(b" 0/0/0/");
        self.var(&Var::HeadMs, c, end, line);
        line.byte(b'/');
        self.var(&Var::DurationMs, c, end, line);
        line.byte(b' ');
        self.var(&Var::Status, c, end, line);
        line.byte(b' ');
        self.var(&Var::Bytes, c, end, line);
        line.text(b" - - ---- 0/0/0/0/0 0/0 \"");
        self.var(&Var::Method, c, end, line);
        line.byte(b' ');
        self.var(&Var::Path, c, end, line);
        line.byte(b' ');
        self.var(&Var::Version, c, end, line);
        line.byte(b'"');
    }

    /// Writes what `var` says of this request.
    #[inline(always)]
    fn var(&self, var: &Var, c: &Captured, end: End, line: &mut Line<'_>) {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        match var {
            Var::Time => line.time(TimeText::Rfc3339),
            Var::TimeHaproxy => line.time(TimeText::Haproxy),
            Var::Status => status(end.0, line),
            Var::Bytes => line.number(end.1),
            Var::HeadMs => line.number(self.head.map_or(0, ms)),
            Var::DurationMs => line.number(ms(end.2)),
            Var::App => match &c.app {
                Some(route) => {
                    line.put(route.name.as_bytes());
                    line.byte(b'-');
                    line.put(route.namespace.as_bytes());
                }
                None => line.byte(b'-'),
            },
            var => line.put(self.text(var, c, end.3)),
        }
    }

    /// What `var` says of this request (the variables [`AccessRecord::var`]
    /// does not write itself; `aborted`: the client went away first).
    #[inline(always)]
    fn text<'a>(&'a self, var: &Var, c: &'a Captured, aborted: bool) -> &'a [u8] {
        match var {
            Var::Method => self.method.as_str().as_bytes(),
            Var::Host => match self.host.as_ref().map(http::HeaderValue::as_bytes) {
                Some(h) if !h.is_empty() => h,
                _ => b"-",
            },
            Var::Path => self.path().as_bytes(),
            Var::Version => version(self.version).as_bytes(),
            Var::Upstream => self.upstream.as_deref().unwrap_or("-").as_bytes(),
            Var::RequestId => self
                .ids
                .as_ref()
                .map_or(&b"-"[..], |t| t.request_id.as_bytes()),
            Var::TraceId => self.ids.as_ref().map_or("-", |t| t.trace_id()).as_bytes(),
            Var::Aborted if aborted => b"true",
            Var::Aborted => b"false",
            Var::Request(i) => c.value(*i),
            Var::Cookie(i) => c.value(c.cookies_at + i),
            Var::Response(i) => c.response_at.map_or(&b"-"[..], |at| c.value(at + i)),
            Var::ClientIp => self.client.as_bytes(),
            // Written by `render` itself.
            Var::Time
            | Var::TimeHaproxy
            | Var::Status
            | Var::Bytes
            | Var::HeadMs
            | Var::DurationMs
            | Var::App => b"",
        }
    }

    /// The request's target as it came: origin form, or the whole target
    /// (an authority) when it has no path.
    fn path(&self) -> &str {
        match &self.target {
            Target::Path(p) => p.as_str(),
            Target::Whole(t) => t,
        }
    }
}

/// A status as its three digits (one fixed-size store; any other through
/// `itoa`).
fn status(code: u16, line: &mut Line<'_>) {
    if (100..1000).contains(&code) {
        let digit = |d: u16| b'0' + (d % 10) as u8;
        line.put(&[digit(code / 100), digit(code / 10), digit(code)]);
    } else {
        line.number(u64::from(code));
    }
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
        if c.request.is_empty() && c.cookies.is_empty() {
            return Captured::empty(sink);
        }
        let mut values = Values::with_capacity(c.request.len() + c.cookies.len());
        match fields {
            _ if c.request.is_empty() => {}
            FieldsRef::Raw(f) => sink.request_names.capture(f.iter(), c.length, &mut values),
            FieldsRef::Map(m) => {
                let iter = m.iter().map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
                sink.request_names.capture(iter, c.length, &mut values);
            }
        }
        let cookies_at = values.len();
        if !c.cookies.is_empty() {
            let cookies = || fields.values(Name::Cookie);
            capture_cookies(&c.cookies, cookies, c.length, &mut values);
        }
        Captured {
            values: Some(Box::new(values)),
            cookies_at,
            ..Captured::empty(sink)
        }
    }

    /// Nothing captured of the request (none asked for).
    fn empty(sink: &Arc<Sink>) -> Captured {
        Captured {
            sink: sink.clone(),
            values: None,
            cookies_at: 0,
            response_at: None,
            app: None,
        }
    }

    /// Captured value `i` (`-` when there is none).
    fn value(&self, i: usize) -> &[u8] {
        self.values.as_deref().map_or(b"-", |v| v.get(i))
    }

    /// The request reached `route`'s app.
    pub fn app(&mut self, route: &Arc<Route>) {
        self.app = Some(route.clone());
    }

    /// The response side's captures: its map, then a member's fields as
    /// they came.
    pub fn response(&mut self, map: &http::HeaderMap, raw: Option<&h1_codec::fields::Fields>) {
        let c = &self.sink.capture;
        if c.response.is_empty() {
            return;
        }
        let values = self.values.get_or_insert_default();
        self.response_at = Some(values.len());
        let map = map
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        let fields = map.chain(raw.into_iter().flat_map(|f| f.iter()));
        let names = &self.sink.response_names;
        names.capture(fields, c.length, values);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syslog::{Capture, LINE_MAX, Protocol, SLACK, SyslogSettings, written};

    fn sink(template: &str) -> Arc<Sink> {
        let settings = SyslogSettings {
            address: "udp://127.0.0.1:9".into(),
            protocol: Protocol::Rfc5424,
            facility: "local1".into(),
            tag: "router".into(),
            queue: 10,
        };
        let registry = prometheus::Registry::new();
        match Sink::start(&settings, template, &Capture::default(), &registry) {
            Ok(sink) => sink,
            Err(e) => panic!("a sink for {template:?}: {e}"),
        }
    }

    /// The `httplog` writer writes what stepping through its template
    /// writes, for requests of every shape: short and long values, no host,
    /// no member, numbers of every width, a target without a path.
    #[test]
    fn httplog_writes_what_its_template_does() {
        let sink = sink("httplog");
        assert!(sink.httplog, "the preset is recognised");
        let long = format!("/{}?q={}", "a".repeat(300), "b".repeat(40));
        let cases = [
            ("GET", "/", Some("example.com"), (200, 0, 0, 5), None),
            (
                "POST",
                "/p/x?y=1",
                None,
                (503, 1_234_567, 99_999, 123_456),
                Some("10.0.0.1:8080"),
            ),
            (
                "PATCH",
                long.as_str(),
                Some("a.b"),
                (99, 9, 10, 100),
                Some("m"),
            ),
            (
                "CONNECT",
                "example.com:443",
                None,
                (1000, 10_000, 1000, 9999),
                None,
            ),
        ];
        for (method, target, host, (status, bytes, head, ms), upstream) in cases {
            let req = http::Request::builder()
                .method(method)
                .uri(target)
                .body(())
                .expect("a request");
            let client = http::HeaderValue::from_static("192.0.2.1");
            let host = host.map(http::HeaderValue::from_static);
            let fields = FieldsRef::Map(req.headers());
            let mut record =
                AccessRecord::boxed(&req, fields, &client, (host.as_ref(), Some(&sink), false));
            record.head = Some(Duration::from_millis(head));
            record.upstream = upstream.map(Arc::from);
            let c = record.syslog.as_ref().expect("captured");
            let end = (status, bytes, Duration::from_millis(ms), false);
            let preset = written::<{ LINE_MAX + SLACK }>(|line| record.httplog(c, end, line));
            let stepped = written::<{ LINE_MAX + SLACK }>(|line| record.steps(c, end, line));
            assert_eq!(
                String::from_utf8_lossy(&preset),
                String::from_utf8_lossy(&stepped),
                "{method} {target}"
            );
            let text = String::from_utf8_lossy(&preset);
            assert!(
                text.contains(&format!("\"{method} {target} HTTP/1.1\"")),
                "{text}"
            );
        }
        assert!(!sink_is_httplog("%{method} %{path}"));
        assert!(
            sink_is_httplog(crate::log_format::HTTPLOG),
            "written out, still the preset"
        );
    }

    fn sink_is_httplog(template: &str) -> bool {
        sink(template).httplog
    }
}
