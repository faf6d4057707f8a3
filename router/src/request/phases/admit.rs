//! The admit phase: the app's policy admits the request's client, or refuses
//! it (allow/deny 403, maintenance 503, a declared body over
//! `max_request_body_bytes` 413, the rate and at-once limits 429; see
//! [`crate::policy`]), each refusal counted by app and reason.

use h1_codec::fields::FieldsRef;

use super::error::ProxyError;
use super::route::Destination;
use crate::policy::clients::ClientSlot;
use crate::policy::{Policy, Refused};
use crate::request::Proxy;
use crate::request::connection::client_conn::ClientConn;
use per_source::ClientKey;

/// Whose a request is, for its member: its client key (whose share of a
/// member's slots it counts in) and the worker serving it (whose idle member
/// connections it may reuse).
#[derive(Clone, Copy, Debug)]
pub(in crate::request) struct Requester {
    pub(in crate::request) key: ClientKey,
    pub(in crate::request) worker: usize,
}

impl Proxy {
    /// Admits the request's client to its destination's app: its hold on the
    /// app's `max_connections_per_client` (`None` without a policy: nothing
    /// to hold), and whose it is for its member (its client key, whose share
    /// of a member's slots it counts in, and the worker serving it, whose idle
    /// member connections it may reuse). `declared`: the body's length as
    /// its head says (`max_request_body_bytes`).
    #[inline]
    pub(in crate::request) fn admit(
        &self,
        conn: &ClientConn,
        fields: FieldsRef<'_>,
        destination: &Destination<'_>,
        declared: u64,
    ) -> Result<(Option<ClientSlot>, Requester), ProxyError> {
        let client = conn.client(fields);
        let hold = match destination.policy.as_deref() {
            Some(p) => p
                .admit(&destination.route.app, (client, declared), &self.clients)
                .map_err(|r| self.refused(p, r))?,
            None => None,
        };
        Ok((
            hold,
            Requester {
                key: client.key,
                worker: conn.worker,
            },
        ))
    }

    /// Counts a policy's refusal, by app and reason.
    pub(in crate::request) fn refused(&self, policy: &Policy, r: Refused) -> ProxyError {
        self.metrics
            .app_refused
            .with_label_values(&[&*policy.label, r.reason()])
            .inc();
        ProxyError::Refused(r)
    }
}
