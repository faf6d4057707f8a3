//! The log phase: what a request leaves behind. When its response head is
//! final ([`Proxy::log`]) the access record learns the member and the head's
//! time, and the body takes the request's [`Completion`], which, when the body
//! is done or dropped, counts the request (status, duration, bytes; the app's
//! and the member's figures), frees the member's slot and the client's hold,
//! and writes the access line ([`super::access_log`]).

use bytes::Bytes;
use h1_codec::fields::Fields;
use http::Response;

use super::body::{Completion, ProxyBody};
use super::context::{Context, Reply};
use crate::policy::fields::{FieldRules, Vars};
use crate::request::Answer;
use crate::request::Proxy;
use spans::Moment;

impl Proxy {
    /// The last phase of the request path: the response's head as the client
    /// gets it (with what the router adds, see [`Proxy::router_fields`]), and
    /// its completion attached to its body.
    pub(in crate::request) fn log(&self, mut context: Context<'_>, reply: Reply) -> Answer {
        let Reply {
            mut response,
            in_flight,
            member,
            hold,
            mut fields,
        } = reply;
        // A request the router itself found malformed (400) ends its HTTP/1
        // connection, as nginx and haproxy end it: what follows on it was sent
        // by a client that frames requests otherwise (found by the
        // `client_stream` fuzz target: a request after two Hosts was served).
        let malformed = member.is_none()
            && in_flight.is_none()
            && response.status() == http::StatusCode::BAD_REQUEST;
        if context.log.is_some() || context.span.is_some() {
            let upstream = in_flight
                .as_ref()
                .map(|slot| slot.member().addr.clone())
                .or(member);
            head_known(&mut context, upstream, (&response, fields.as_ref()));
        }
        let closing = !context.stream
            && (context.active.closing() || context.last_on_connection || malformed);
        let added = self.head_fields(&context, closing, (&mut response, &mut fields));
        // The head is handed to the server: on h2 it now waits on the client's window.
        context.active.wait_on_client();
        if let Some(asked) = context.compress {
            let client = context.conn.key();
            (self.compression).apply((asked, client), &mut response, &mut fields);
        }
        let completion = Completion {
            start: context.start,
            status: response.status().as_u16(),
            metrics: self.metrics.clone(),
            log: context.log,
            bytes: 0,
            aborted: false,
            in_flight,
            active: Some(context.active),
            hold,
            app: context.app,
            received: context.received,
            span: context.span,
        };
        let body = std::mem::replace(response.body_mut(), ProxyBody::empty());
        *response.body_mut() = body.with_completion(completion);
        Answer {
            response,
            fields,
            added,
            request_id: context.trace.request_id,
        }
    }
}

/// The response head is final: its span and its access record learn the
/// member that answered (`upstream`) and the head.
fn head_known(
    context: &mut Context<'_>,
    upstream: Option<std::sync::Arc<str>>,
    (response, fields): (&Response<ProxyBody>, Option<&Fields>),
) {
    if let Some(span) = context.span.as_mut() {
        span.mark(Moment::ResponseHead);
        span.member = upstream.clone();
    }
    if let Some(log) = context.log.as_mut() {
        log.head_known(&context.trace, context.start, upstream);
        log.response(response.headers(), fields);
    }
}

impl Proxy {
    /// What the router adds to the head ([`Proxy::router_fields`]; `closing`:
    /// the connection ends after it), then the field rules (HSTS, header
    /// actions) of the request's app; of `app_defaults` when it reached no
    /// app. What comes back: lines the own HTTP/1.1 path writes after the
    /// member's fields (see [`Answer::added`]).
    fn head_fields(
        &self,
        context: &Context<'_>,
        closing: bool,
        response: (&mut Response<ProxyBody>, &mut Option<Fields>),
    ) -> Bytes {
        self.router_fields(response.0, closing, context.announce_h3);
        if let Some(rules) = &context.field_rules {
            let vars = rules.vars(context.provenance());
            on_response(&rules.rules, context, response, &vars)
        } else if context.app.is_none() {
            self.unrouted_fields(context, response)
        } else {
            Bytes::new()
        }
    }

    /// The router-wide field rules (`app_defaults`' `hsts` and `headers`) on
    /// an answer to a request that reached no app (404, 400, a redirect):
    /// the router's own answers carry them too.
    fn unrouted_fields(
        &self,
        context: &Context<'_>,
        response: (&mut Response<ProxyBody>, &mut Option<Fields>),
    ) -> Bytes {
        let table = self.table.load();
        let Some(rules) = table.default_policy.as_ref().and_then(|p| p.fields.clone()) else {
            return Bytes::new();
        };
        drop(table);
        let vars = super::context::vars_of(context.provenance(), None, "");
        on_response(&rules, context, response, &vars)
    }
}

/// `rules` on a response: without a map when the own HTTP/1.1 path writes
/// the member's fields as they came (the lines to write after them come
/// back), else on its map (a field set there replaces the member's of its
/// name, a deleted one is taken out of both).
fn on_response(
    rules: &FieldRules,
    context: &Context<'_>,
    (response, fields): (&mut Response<ProxyBody>, &mut Option<Fields>),
    vars: &Vars<'_>,
) -> Bytes {
    let https = context.conn.https;
    if context.own_h1
        && let Some(raw) = fields.as_mut()
        && let Some(lines) = rules.on_raw_response(raw, response.headers_mut(), https, vars)
    {
        return lines;
    }
    rules.on_response(response.headers_mut(), fields.as_mut(), https, vars);
    Bytes::new()
}
