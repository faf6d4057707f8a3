//! The retry decision, the one of the router, for HTTP requests (to HTTP/1.1 and h2
//! members alike, WebSocket upgrades included), TLS passthrough and TCP ports.
//!
//! A failed attempt says how far it got ([`Reached`], read off the error as Pingora
//! reads it off its own); what the client sent says what may be sent again
//! ([`Replay`]); [`decide`] says what follows. The rules, in haproxy's and nginx's
//! words:
//! - **nothing reached the member** (no free slot, refused, connect timeout): another
//!   member of the route, chosen by its own balancer (`retry-on conn-failure` with
//!   `option redispatch`); for HTTP only an idempotent method (RFC 9110 §9.2.2), as
//!   nginx's `proxy_next_upstream` does not retry a POST;
//! - **the member closed before any response byte**: the request is sent once more
//!   when it can be replayed exactly (idempotent and no body): on a new connection
//!   to the same member when the closed one was reused (its keep-alive timeout met
//!   ours), on another member when it was fresh (the member is going away);
//! - anything else (a garbled answer, a timeout, a response begun): no retry.
//!
//! Each request, passthrough or TCP connection gets one retry, counted in
//! `router_upstream_retries_total` for HTTP (a reconnect that finds nothing reachable may still
//! move to another member).

use super::admit::Requester;
use http::Method;

use super::error::ProxyError;
use crate::members::MemberSlot;
use crate::metrics::UpstreamError;
use crate::request::Proxy;
use crate::table::{Route, Target};
use crate::upstream::{SendError, Upstream};

/// How far a failed attempt got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// Nothing reached the member.
    Nothing,
    /// The request was sent; the member closed before any response byte. `reused`:
    /// on a connection that had served before.
    ClosedUnanswered { reused: bool },
    /// Further: a response began, the answer was garbled, or time ran out.
    Further,
}

/// What the client's side allows to be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Raw bytes nobody has sent yet (passthrough, TCP ports).
    Connection,
    /// An HTTP request: `idempotent` by its method, `exact` when its encoded head is
    /// all of it (no body).
    Request { idempotent: bool, exact: bool },
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A new connection to the same member, the request sent again.
    SameMember,
    /// Another member of the route.
    OtherMember,
    /// The failure is the answer.
    No,
}

/// The decision (see the module doc).
pub fn decide(reached: Reached, replay: Replay) -> Retry {
    use Reached::{ClosedUnanswered, Nothing};
    match (reached, replay) {
        (Nothing, Replay::Connection) => Retry::OtherMember,
        (Nothing, Replay::Request { idempotent, .. }) if idempotent => Retry::OtherMember,
        (
            ClosedUnanswered { reused },
            Replay::Request {
                idempotent: true,
                exact: true,
            },
        ) => {
            if reused {
                Retry::SameMember
            } else {
                Retry::OtherMember
            }
        }
        _ => Retry::No,
    }
}

impl ProxyError {
    /// How far the attempt that failed with this got. A reset while connecting is
    /// a fresh connection the member closed before answering.
    pub fn reached(&self) -> Reached {
        match self {
            _ if self.nothing_sent() => Reached::Nothing,
            ProxyError::Upstream(UpstreamError::Reset) => {
                Reached::ClosedUnanswered { reused: false }
            }
            _ => Reached::Further,
        }
    }
}

impl From<&SendError> for Reached {
    fn from(e: &SendError) -> Reached {
        if e.closed_before_response() {
            Reached::ClosedUnanswered {
                reused: e.on_reused(),
            }
        } else {
            Reached::Further
        }
    }
}

impl Proxy {
    /// The connection a second attempt goes on, as `retry` says: a new one to
    /// the same member, or (if that fails too, or the decision says so) one to
    /// another member of the route, `target` and `slot` moved to it. `fresh`: a
    /// connection of its own, never one from the idle pool (an upgrade's).
    pub(in crate::request) async fn connect_again(
        &self,
        (retry, replay): (Retry, Replay),
        (route, sni, source): (&Route, &str, Requester),
        (target, slot): (&mut Target, &mut MemberSlot),
        fresh: bool,
    ) -> Result<Upstream, ProxyError> {
        self.metrics.retries.inc();
        let again = match retry {
            Retry::SameMember => Box::pin(self.connect(target, sni, source.worker)).await,
            _ => Err(self.failed(&target.member, UpstreamError::Reset)),
        };
        match again {
            Ok(up) => Ok(up),
            Err(e) if decide(e.reached(), replay) == Retry::OtherMember => {
                let other = route.pick_other(&target.member).ok_or(e)?.clone();
                let (s, u) = self.h1_checkout(&other, sni, source, fresh).await?;
                (*target, *slot) = (other, s);
                Ok(u)
            }
            Err(e) => Err(e),
        }
    }
}

/// What the one retry decision says of an attempt's result.
pub(in crate::request) fn retry_of<T>(
    result: &Result<T, Option<SendError>>,
    replay: Replay,
) -> Retry {
    match result {
        Err(Some(e)) => decide(Reached::from(e), replay),
        _ => Retry::No,
    }
}

/// RFC 9110 §9.2.2.
pub fn idempotent(m: &Method) -> bool {
    matches!(
        *m,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decision_table() {
        let get = Replay::Request {
            idempotent: true,
            exact: true,
        };
        let put_with_body = Replay::Request {
            idempotent: true,
            exact: false,
        };
        let post = Replay::Request {
            idempotent: false,
            exact: true,
        };
        let closed = |reused| Reached::ClosedUnanswered { reused };
        for (reached, replay, want) in [
            (Reached::Nothing, Replay::Connection, Retry::OtherMember),
            (Reached::Nothing, get, Retry::OtherMember),
            (Reached::Nothing, put_with_body, Retry::OtherMember),
            (Reached::Nothing, post, Retry::No),
            (closed(true), get, Retry::SameMember),
            (closed(false), get, Retry::OtherMember),
            (closed(true), put_with_body, Retry::No),
            (closed(true), post, Retry::No),
            (closed(true), Replay::Connection, Retry::No),
            (Reached::Further, get, Retry::No),
            (Reached::Further, Replay::Connection, Retry::No),
        ] {
            assert_eq!(decide(reached, replay), want, "{reached:?} {replay:?}");
        }
    }
}
