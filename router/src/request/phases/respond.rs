//! The respond phase: the member's answer on its way to the client (its success
//! or failure recorded against the member), hop-by-hop fields removed, the
//! affinity cookie set when the member that answered is not the one the
//! request's cookie named, an upgrade's 101 turned into a tunnel, and what the
//! router adds to every head (`Connection: close`, `Alt-Svc`).

use http::header::{self, HeaderMap};
use http::{Response, StatusCode};
use hyper::body::Incoming;

use super::body::ProxyBody;
use super::context::Reply;
use super::error::ProxyError;
use super::route::Sticky;
use crate::members::MemberSlot;
use crate::metrics::{AffinityResult, UpstreamError};
use crate::policy::Policy;
use crate::policy::affinity::Affinity;
use crate::policy::clients::ClientSlot;
use crate::request::Proxy;
use crate::request::connection::client_conn::ClientConn;
use crate::request::connection::tunnel::Tunnel;
use crate::table::Target;
use crate::upstream::{Lease, MemberHead, SendError, Upstream};
use h1_codec::hop::remove_hop_by_hop;

impl Proxy {
    /// What the router adds to a response's head: `Connection: close` when the
    /// HTTP/1 connection ends after it (never on a 101, which becomes a
    /// tunnel the drain leaves alone), `Alt-Svc` for the HTTP/3 listener.
    pub(in crate::request) fn router_fields(
        &self,
        response: &mut Response<ProxyBody>,
        closing: bool,
        announce_h3: bool,
    ) {
        if closing && response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            response.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
        }
        if announce_h3 && let Some(alt_svc) = &self.alt_svc {
            response
                .headers_mut()
                .insert(http::header::ALT_SVC, alt_svc.clone());
        }
    }

    /// What the last attempt on `target` got: the member's response head (its
    /// success recorded), or the failure counted against it.
    #[inline]
    pub(in crate::request) fn counted<T>(
        &self,
        target: &Target,
        result: Result<T, Option<SendError>>,
    ) -> Result<T, ProxyError> {
        match result {
            Ok(r) => {
                target.member.health.record_success();
                Ok(r)
            }
            Err(None) => Err(self.failed(&target.member, UpstreamError::ResponseTimeout)),
            Err(Some(e)) => {
                tracing::debug!(error = %e, "upstream request failed");
                Err(self.failed(&target.member, e.kind()))
            }
        }
    }

    /// An HTTP/1.1 member's answer as the client gets it: its fields as they
    /// came (hop-by-hop ones are left out where they are written or put in a
    /// map: [`h1_codec::hop::end_to_end`], [`h1_codec::hop::member_map`]), the
    /// affinity cookie in the response's own map, the body read from `up` (back
    /// to its pool once read), the slot travelling with it.
    #[inline]
    pub(in crate::request) fn respond_h1(
        &self,
        response: MemberHead,
        (policy, sticky, https): (Option<&Policy>, &Sticky, bool),
        (target, slot, up): (Target, MemberSlot, Upstream),
    ) -> Reply {
        let (mut parts, fields) = response.into_parts();
        if let Some(affinity) = policy.and_then(|p| p.affinity.as_ref()) {
            self.stick(affinity, sticky, &target, &mut parts.headers, https);
        }
        let body = ProxyBody::upstream(Lease::new(up, target.member.pool.clone()));
        let mut reply = Reply::of(Response::from_parts(parts, body), Some(slot));
        reply.fields = Some(fields);
        reply
    }

    /// The member's response head as the client gets it: hop-by-hop fields
    /// removed, and the affinity cookie when `policy` has affinity.
    #[inline]
    pub(in crate::request) fn respond_head(
        &self,
        headers: &mut HeaderMap,
        (policy, sticky): (Option<&Policy>, &Sticky),
        target: &Target,
        https: bool,
    ) {
        remove_hop_by_hop(headers, false);
        if let Some(affinity) = policy.and_then(|p| p.affinity.as_ref()) {
            self.stick(affinity, sticky, target, headers, https);
        }
    }

    /// Counts what affinity did and sets the cookie for the member that answered,
    /// unless the request's cookie named it already.
    pub(in crate::request) fn stick(
        &self,
        affinity: &Affinity,
        sticky: &Sticky,
        target: &Target,
        headers: &mut HeaderMap,
        https: bool,
    ) {
        let id = target.member.affinity_id(affinity.key());
        let result = match sticky {
            Sticky::Kept(t) if t.member.affinity_id(affinity.key()) == id => {
                self.metrics.affinity(AffinityResult::Kept);
                return;
            }
            Sticky::Kept(_) | Sticky::Moved => AffinityResult::Moved,
            Sticky::None => AffinityResult::New,
        };
        self.metrics.affinity(result);
        if let Some(cookie) = affinity.set_cookie(id, https) {
            headers.append(header::SET_COOKIE, cookie);
        }
    }

    /// The answer to an upgrade request: on 101, a tunnel between the two upgraded
    /// connections (its slot turned into a tunnel count while it lives); otherwise
    /// the member's answer as it is.
    pub(in crate::request) fn upgraded(
        &self,
        mut response: Response<Incoming>,
        client_upgrade: hyper::upgrade::OnUpgrade,
        slot: MemberSlot,
        conn: &ClientConn,
        (idle_timeout, hold): (std::time::Duration, Option<ClientSlot>),
    ) -> Reply {
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers, false);
            return Reply {
                response: Response::from_parts(parts, ProxyBody::detached(body)),
                in_flight: Some(slot),
                member: None,
                hold,
                fields: None,
            };
        }
        let tunnel = Tunnel {
            member: slot.member().addr.clone(),
            slot: slot.into_tunnel(),
            connection: conn.activity.clone(),
            idle_timeout,
            hold,
            kill: conn.kill.clone(),
        };
        let member_upgrade = hyper::upgrade::on(&mut response);
        let member = tunnel.member.clone();
        tokio::spawn(tunnel.run(client_upgrade, member_upgrade));
        let (mut parts, _) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers, true);
        Reply {
            response: Response::from_parts(parts, ProxyBody::empty()),
            in_flight: None,
            member: Some(member),
            hold: None,
            fields: None,
        }
    }
}
