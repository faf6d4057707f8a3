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

use h1_codec::fields::Fields;
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

    /// The value for one request.
    fn render(&self, vars: &Vars<'_>) -> Option<HeaderValue> {
        match self {
            Value::Literal(v) => Some(v.clone()),
            Value::Template(parts) => {
                let mut out = String::with_capacity(128);
                for part in parts {
                    match part {
                        Part::Text(t) => out.push_str(t),
                        Part::Var(v) => vars.write(*v, &mut out),
                    }
                }
                HeaderValue::from_str(&out).ok()
            }
        }
    }
}

/// What a request's variables are (borrowed: nothing is formatted unless a
/// value names a variable).
pub struct Vars<'a> {
    pub client_ip: &'a str,
    pub request_id: &'a str,
    pub sni: &'a str,
    /// The app's name and namespace (`%{app}` is `name-namespace`); none
    /// for a request that reached no app.
    pub app: Option<(&'a str, &'a str)>,
    pub host: &'a str,
}

impl Vars<'_> {
    fn write(&self, var: Var, out: &mut String) {
        match var {
            Var::ClientIp => out.push_str(self.client_ip),
            Var::RequestId => out.push_str(self.request_id),
            Var::Sni => out.push_str(self.sni),
            Var::App => {
                if let Some((name, namespace)) = self.app {
                    out.push_str(name);
                    out.push('-');
                    out.push_str(namespace);
                }
            }
            Var::Host => out.push_str(self.host),
        }
    }

    /// Whether any of `actions` reads a variable.
    fn needed(actions: &[Action]) -> bool {
        actions
            .iter()
            .any(|a| matches!(a, Action::Set(_, Value::Template(_))))
    }
}

/// Fields a request's actions set, written after the client's (which lost
/// every field of these names): for a head written from the fields as they
/// came, with no map.
pub type SetFields = Vec<(HeaderName, HeaderValue)>;

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

/// An app's field rules (see the module doc); `None` from [`FieldRules::of`]
/// when it has none, so the request path pays one `Option` check.
#[derive(Debug)]
pub struct FieldRules {
    /// `Strict-Transport-Security`, for HTTPS responses.
    pub hsts: Option<HeaderValue>,
    pub request: Vec<Action>,
    pub response: Vec<Action>,
    /// Every name a request action sets or deletes: the client's fields of
    /// these names go, in one pass over fields as they came.
    request_names: Names,
    /// Every name a response action deletes, likewise for a member's fields.
    response_deletes: Names,
}

/// Field names in lower case, compared with a name as sent.
#[derive(Debug, Default)]
struct Names(Vec<Box<[u8]>>);

impl Names {
    fn of<'a>(names: impl Iterator<Item = &'a HeaderName>) -> Names {
        let mut out: Vec<Box<[u8]>> = Vec::new();
        for n in names {
            let n = n.as_str().as_bytes();
            if !out.iter().any(|o| **o == *n) {
                out.push(n.into());
            }
        }
        Names(out)
    }

    /// Whether a field of `name` (any case) stays.
    fn keeps(&self, name: &[u8]) -> bool {
        !self.0.iter().any(|n| n.eq_ignore_ascii_case(name))
    }
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
        let request_names = Names::of(request.iter().map(Action::name));
        let response_deletes = Names::of(response.iter().filter_map(|a| match a {
            Action::Delete(name) => Some(name),
            Action::Set(..) => None,
        }));
        Some(Arc::new(FieldRules {
            hsts,
            request,
            response,
            request_names,
            response_deletes,
        }))
    }

    /// The request actions on `headers`.
    pub fn on_request(&self, headers: &mut HeaderMap, vars: &Vars<'_>) {
        apply(&self.request, headers, vars);
    }

    /// The request actions on fields written as they came (the own HTTP/1.1
    /// path), without a map: a field deleted or set is taken out of `raw`;
    /// what is set comes back, to be written after them, in order.
    pub fn on_raw_request(&self, raw: &mut Fields, vars: &Vars<'_>) -> SetFields {
        raw.retain_names(|n| self.request_names.keeps(n));
        let mut added = SetFields::new();
        for action in &self.request {
            added.retain(|(n, _)| n != action.name());
            if let Action::Set(name, value) = action
                && let Some(v) = value.render(vars)
            {
                added.push((name.clone(), v));
            }
        }
        added
    }

    /// The response actions and HSTS (`https`: the response goes out over
    /// TLS): set in `headers` (a member's field of the name, in `raw` when
    /// written as it came, is then left out), deleted from both.
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
        if let Some(raw) = raw
            && !self.response_deletes.0.is_empty()
        {
            raw.retain_names(|n| self.response_deletes.keeps(n));
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
            client_ip: "192.0.2.7",
            request_id: "abc",
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
        let added = rules.on_raw_request(&mut raw, &vars());
        let names: Vec<&[u8]> = raw.iter().map(|(n, _)| n).collect();
        assert_eq!(names, [&b"Host"[..], b"Accept"]);
        let added: Vec<(&str, &str)> = added
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap_or("")))
            .collect();
        assert_eq!(
            added,
            [
                ("x-app", "app-ns via www.example.com"),
                ("x-seen", "second")
            ]
        );
    }
}
