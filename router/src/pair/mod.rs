//! The pair as one router: what an operator puts on either router of a
//! keepalived pair applies on both.
//!
//! - **One link** ([`peer`]): the other router's admin API (`pair.peer`, or
//!   `acme.peer` where only that is set), with the admin token, over TLS off
//!   loopback. The platform's broker was the other carrier at hand; the link
//!   does not depend on it because the pair must agree while the broker is
//!   away (it is the pair's own state, not routing events), and the admin API
//!   already had the token, the TLS and the audit.
//! - **One state** ([`state`]): each app's own settings, each name's
//!   blue/green split and each member's rotate state is an entry with a
//!   version (a hybrid clock: milliseconds, one more than any version seen,
//!   the node in the lowest bit), kept in `state_dir/pair.json`. A write on
//!   either router gets a version above every version that router has seen;
//!   an entry from the peer applies only when its version is higher, so the
//!   later write wins and a router coming back never rolls a newer one back.
//!   The comparison, the apply and the save are one turn against the
//!   operator's own writes; versions beyond `pair.max_clock_skew` ahead are
//!   refused; deletions are kept `pair.tombstone_ttl`, then dropped.
//! - **Incremental updates with acknowledgements** ([`link`]): each change
//!   has a sequence number; the sender posts the entries the peer has not
//!   acknowledged (`POST /pair/updates`), at once on a change and every
//!   `pair.interval` otherwise. A link that drops resumes where the peer's last
//!   acknowledgement left it; a peer that restarted (its answer names another
//!   epoch) is sent everything at once.
//! - **One limit** ([`counts`]): each router tells the other how many
//!   tokens each client took from each app's rate limit, every
//!   `pair.limit_interval`, and takes as many from its own buckets.

pub mod counts;
pub mod link;
pub mod peer;

use std::time::Duration;

use serde::Deserialize;

pub use pair_state::{Key, Node, State, Update};
pub use peer::{Peer, PeerError};

/// `pair:`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PairSettings {
    /// The other router's admin address, `host:port` (default: `acme.peer`).
    pub peer: Option<String>,
    /// This router's name in the pair, `a` or `b` (default: `acme.node`).
    pub node: Option<Node>,
    /// A call on the link that takes longer has failed.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// How often the link is tried when nothing changes (the peer's
    /// reachability and the catch-up after a drop are no older than this).
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// How often the rate-limit counts go to the peer (see [`counts`]): the
    /// shared limit's error bound is one interval of the limit's rate.
    #[serde(with = "humantime_serde")]
    pub limit_interval: Duration,
    /// An entry from the peer versioned further ahead of this router's clock
    /// is refused (400, `router_pair_updates_refused_total`): a version from
    /// the future would win over every write to come, on both routers.
    #[serde(with = "humantime_serde")]
    pub max_clock_skew: Duration,
    /// How long a deletion (a setting or split removed, a member rotated
    /// back in) is kept in `pair.json` for a peer that was away.
    #[serde(with = "humantime_serde")]
    pub tombstone_ttl: Duration,
}

impl PairSettings {
    /// The state's bounds.
    pub fn bounds(&self) -> pair_state::Bounds {
        pair_state::Bounds {
            max_ahead: self.max_clock_skew,
            tombstone_ttl: self.tombstone_ttl,
        }
    }
}

impl Default for PairSettings {
    fn default() -> PairSettings {
        PairSettings {
            peer: None,
            node: None,
            timeout: Duration::from_secs(3),
            interval: Duration::from_secs(1),
            limit_interval: Duration::from_millis(200),
            max_clock_skew: pair_state::Bounds::default().max_ahead,
            tombstone_ttl: pair_state::Bounds::default().tombstone_ttl,
        }
    }
}
