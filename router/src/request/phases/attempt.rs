//! The attempt loop: the one place a request's phases are called, in order
//! (Pingora's `ProxyHttp` is the model; each phase is a function in the file
//! named after it):
//!
//! | phase | function | file |
//! |---|---|---|
//! | route | [`Proxy::route`] | `route.rs` |
//! | admit | [`Proxy::admit`] | `admit.rs` |
//! | checkout | [`Destination::pick`], [`Proxy::h1_checkout_at_once`], [`Proxy::checkout_or_other`] | `checkout.rs` |
//! | send | [`prepare`], [`Proxy::read_body`], [`encoded`], the member connection's `send` | `send.rs` |
//! | retry decision | [`retry_of`], [`Proxy::connect_again`] | `retry.rs` |
//! | respond | [`Proxy::counted`], [`Proxy::respond_h1`] | `respond.rs` |
//! | log | [`Proxy::log`] | `log.rs` |
//!
//! An HTTP/1.1 member's request is sent inline here (as a function of its own,
//! moving its future and results cost 1 000 instructions a request); an h2
//! member's ([`Proxy::attempt_h2`]) and an upgrade's ([`Proxy::attempt_upgrade`])
//! take the same phases with their own send, boxed (their futures are not
//! part of every HTTP/1.1 request's).

use h1_codec::fields::{Fields, FieldsRef};
use http::Request;
use http::header::HeaderValue;

use super::admit::Requester;
use super::body::ProxyBody;
use super::checkout::{H1Checkout, H2Checkout};
use super::context::{Context, Reply};
use super::error::ProxyError;
use super::retry::{Replay, Retry, idempotent, retry_of};
use super::route::{Destination, Routed};
use super::send::{Protocol, Timeouts, encoded, prepare, request_sets};
use super::upload::Received;
use crate::policy::clients::ClientSlot;
use crate::request::Proxy;
use crate::table::Target;
use crate::upstream::RequestBody;
use spans::Moment;

/// A request admitted and its member picked: what each way of sending it
/// starts from (the member, whose request it is, its count against its app).
struct Picked {
    target: Target,
    source: Requester,
    hold: Option<ClientSlot>,
}

impl Picked {
    fn new(target: Target, source: Requester, hold: Option<ClientSlot>) -> Picked {
        Picked {
            target,
            source,
            hold,
        }
    }
}

impl Proxy {
    /// One request's way to a member and back: routed, admitted, checked out,
    /// sent (once more if the retry decision allows), answered. `host`: the
    /// host it addressed; `raw`: its fields as they came (the own HTTP/1.1
    /// path, the request's map then empty).
    pub(in crate::request) async fn attempt(
        &self,
        context: &mut Context<'_>,
        mut req: Box<Request<Received>>,
        host: Option<HeaderValue>,
        mut raw: Option<Fields>,
    ) -> Result<Reply, ProxyError> {
        let fields = FieldsRef::of(&req, raw.as_ref());
        let to = match self.route(context.conn, &req, fields, &host)? {
            Routed::To(destination) => destination,
            Routed::Answered(response) => return Ok(Reply::of(*response, None)),
        };
        context.routed(&to, &req, fields);
        let (hold, source) = self.admit(context.conn, fields, &to, context.received)?;
        let target = to.pick(fields, source.key)?;
        let from = context.provenance();
        let (protocol, body) = prepare((&mut req, &mut raw), &to, &target, from)?;
        let body = self.read_body(body, to.policy.as_deref()).await?;
        let timeouts = Timeouts::of(self, to.policy.as_deref());
        match protocol {
            Protocol::H1 => {}
            Protocol::H2 { trailers } => {
                let parts = (req.into_parts().0, body);
                let how = Picked::new(target, source, hold);
                return Box::pin(self.attempt_h2(context, &to, how, parts, trailers)).await;
            }
            Protocol::Upgrade(client) => {
                let parts = (req.into_parts().0, body, client);
                let how = Picked::new(target, source, hold);
                return Box::pin(self.attempt_upgrade(context, &to, how, parts, timeouts)).await;
            }
        }
        let how = H1Checkout::pooled(&to.name, source);
        let (mut target, (mut slot, mut up)) = match self.h1_checkout_at_once(&target, &how) {
            Some(now) => (target, now),
            None => Box::pin(self.checkout_or_other(&to.route, target, req.method(), how)).await?,
        };
        context.mark(Moment::Connected);
        let from = context.provenance();
        let sets = request_sets(&to, from);
        let raw = raw.as_ref().map(|f| (f, sets.as_ref()));
        let (mut request, replay) = encoded((req, body), raw, from, to.host);
        let mut retried = false;
        let head = loop {
            let result = up
                .send(&target.member.addr, &mut request, timeouts.response)
                .await;
            let retry = retry_of(&result, replay);
            if retry == Retry::No || retried {
                break self.counted(&target, result)?;
            }
            retried = true;
            context.mark(Moment::Retry);
            let (at, on) = ((&*to.route, &*to.name, source), (&mut target, &mut slot));
            up = Box::pin(self.connect_again((retry, replay), at, on, false)).await?;
            request.rewind();
        };
        let sticky = (to.policy.as_deref(), &to.sticky, context.conn.https);
        Ok(self.respond_h1(head, sticky, (target, slot, up)).held(hold))
    }

    /// [`Proxy::attempt`] for an app whose members speak h2: checked out on
    /// `target` (or another member, when nothing was sent), exchanged, and
    /// answered as over HTTP/1.1.
    async fn attempt_h2(
        &self,
        context: &mut Context<'_>,
        to: &Destination<'_>,
        Picked {
            target,
            source,
            hold,
        }: Picked,
        (parts, body): (http::request::Parts, RequestBody),
        trailers: bool,
    ) -> Result<Reply, ProxyError> {
        let timeout = Timeouts::of(self, to.policy.as_deref()).response;
        let how = H2Checkout {
            sni: &to.name,
            source,
        };
        let method = parts.method.clone();
        let (target, (slot, send)) = self
            .checkout_or_other(&to.route, target, &method, how)
            .await?;
        context.mark(Moment::Connected);
        let response = self
            .exchange_h2(&target, send, (parts, body), (trailers, timeout))
            .await?;
        let (mut parts, body) = response.into_parts();
        let sticky = (to.policy.as_deref(), &to.sticky);
        self.respond_head(&mut parts.headers, sticky, &target, context.conn.https);
        let response = http::Response::from_parts(parts, ProxyBody::detached(body));
        Ok(Reply::of(response, Some(slot)).held(hold))
    }

    /// [`Proxy::attempt`] for an upgrade (WebSocket): checked out on a fresh
    /// connection of its own, sent, and on 101 turned into a tunnel (see
    /// [`Proxy::upgraded`]). A member that closed before answering gets the
    /// retry decision's second attempt, on a fresh connection, when the
    /// request can be sent again as it was (it has no body).
    async fn attempt_upgrade(
        &self,
        context: &mut Context<'_>,
        to: &Destination<'_>,
        Picked {
            target,
            source,
            hold,
        }: Picked,
        (parts, body, client): (http::request::Parts, RequestBody, hyper::upgrade::OnUpgrade),
        timeouts: Timeouts,
    ) -> Result<Reply, ProxyError> {
        let sni: &str = &to.name;
        let how = H1Checkout {
            sni,
            source,
            fresh: true,
        };
        let (mut target, (mut slot, up)) = self
            .checkout_or_other(&to.route, target, &parts.method, how)
            .await?;
        context.mark(Moment::Connected);
        let mut again = matches!(body, RequestBody::Empty).then(|| parts.clone());
        let replay = Replay::Request {
            idempotent: idempotent(&parts.method),
            exact: again.is_some(),
        };
        let req = Request::from_parts(parts, body);
        let mut sent = self.upgrade_on(&target, up, req, timeouts.response).await;
        // At most once: `again` is taken.
        while let (Err(Some(_)), Some(parts)) = (&sent, again.take()) {
            let retry = retry_of(&sent, replay);
            if retry == Retry::No {
                break;
            }
            context.mark(Moment::Retry);
            let at = (&*to.route, sni, source);
            let up = self
                .connect_again((retry, replay), at, (&mut target, &mut slot), true)
                .await?;
            let req = Request::from_parts(parts, RequestBody::Empty);
            sent = self.upgrade_on(&target, up, req, timeouts.response).await;
        }
        let response = self.counted(&target, sent)?;
        let (conn, idle) = (context.conn, timeouts.tunnel_idle);
        Ok(self.upgraded(response, client, slot, conn, (idle, hold)))
    }
}
