//! The access line an operator chooses (`access_log.template`): text with
//! variables, each written `%{name}` (`%%` is one `%`), or a preset by name.
//!
//! | variable | what it is |
//! |---|---|
//! | `client_ip` | the client (the PROXY header's, where one named it) |
//! | `time` | when the request ended, RFC 3339 in UTC, milliseconds |
//! | `time_haproxy` | the same as haproxy writes it: `29/Nov/2026:02:13:49.123` |
//! | `method`, `host`, `path`, `version` | the request's (`path` with its query) |
//! | `status`, `bytes` | the response's status and body bytes sent |
//! | `head_ms`, `duration_ms` | to the response head, to the last byte (whole milliseconds) |
//! | `app`, `upstream` | the app (`name-namespace`) and the member, or `-` |
//! | `request_id`, `trace_id` | the request's ID and trace ID |
//! | `aborted` | `true` when the client went away first |
//! | `req.NAME`, `res.NAME`, `cookie.NAME` | a captured request field, response field, request cookie (see `access_log.capture`), or `-` |
//!
//! Presets: `httplog` writes what parsers of haproxy's `option httplog` read
//! (`client:port [time] frontend backend/server Tq/Tw/Tc/Tr/Ta status bytes
//! - - ---- 0/0/0/0/0 0/0 "request"`, with the router's head and total
//! times for `Tr` and `Ta`); `combined` nginx's and Apache's combined log.
//!
//! A template is checked when the configuration is read (an unknown variable
//! refuses to start, naming it) and compiled once; each line is one pass.

/// A variable of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Var {
    ClientIp,
    Time,
    TimeHaproxy,
    Method,
    Host,
    Path,
    Version,
    Status,
    Bytes,
    HeadMs,
    DurationMs,
    App,
    Upstream,
    RequestId,
    TraceId,
    Aborted,
    /// The n-th captured request field, response field, cookie.
    Request(usize),
    Response(usize),
    Cookie(usize),
}

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Var(Var),
}

/// The names a template may capture (`access_log.capture`), by kind.
#[derive(Clone, Debug, Default)]
pub struct Captures<'a> {
    pub request: &'a [String],
    pub response: &'a [String],
    pub cookies: &'a [String],
}

/// A compiled template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pub parts: Vec<Part>,
}

/// A template as its lines are written: the text before the first variable,
/// then each variable with the text after it. A line steps through half as
/// many pieces as `parts` has (each piece a branch and a copy).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Steps {
    pub lead: Literal,
    pub steps: Vec<(Var, Literal)>,
}

impl Steps {
    pub fn of(template: &Template) -> Steps {
        let mut steps: Vec<(Var, Vec<u8>)> = Vec::new();
        let mut lead = Vec::new();
        for part in &template.parts {
            match part {
                Part::Text(t) => match steps.last_mut() {
                    Some((_, after)) => after.extend_from_slice(t.as_bytes()),
                    None => lead.extend_from_slice(t.as_bytes()),
                },
                Part::Var(v) => steps.push((v.clone(), Vec::new())),
            }
        }
        Steps {
            lead: Literal::of(&lead),
            steps: steps
                .into_iter()
                .map(|(v, after)| (v, Literal::of(&after)))
                .collect(),
        }
    }
}

/// Text made once and copied into many lines (a template's literal text,
/// a second's time). Up to [`Literal::SHORT`] bytes it is kept in a block of
/// that size, which a line takes whole and then cuts back
/// (`crate::syslog::Line::literal`): one fixed-size store, where a copy of a
/// length known only when the line is written is a call to `memcpy` (about
/// 30 instructions; a line has some twenty of them, see `bench/RESULTS.md`,
/// "A syslog line: the record made small").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Literal {
    Short([u8; Literal::SHORT], u8),
    Long(Box<[u8]>),
}

impl Default for Literal {
    fn default() -> Literal {
        Literal::Short([0; Literal::SHORT], 0)
    }
}

impl Literal {
    pub const SHORT: usize = 32;

    pub fn of(text: &[u8]) -> Literal {
        let mut block = [0; Literal::SHORT];
        match (block.get_mut(..text.len()), u8::try_from(text.len())) {
            (Some(head), Ok(len)) => {
                head.copy_from_slice(text);
                Literal::Short(block, len)
            }
            _ => Literal::Long(text.into()),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Literal::Short(block, len) => &block[..usize::from(*len)],
            Literal::Long(text) => text,
        }
    }
}

/// `httplog`'s template.
pub const HTTPLOG: &str = "%{client_ip}:0 [%{time_haproxy}] router %{app}/%{upstream} 0/0/0/%{head_ms}/%{duration_ms} %{status} %{bytes} - - ---- 0/0/0/0/0 0/0 \"%{method} %{path} %{version}\"";
/// `combined`'s template (nginx, Apache).
const COMBINED: &str = "%{client_ip} - - [%{time_haproxy}] \"%{method} %{path} %{version}\" %{status} %{bytes} \"%{req.referer}\" \"%{req.user-agent}\"";

impl Template {
    /// Whether this is `httplog`'s template (named, or its text written
    /// out), which lines write by a writer of its own.
    pub fn is_httplog(&self) -> bool {
        let none = Captures {
            request: &[],
            response: &[],
            cookies: &[],
        };
        Template::parse(HTTPLOG, &none).is_ok_and(|t| t.parts == self.parts)
    }

    /// Compiles `text` (or the preset it names) against `captures`; the
    /// error names what is wrong.
    pub fn parse(text: &str, captures: &Captures<'_>) -> Result<Template, String> {
        let text = match text {
            "httplog" => HTTPLOG,
            "combined" => COMBINED,
            t => t,
        };
        let parts = pieces(text)?
            .into_iter()
            .map(|p| match p {
                Piece::Text(t) => Ok(Part::Text(t)),
                Piece::Var(name) => var(name, captures).map(Part::Var),
            })
            .collect::<Result<Vec<_>, String>>()?;
        if parts.len() > 200 || text.len() > 4096 {
            return Err("at most 4 096 bytes and 200 pieces".into());
        }
        Ok(Template { parts })
    }

    /// Whether a line reads the record's captures of `kind`.
    pub fn reads(&self, kind: fn(&Var) -> bool) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Var(v) if kind(v)))
    }
}

/// A piece of text with `%{name}` variables: literal text, or a name.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(String),
    Var(&'a str),
}

/// `text` cut into literal text and `%{name}` variables (`%%` is one `%`;
/// any other `%` is refused): the one reader of the `%{...}` syntax, for the
/// access-log templates here and the header actions' values
/// (`crate::policy::fields`).
pub fn pieces(text: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('%') {
        literal.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(more) = after.strip_prefix('%') {
            literal.push('%');
            rest = more;
            continue;
        }
        let inner = after
            .strip_prefix('{')
            .ok_or("a % starts %{variable} or %% (a literal %)")?;
        let end = inner.find('}').ok_or("%{ without its }")?;
        if !literal.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut literal)));
        }
        out.push(Piece::Var(&inner[..end]));
        rest = &inner[end + 1..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        out.push(Piece::Text(literal));
    }
    Ok(out)
}

/// The variable `name` is, given what is captured.
fn var(name: &str, captures: &Captures<'_>) -> Result<Var, String> {
    let index = |list: &[String], n: &str, what: &str| {
        list.iter()
            .position(|c| c.eq_ignore_ascii_case(n))
            .ok_or_else(|| format!("%{{{name}}}: {n:?} is not in access_log.capture.{what}"))
    };
    if let Some(n) = name.strip_prefix("req.") {
        return Ok(Var::Request(index(captures.request, n, "request")?));
    }
    if let Some(n) = name.strip_prefix("res.") {
        return Ok(Var::Response(index(captures.response, n, "response")?));
    }
    if let Some(n) = name.strip_prefix("cookie.") {
        return Ok(Var::Cookie(index(captures.cookies, n, "cookies")?));
    }
    Ok(match name {
        "client_ip" => Var::ClientIp,
        "time" => Var::Time,
        "time_haproxy" => Var::TimeHaproxy,
        "method" => Var::Method,
        "host" => Var::Host,
        "path" => Var::Path,
        "version" => Var::Version,
        "status" => Var::Status,
        "bytes" => Var::Bytes,
        "head_ms" => Var::HeadMs,
        "duration_ms" => Var::DurationMs,
        "app" => Var::App,
        "upstream" => Var::Upstream,
        "request_id" => Var::RequestId,
        "trace_id" => Var::TraceId,
        "aborted" => Var::Aborted,
        _ => {
            return Err(format!(
                "%{{{name}}}: no such variable (see docs/operations.md)"
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_pair_each_variable_with_the_text_after_it() {
        let t = Template::parse("a %{status}%{bytes} b %% %{method}", &Captures::default())
            .expect("template");
        let steps = Steps::of(&t);
        assert_eq!(steps.lead.as_bytes(), b"a ");
        let pairs: Vec<(Var, &[u8])> = steps
            .steps
            .iter()
            .map(|(v, a)| (v.clone(), a.as_bytes()))
            .collect();
        assert_eq!(
            pairs,
            [
                (Var::Status, &b""[..]),
                (Var::Bytes, b" b % "),
                (Var::Method, b"")
            ]
        );
        assert_eq!(
            Steps::of(&Template::parse("text", &Captures::default()).expect("t"))
                .lead
                .as_bytes(),
            b"text"
        );
    }

    #[test]
    fn literals_keep_exactly_their_text_short_or_long() {
        for text in [
            &b""[..],
            b"/",
            b" 0/0/0/",
            &[b'x'; 32],
            &[b'y'; 33],
            &[b'z'; 300],
        ] {
            let literal = Literal::of(text);
            assert_eq!(literal.as_bytes(), text);
            assert_eq!(
                matches!(literal, Literal::Long(_)),
                text.len() > Literal::SHORT
            );
        }
    }

    #[test]
    fn templates_and_presets_compile_and_unknown_names_are_refused() {
        let req = ["User-Agent".to_string(), "referer".to_string()];
        let cookies = ["session".to_string()];
        let caps = Captures {
            request: &req,
            response: &[],
            cookies: &cookies,
        };
        let t = Template::parse(
            "%{client_ip} %{req.user-agent} 100%% %{cookie.session}",
            &caps,
        )
        .expect("parse");
        assert_eq!(
            t.parts,
            [
                Part::Var(Var::ClientIp),
                Part::Text(" ".into()),
                Part::Var(Var::Request(0)),
                Part::Text(" 100% ".into()),
                Part::Var(Var::Cookie(0)),
            ]
        );
        assert!(Template::parse("httplog", &caps).is_ok());
        assert!(Template::parse("combined", &caps).is_ok());
        assert!(
            Template::parse("%{nope}", &caps)
                .unwrap_err()
                .contains("no such variable")
        );
        assert!(
            Template::parse("%{res.server}", &caps)
                .unwrap_err()
                .contains("capture.response")
        );
        assert!(Template::parse("50%", &caps).is_err());
        assert!(Template::parse("%{host", &caps).is_err());
        assert!(Template::parse(&"x".repeat(5000), &caps).is_err());
    }
}
