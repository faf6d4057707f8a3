//! An app's rules for HTTP fields, compiled once per policy: header actions
//! on the request before its member (`headers.request`) and on the response
//! before its client (`headers.response`, the router's own answers too), and
//! `Strict-Transport-Security` on HTTPS responses (`hsts`).
//!
//! An action sets a field (every field of the name replaced by one) or
//! deletes one, in the order written; the app's own run first, then
//! `app_defaults`' (see [`super::settings::AppSettings::over`]). A value is
//! literal text with variables in it, each written `%{name}`:
//!
//! | variable | what it is |
//! |---|---|
//! | `%{client_ip}` | the client's address as the router saw it |
//! | `%{request_id}` | the request's ID (`X-Request-Id`) |
//! | `%{sni}` | the TLS server name the client asked for (empty on plain HTTP) |
//! | `%{app}` | the app, `name-namespace` |
//! | `%{host}` | the host the request addressed, lower case, without its port |
//!
//! `%%` is one `%`. What may not be named, and why ([`check`]): the framing
//! and hop-by-hop fields (`Content-Length`, `Transfer-Encoding`,
//! `Connection`, ...: they decide where a message ends), `Host` (it decides
//! the route), and the fields the router owns (`X-Forwarded-*`, `Forwarded`,
//! `traceparent`, `tracestate`, `X-Request-Id`; on responses `Set-Cookie`,
//! the affinity cookie's, `Alt-Svc`, and `Strict-Transport-Security`, which
//! `hsts` sets). At most [`MAX_ACTIONS`] a way, values at most
//! [`MAX_VALUE`] bytes.

use std::sync::Arc;

use bytes::Bytes;
use h1_codec::encode::field_line;
use h1_codec::fields::{Fields, NameSet};
use http::header::{HeaderMap, HeaderName, HeaderValue};

use serde::{Deserialize, Serialize};

use super::hsts::Hsts;

/// Actions a way (request, response) at most, as OpenShift's route API allows.
pub const MAX_ACTIONS: usize = 20;
/// A value's length at most, variables unexpanded.
pub const MAX_VALUE: usize = 4096;

/// Header actions on the way in (`request`) and out (`response`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HeaderActions {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub request: Vec<HeaderAction>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub response: Vec<HeaderAction>,
}

/// One action: `{"set": {"name": N, "value": V}}` or `{"delete": N}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum HeaderAction {
    /// Replaces every field of the name with one (the value may name
    /// variables, see [`super::fields`]).
    Set { name: String, value: String },
    /// Removes every field of the name.
    Delete(String),
}

impl HeaderAction {
    pub fn name(&self) -> &str {
        match self {
            HeaderAction::Set { name, .. } | HeaderAction::Delete(name) => name,
        }
    }
}

/// Which way an action list works on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Request,
    Response,
}

/// Names no action may touch: framing, hop-by-hop, the route, and the
/// forwarding and tracing fields the router writes itself.
const OWNED: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "host",
    "forwarded",
    "traceparent",
    "tracestate",
    "x-request-id",
];

/// Names no response action may touch, besides [`OWNED`].
const OWNED_RESPONSE: &[&str] = &["set-cookie", "alt-svc", "strict-transport-security"];

/// Why `name` may not be named on `way`, if it may not.
fn refused_name(name: &str, way: Way) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("x-forwarded-") || OWNED.contains(&lower.as_str()) {
        return Some(
            "framing, hop-by-hop, Host and the router's own forwarding and tracing fields cannot be set or deleted",
        );
    }
    if way == Way::Response && OWNED_RESPONSE.contains(&lower.as_str()) {
        return Some(
            "Set-Cookie (the affinity cookie), Alt-Svc and Strict-Transport-Security (the hsts setting) are the router's on responses",
        );
    }
    None
}

/// Refuses an action list that cannot apply: `(field, problem)`, the field
/// as `field[i]`.
pub fn check(field: &str, actions: &[HeaderAction], way: Way) -> Result<(), (String, String)> {
    if actions.len() > MAX_ACTIONS {
        return Err((field.into(), format!("at most {MAX_ACTIONS} actions")));
    }
    for (i, action) in actions.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let name = action.name();
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err((at, format!("{name:?} is no field name")));
        }
        if let Some(why) = refused_name(name, way) {
            return Err((at, format!("{name}: {why}")));
        }
        if let HeaderAction::Set { value, .. } = action {
            if value.len() > MAX_VALUE {
                return Err((at, format!("the value is at most {MAX_VALUE} bytes")));
            }
            Value::parse(value).map_err(|e| (at.clone(), e))?;
        }
    }
    Ok(())
}

/// A variable of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    ClientIp,
    RequestId,
    Sni,
    App,
    Host,
}

impl Var {
    fn of(name: &str) -> Option<Var> {
        Some(match name {
            "client_ip" => Var::ClientIp,
            "request_id" => Var::RequestId,
            "sni" => Var::Sni,
            "app" => Var::App,
            "host" => Var::Host,
            _ => return None,
        })
    }
}

/// A value: literal (checked once), or text and variables.
#[derive(Clone, Debug)]
pub enum Value {
    Literal(HeaderValue),
    Template(Vec<Part>),
}

#[derive(Clone, Debug)]
pub enum Part {
    Text(String),
    Var(Var),
}

impl Value {
    /// Reads `%{name}` variables and `%%` (see [`crate::log_format::pieces`]);
    /// anything else after `%` is refused.
    pub fn parse(text: &str) -> Result<Value, String> {
        use crate::log_format::Piece;
        let bad_text = || format!("{text:?}: a value is visible ASCII, spaces and tabs");
        let mut parts = Vec::new();
        for piece in crate::log_format::pieces(text).map_err(|e| format!("{text:?}: {e}"))? {
            parts.push(match piece {
                Piece::Text(t) if HeaderValue::from_str(&t).is_err() => return Err(bad_text()),
                Piece::Text(t) => Part::Text(t),
                Piece::Var(name) => Part::Var(Var::of(name).ok_or_else(|| {
                    format!("%{{{name}}}: no such variable (client_ip, request_id, sni, app, host)")
                })?),
            });
        }
        match parts.as_slice() {
            [] => Ok(Value::Literal(HeaderValue::from_static(""))),
            [Part::Text(t)] => HeaderValue::from_str(t)
                .map(Value::Literal)
                .map_err(|_| bad_text()),
            _ => Ok(Value::Template(parts)),
        }
    }

    /// The value for one request, for a map.
    fn render(&self, vars: &Vars<'_>) -> Option<HeaderValue> {
        match self {
            Value::Literal(v) => Some(v.clone()),
            Value::Template(_) => {
                let mut out = Vec::with_capacity(128);
                self.write(vars, &mut out);
                HeaderValue::from_maybe_shared(Bytes::from(out)).ok()
            }
        }
    }

    /// The value for one request, written where a head is being written. No
    /// check: the literal text was checked when parsed, and what the
    /// variables hold is valid in a field already (an address, the router's
    /// request ID, a TLS server name, an app's checked name, the Host the
    /// request came with, lower-cased).
    fn write(&self, vars: &Vars<'_>, out: &mut Vec<u8>) {
        match self {
            Value::Literal(v) => out.extend_from_slice(v.as_bytes()),
            Value::Template(parts) => {
                for part in parts {
                    match part {
                        Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                        Part::Var(v) => vars.write(*v, out),
                    }
                }
            }
        }
    }
}

/// What a request's variables are (borrowed: nothing is formatted unless a
/// value names a variable).
pub struct Vars<'a> {
    /// As bytes: the address's and the ID's text is valid in a field, and
    /// reading it as `str` would check every byte of it on every request.
    pub client_ip: &'a [u8],
    pub request_id: &'a [u8],
    pub sni: &'a str,
    /// The app's name and namespace (`%{app}` is `name-namespace`); none
    /// for a request that reached no app.
    pub app: Option<(&'a str, &'a str)>,
    pub host: &'a str,
}

impl Vars<'_> {
    /// No request's: for values that read no variable.
    fn none() -> Vars<'static> {
        Vars {
            client_ip: b"",
            request_id: b"",
            sni: "",
            app: None,
            host: "",
        }
    }

    fn write(&self, var: Var, out: &mut Vec<u8>) {
        let text = match var {
            Var::ClientIp => self.client_ip,
            Var::RequestId => self.request_id,
            Var::Sni => self.sni.as_bytes(),
            Var::App => {
                if let Some((name, namespace)) = self.app {
                    out.extend_from_slice(name.as_bytes());
                    out.push(b'-');
                    out.extend_from_slice(namespace.as_bytes());
                }
                return;
            }
            Var::Host => self.host.as_bytes(),
        };
        out.extend_from_slice(text);
    }

    /// Whether any of `actions` reads a variable.
    fn needed(actions: &[Action]) -> bool {
        actions
            .iter()
            .any(|a| matches!(a, Action::Set(_, Value::Template(_))))
    }
}

/// What a request's actions set on a head written from the client's fields
/// as they came (which lost every field the actions touch): written after
/// them, rendered straight into the head.
pub struct RequestSets<'a> {
    pub rules: &'a FieldRules,
    pub vars: Vars<'a>,
}

impl RequestSets<'_> {
    pub fn write(&self, out: &mut Vec<u8>) {
        self.rules.request_outcome.write(&self.vars, out);
    }
}

/// One compiled action.
#[derive(Clone, Debug)]
pub enum Action {
    Set(HeaderName, Value),
    Delete(HeaderName),
}

impl Action {
    fn name(&self) -> &HeaderName {
        match self {
            Action::Set(name, _) | Action::Delete(name) => name,
        }
    }

    fn of(action: &HeaderAction) -> Option<Action> {
        match action {
            HeaderAction::Set { name, value } => Some(Action::Set(
                HeaderName::from_bytes(name.as_bytes()).ok()?,
                Value::parse(value).ok()?,
            )),
            HeaderAction::Delete(name) => Some(Action::Delete(
                HeaderName::from_bytes(name.as_bytes()).ok()?,
            )),
        }
    }
}

/// What a list of actions leaves of a message, worked out once per policy:
/// every name it touches (a message's fields of these names go) and the
/// fields it sets (each name's last action, when that is a set), in the order
/// their last actions come. A head written from fields as they came takes
/// this instead of running the actions on a map.
#[derive(Debug, Default)]
struct Outcome {
    names: NameSet,
    /// The same names, to take out of a map.
    touched: Vec<HeaderName>,
    sets: Vec<(HeaderName, Value)>,
}

impl Outcome {
    fn of(actions: &[Action]) -> Outcome {
        let names = NameSet::of(actions.iter().map(|a| a.name().as_str().as_bytes()), true);
        let mut touched: Vec<HeaderName> = Vec::new();
        let mut sets: Vec<(HeaderName, Value)> = Vec::new();
        for action in actions {
            let name = action.name();
            if !touched.contains(name) {
                touched.push(name.clone());
            }
            sets.retain(|(n, _)| n != name);
            if let Action::Set(name, value) = action {
                sets.push((name.clone(), value.clone()));
            }
        }
        Outcome {
            names,
            touched,
            sets,
        }
    }

    /// The set fields as lines of a head.
    fn write(&self, vars: &Vars<'_>, out: &mut Vec<u8>) {
        for (name, value) in &self.sets {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            value.write(vars, out);
            out.extend_from_slice(b"\r\n");
        }
    }

    /// Whether no set value reads a variable (its lines are the same for
    /// every request).
    fn literal(&self) -> bool {
        self.sets
            .iter()
            .all(|(_, v)| matches!(v, Value::Literal(_)))
    }
}

/// An app's field rules (see the module doc); `None` from [`FieldRules::of`]
/// when it has none, so the request path pays one `Option` check.
#[derive(Debug)]
pub struct FieldRules {
    /// `Strict-Transport-Security`, for HTTPS responses.
    pub hsts: Option<HeaderValue>,
    pub request: Vec<Action>,
    pub response: Vec<Action>,
    request_outcome: Outcome,
    response_outcome: Outcome,
    /// The response's lines (HSTS first, then the set fields) when none
    /// reads a variable: `[plain HTTP, HTTPS]`, shared by every response.
    response_lines: Option<[Bytes; 2]>,
    /// Whether the response's outcome can follow a member's fields as they
    /// came: no action sets `Date`, which the head's writer adds when no field
    /// of the response has it, so it must see that one in a map.
    response_raw: bool,
}

impl FieldRules {
    /// The rules of checked settings, if they have any.
    pub fn of(hsts: Option<&Hsts>, headers: Option<&HeaderActions>) -> Option<Arc<FieldRules>> {
        let hsts = hsts.and_then(|h| HeaderValue::from_str(&h.value()).ok());
        let compile = |l: &[HeaderAction]| l.iter().filter_map(Action::of).collect::<Vec<_>>();
        let (request, response) = headers
            .map(|h| (compile(&h.request), compile(&h.response)))
            .unwrap_or_default();
        if hsts.is_none() && request.is_empty() && response.is_empty() {
            return None;
        }
        let request_outcome = Outcome::of(&request);
        let response_outcome = Outcome::of(&response);
        let response_raw = !response_outcome.touched.contains(&http::header::DATE);
        let response_lines = response_outcome.literal().then(|| {
            let none = Vars::none();
            let mut plain = Vec::new();
            response_outcome.write(&none, &mut plain);
            let mut https = Vec::new();
            if let Some(hsts) = &hsts {
                field_line(b"strict-transport-security", hsts.as_bytes(), &mut https);
            }
            https.extend_from_slice(&plain);
            [Bytes::from(plain), Bytes::from(https)]
        });
        Some(Arc::new(FieldRules {
            hsts,
            request,
            response,
            request_outcome,
            response_outcome,
            response_lines,
            response_raw,
        }))
    }

    /// Whether the app has request actions.
    pub fn on_requests(&self) -> bool {
        !self.request.is_empty()
    }

    /// The request actions on `headers`.
    pub fn on_request(&self, headers: &mut HeaderMap, vars: &Vars<'_>) {
        apply(&self.request, headers, vars);
    }

    /// The request actions on fields written as they came (the own HTTP/1.1
    /// path), without a map: every field an action sets or deletes is taken
    /// out of `raw`; [`RequestSets`] writes what is set after them.
    pub fn on_raw_request(&self, raw: &mut Fields) {
        let names = &self.request_outcome.names;
        if !names.is_empty() {
            raw.retain_names(|n| !names.contains(n));
        }
    }

    /// The response actions and HSTS (`https`: the response goes out over
    /// TLS) on a response whose member's fields are written as they came (the
    /// own HTTP/1.1 path), without running them on a map: every field they
    /// touch is taken out of `raw` (and of `headers`, what the router adds),
    /// and the lines to write after the member's fields come back. `None`:
    /// these rules need the map ([`FieldRules::on_response`]).
    pub fn on_raw_response(
        &self,
        raw: &mut Fields,
        headers: &mut HeaderMap,
        https: bool,
        vars: &Vars<'_>,
    ) -> Option<Bytes> {
        if !self.response_raw {
            return None;
        }
        let hsts = self.hsts.as_ref().filter(|_| https);
        let names = &self.response_outcome.names;
        if !names.is_empty() || hsts.is_some() {
            raw.retain_names(|n| {
                let ours = hsts.is_some() && n.eq_ignore_ascii_case(b"strict-transport-security");
                !(ours || names.contains(n))
            });
        }
        if !headers.is_empty() {
            for name in &self.response_outcome.touched {
                headers.remove(name);
            }
            if hsts.is_some() {
                headers.remove(http::header::STRICT_TRANSPORT_SECURITY);
            }
        }
        if let Some(lines) = &self.response_lines {
            return Some(lines[usize::from(hsts.is_some())].clone());
        }
        let mut out = Vec::with_capacity(128);
        if let Some(hsts) = hsts {
            field_line(b"strict-transport-security", hsts.as_bytes(), &mut out);
        }
        self.response_outcome.write(vars, &mut out);
        Some(Bytes::from(out))
    }

    /// The response actions and HSTS (`https`: the response goes out over
    /// TLS) on a map: set in `headers` (a member's field of the name, in
    /// `raw` when written as it came, is then left out), deleted from both.
    pub fn on_response(
        &self,
        headers: &mut HeaderMap,
        raw: Option<&mut Fields>,
        https: bool,
        vars: &Vars<'_>,
    ) {
        if https && let Some(hsts) = &self.hsts {
            headers.insert(http::header::STRICT_TRANSPORT_SECURITY, hsts.clone());
        }
        if let Some(raw) = raw {
            let names = &self.response_outcome.names;
            raw.retain_names(|n| !names.contains(n));
        }
        apply(&self.response, headers, vars);
    }

    /// Whether the response actions read variables (then the log phase keeps
    /// the host for them).
    pub fn response_needs_vars(&self) -> bool {
        Vars::needed(&self.response)
    }
}

/// `actions` on a map, in order.
fn apply(actions: &[Action], headers: &mut HeaderMap, vars: &Vars<'_>) {
    for action in actions {
        match action {
            Action::Set(name, value) => {
                if let Some(v) = value.render(vars) {
                    headers.insert(name.clone(), v);
                }
            }
            Action::Delete(name) => {
                if !headers.is_empty() {
                    headers.remove(name);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::settings::AppSettings;

    fn vars() -> Vars<'static> {
        Vars {
            client_ip: b"192.0.2.7",
            request_id: b"abc",
            sni: "www.example.com",
            app: Some(("app", "ns")),
            host: "www.example.com",
        }
    }

    #[test]
    fn values_read_variables_and_refuse_what_they_do_not_know() {
        let v = Value::parse("for %{client_ip} id=%{request_id} 100%%").expect("parse");
        assert_eq!(
            v.render(&vars()).expect("value"),
            "for 192.0.2.7 id=abc 100%"
        );
        assert!(matches!(Value::parse("DENY"), Ok(Value::Literal(_))));
        assert!(
            Value::parse("%{nope}")
                .unwrap_err()
                .contains("no such variable")
        );
        assert!(Value::parse("50%").is_err());
        assert!(Value::parse("%{app").is_err());
        assert!(Value::parse("a\nb").is_err());
    }

    #[test]
    fn owned_and_framing_names_are_refused_with_the_reason() {
        let set = |name: &str| HeaderAction::Set {
            name: name.into(),
            value: "x".into(),
        };
        for name in [
            "Content-Length",
            "transfer-encoding",
            "Host",
            "X-Forwarded-For",
            "traceparent",
            "Forwarded",
        ] {
            let e = check("headers.request", &[set(name)], Way::Request).unwrap_err();
            assert_eq!(e.0, "headers.request[0]");
            assert!(e.1.contains("cannot be set"), "{name}: {e:?}");
        }
        assert!(check("h", &[set("Set-Cookie")], Way::Request).is_ok());
        assert!(check("h", &[set("Set-Cookie")], Way::Response).is_err());
        assert!(check("h", &[set("Strict-Transport-Security")], Way::Response).is_err());
        assert!(check("h", &[HeaderAction::Delete("Server".into())], Way::Response).is_ok());
        assert!(check("h", &[set("bad name")], Way::Response).is_err());
        let many = vec![set("X-A"); MAX_ACTIONS + 1];
        assert!(
            check("h", &many, Way::Response)
                .unwrap_err()
                .1
                .contains("at most")
        );
        let long = HeaderAction::Set {
            name: "X-A".into(),
            value: "v".repeat(MAX_VALUE + 1),
        };
        assert!(check("h", &[long], Way::Response).is_err());
    }

    #[test]
    fn actions_apply_in_order_and_hsts_only_over_tls() {
        let settings = AppSettings {
            hsts: Some(crate::policy::hsts::Hsts {
                max_age: std::time::Duration::from_secs(31_536_000),
                include_subdomains: true,
                preload: false,
            }),
            headers: Some(HeaderActions {
                request: vec![],
                response: vec![
                    HeaderAction::Set {
                        name: "X-Frame-Options".into(),
                        value: "DENY".into(),
                    },
                    HeaderAction::Delete("Server".into()),
                    HeaderAction::Set {
                        name: "X-App".into(),
                        value: "%{app}".into(),
                    },
                    HeaderAction::Delete("X-App".into()),
                ],
            }),
            ..AppSettings::default()
        };
        let rules =
            FieldRules::of(settings.hsts.as_ref(), settings.headers.as_ref()).expect("rules");
        let mut h = HeaderMap::new();
        h.insert("server", HeaderValue::from_static("member/1.0"));
        h.insert("x-frame-options", HeaderValue::from_static("SAMEORIGIN"));
        rules.on_response(&mut h, None, false, &vars());
        assert_eq!(h.get("x-frame-options").expect("set"), "DENY");
        assert!(h.get("server").is_none() && h.get("x-app").is_none());
        assert!(
            h.get("strict-transport-security").is_none(),
            "never on plain HTTP"
        );
        rules.on_response(&mut h, None, true, &vars());
        assert_eq!(
            h.get("strict-transport-security").expect("hsts"),
            "max-age=31536000; includeSubDomains"
        );
        assert!(FieldRules::of(None, None).is_none());
        // A member's fields as they came: a deleted one is taken out of them.
        let mut raw =
            Fields::of_head(b"HTTP/1.1 200 OK\r\nServer: m\r\nX-Kept: 1\r\n\r\n").expect("head");
        let mut h = HeaderMap::new();
        rules.on_response(&mut h, Some(&mut raw), false, &vars());
        assert_eq!(
            raw.iter().collect::<Vec<_>>(),
            [(&b"X-Kept"[..], &b"1"[..])]
        );
        assert_eq!(h.get("x-frame-options").expect("set"), "DENY");
    }

    #[test]
    fn request_actions_on_fields_as_they_came_take_out_and_add_in_order() {
        let set = |name: &str, value: &str| HeaderAction::Set {
            name: name.into(),
            value: value.into(),
        };
        let settings = AppSettings {
            headers: Some(HeaderActions {
                request: vec![
                    set("X-Seen", "first"),
                    HeaderAction::Delete("Cookie".into()),
                    set("X-App", "%{app} via %{host}"),
                    set("X-Seen", "second"),
                    HeaderAction::Delete("X-Gone".into()),
                ],
                response: vec![],
            }),
            ..AppSettings::default()
        };
        let rules =
            FieldRules::of(settings.hsts.as_ref(), settings.headers.as_ref()).expect("rules");
        let mut raw = Fields::of_head(
            b"GET / HTTP/1.1\r\nHost: h\r\nx-seen: client\r\nCookie: a=1\r\nX-Gone: 1\r\nAccept: */*\r\n\r\n",
        )
        .expect("head");
        rules.on_raw_request(&mut raw);
        let names: Vec<&[u8]> = raw.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"Host"[..], b"Accept"]);
        let mut added = Vec::new();
        RequestSets {
            rules: &rules,
            vars: vars(),
        }
        .write(&mut added);
        assert_eq!(
            String::from_utf8_lossy(&added),
            "x-app: app-ns via www.example.com\r\nx-seen: second\r\n"
        );
    }

    #[test]
    fn response_actions_on_fields_as_they_came_give_the_same_head_as_on_a_map() {
        let set = |name: &str, value: &str| HeaderAction::Set {
            name: name.into(),
            value: value.into(),
        };
        let hsts = crate::policy::hsts::Hsts {
            max_age: std::time::Duration::from_secs(60),
            include_subdomains: false,
            preload: false,
        };
        let actions = |response| HeaderActions {
            request: vec![],
            response,
        };
        let literal = actions(vec![
            set("X-Frame-Options", "DENY"),
            HeaderAction::Delete("Server".into()),
            set("X-Later", "1"),
            HeaderAction::Delete("X-Later".into()),
        ]);
        let template = actions(vec![
            set("X-App", "%{app}@%{host}"),
            set("x-frame-options", "a"),
        ]);
        let head = b"HTTP/1.1 200 OK\r\nServer: m\r\nX-Frame-Options: x\r\nStrict-Transport-Security: max-age=1\r\nX-Kept: 1\r\n\r\n";
        for (headers, https, kept, lines) in [
            (
                &literal,
                false,
                "Strict-Transport-Security X-Kept",
                "x-frame-options: DENY\r\n",
            ),
            (
                &literal,
                true,
                "X-Kept",
                "strict-transport-security: max-age=60\r\nx-frame-options: DENY\r\n",
            ),
            (
                &template,
                true,
                "Server X-Kept",
                "strict-transport-security: max-age=60\r\nx-app: app-ns@www.example.com\r\nx-frame-options: a\r\n",
            ),
        ] {
            let rules = FieldRules::of(Some(&hsts), Some(headers)).expect("rules");
            let mut raw = Fields::of_head(head).expect("head");
            let mut map = HeaderMap::new();
            let added = rules
                .on_raw_response(&mut raw, &mut map, https, &vars())
                .expect("no Date set: the raw path takes it");
            let names: Vec<String> = raw
                .iter()
                .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
                .collect();
            assert_eq!(names.join(" "), kept, "https {https}");
            assert_eq!(String::from_utf8_lossy(&added), lines, "https {https}");
            assert!(map.is_empty());
        }
        // Setting `Date` takes the map's way: the head's writer must see it.
        let date = FieldRules::of(None, Some(&actions(vec![set("Date", "x")]))).expect("rules");
        let mut raw = Fields::of_head(head).expect("head");
        assert!(
            date.on_raw_response(&mut raw, &mut HeaderMap::new(), false, &vars())
                .is_none()
        );
    }
}
