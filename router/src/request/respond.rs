//! The member's answer on its way to the client: hop-by-hop fields removed, the
//! affinity cookie set when the member that answered is not the one the
//! request's cookie named, an app policy's refusal counted, and an upgrade's 101
//! turned into a tunnel.

use http::header::{self, HeaderMap};
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;

use super::body::ProxyBody;
use super::error::ProxyError;
use super::headers::{ClientConn, remove_hop_by_hop};
use super::route::Sticky;
use super::tunnel::Tunnel;
use super::{Forwarded, Proxy};
use crate::members::MemberSlot;
use crate::metrics::{AffinityResult, UpstreamError};
use crate::policy::affinity::Affinity;
use crate::policy::clients::ClientSlot;
use crate::policy::{Policy, Refused};
use crate::table::Target;
use crate::upstream::{Lease, MemberHead, RequestBody, SendError, Upstream};

use super::forward::Timeouts;
use super::retry::{Reached, Replay, Retry, decide, idempotent};
use crate::table::Route;
use per_source::ClientKey;

/// An upgrade request's head and body, and the client's side of the upgrade.
pub(super) type UpgradeRequest = (http::request::Parts, RequestBody, hyper::upgrade::OnUpgrade);

impl Proxy {
    /// What the last attempt on `target` got: the member's response head (its
    /// success recorded), or the failure counted against it.
    #[inline]
    pub(super) fn answered(
        &self,
        target: &Target,
        result: Result<MemberHead, Option<SendError>>,
    ) -> Result<MemberHead, ProxyError> {
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
    /// map: [`super::headers::end_to_end`], [`super::headers::member_map`]), the
    /// affinity cookie in the response's own map, the body read from `up` (back
    /// to its pool once read), the slot travelling with it.
    #[inline]
    pub(super) fn respond_h1(
        &self,
        response: MemberHead,
        (policy, sticky, https): (Option<&Policy>, &Sticky, bool),
        (target, slot, up): (Target, MemberSlot, Upstream),
        hold: Option<ClientSlot>,
    ) -> Forwarded {
        let (mut parts, fields) = response.into_parts();
        if let Some(affinity) = policy.and_then(|p| p.affinity.as_ref()) {
            self.stick(affinity, sticky, &target, &mut parts.headers, https);
        }
        let body = ProxyBody::upstream(Lease::new(up, target.member.pool.clone()));
        let mut forwarded = Forwarded::of(Response::from_parts(parts, body), Some(slot), hold);
        forwarded.fields = Some(fields);
        forwarded
    }

    /// The member's response head as the client gets it: hop-by-hop fields
    /// removed, and the affinity cookie when `policy` has affinity.
    #[inline]
    pub(super) fn respond_head(
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
    pub(super) fn stick(
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

    /// Counts a policy's refusal, by app and reason.
    pub(super) fn refused(&self, policy: &Policy, r: Refused) -> ProxyError {
        self.metrics
            .app_refused
            .with_label_values(&[&*policy.label, r.reason()])
            .inc();
        ProxyError::Refused(r)
    }

    /// An upgrade request (WebSocket) sent on its fresh connection; the member's
    /// answer, or on 101 the tunnel (see [`Proxy::upgraded`]). A member that
    /// closed before answering gets the one retry decision's second attempt, on a
    /// fresh connection, when the request can be sent again as it was (`again`:
    /// its head, when it has no body).
    pub(super) async fn send_upgrade(
        &self,
        (parts, body, client_upgrade): UpgradeRequest,
        (route, sni, source): (&Route, &str, (ClientKey, usize)),
        (mut target, mut slot, up): (Target, MemberSlot, Upstream),
        conn: &ClientConn,
        (timeouts, hold): (Timeouts, Option<ClientSlot>),
    ) -> Result<Forwarded, ProxyError> {
        // Sent again as it was (another member, or a new connection) only
        // without a body, as any request.
        let again = matches!(body, RequestBody::Empty).then(|| parts.clone());
        let req = Request::from_parts(parts, body);
        let replay = Replay::Request {
            idempotent: idempotent(req.method()),
            exact: again.is_some(),
        };
        let mut sent = self.upgrade_on(&target, up, req, timeouts.response).await;
        if let (Err(Some(e)), Some(parts)) = (&sent, again) {
            let retry = decide(Reached::from(e), replay);
            if retry != Retry::No {
                let up = self
                    .connect_again(
                        (retry, replay),
                        (route, sni, source),
                        (&mut target, &mut slot),
                        true,
                    )
                    .await?;
                let req = Request::from_parts(parts, RequestBody::Empty);
                sent = self.upgrade_on(&target, up, req, timeouts.response).await;
            }
        }
        let response = match sent {
            Ok(r) => r,
            Err(Some(e)) => return Err(self.failed(&target.member, e.kind())),
            Err(None) => {
                return Err(self.failed(&target.member, UpstreamError::ResponseTimeout));
            }
        };
        target.member.health.record_success();
        Ok(self.upgraded(
            response,
            client_upgrade,
            slot,
            conn,
            (timeouts.tunnel_idle, hold),
        ))
    }

    /// One upgrade request on `up`: the member's answer, its failure, or `None`
    /// when no answer came within `timeout`.
    async fn upgrade_on(
        &self,
        target: &Target,
        up: Upstream,
        req: Request<RequestBody>,
        timeout: std::time::Duration,
    ) -> Result<Response<Incoming>, Option<SendError>> {
        match tokio::time::timeout(timeout, up.send_upgrade(&target.member.addr, req)).await {
            Ok(r) => r.map_err(Some),
            Err(_) => Err(None),
        }
    }

    /// The answer to an upgrade request: on 101, a tunnel between the two upgraded
    /// connections (its slot turned into a tunnel count while it lives); otherwise
    /// the member's answer as it is.
    pub(super) fn upgraded(
        &self,
        mut response: Response<Incoming>,
        client_upgrade: hyper::upgrade::OnUpgrade,
        slot: MemberSlot,
        conn: &ClientConn,
        (idle_timeout, hold): (std::time::Duration, Option<ClientSlot>),
    ) -> Forwarded {
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            let (mut parts, body) = response.into_parts();
            remove_hop_by_hop(&mut parts.headers, false);
            return Forwarded {
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
        };
        let member_upgrade = hyper::upgrade::on(&mut response);
        let member = tunnel.member.clone();
        tokio::spawn(tunnel.run(client_upgrade, member_upgrade));
        let (mut parts, _) = response.into_parts();
        remove_hop_by_hop(&mut parts.headers, true);
        Forwarded {
            response: Response::from_parts(parts, ProxyBody::empty()),
            in_flight: None,
            member: Some(member),
            hold: None,
            fields: None,
        }
    }
}
