//! Where the routing state goes once a change is durable: the last step of an event's
//! path (decoded → applied → persisted → **published**). The router implements
//! [`Publish`] by building its next route table; this crate knows nothing of HTTP.

use std::collections::BTreeSet;

use crate::apply::{AppKey, RoutingState};

/// Receives the state after each durable change, with the apps that changed since
/// the last call (an app in `changed` but not in `state` was deleted).
pub trait Publish: Send {
    fn publish(&mut self, state: &RoutingState, changed: &BTreeSet<AppKey>);
}
