//! The checks of `pair:` (its settings type is the pair's own,
//! `crate::pair::PairSettings`, as each module owns its settings).

use super::*;

impl Config {
    /// `pair`: the other router's admin address and this router's name
    /// (each defaulting to `acme:`'s), a token the peer's calls are guarded
    /// by, and deadlines a link can keep.
    pub(super) fn validate_pair(&self) -> Result<(), Invalid> {
        let p = &self.pair;
        if p.peer.is_none() && p.node.is_none() {
            return Ok(());
        }
        let Some(peer) = p.peer.as_deref().or(self.acme.peer.as_deref()) else {
            return Err((
                "pair.peer",
                "a pair (pair.node) needs the other router's admin address, host:port".into(),
            ));
        };
        self.check_peer(
            ("pair.peer", peer),
            ("pair.node", p.node.or(self.acme.node)),
        )?;
        for (field, d) in [
            ("pair.timeout", p.timeout),
            ("pair.interval", p.interval),
            ("pair.limit_interval", p.limit_interval),
        ] {
            if d < Duration::from_millis(50) {
                return Err((field, "must be at least 50ms".into()));
            }
        }
        if p.max_clock_skew < Duration::from_secs(1) {
            return Err((
                "pair.max_clock_skew",
                "must be at least 1s (the two routers' clocks never agree closer)".into(),
            ));
        }
        if p.tombstone_ttl < Duration::from_secs(3600) {
            return Err((
                "pair.tombstone_ttl",
                "must be at least 1h: a deletion must outlive a peer's restart".into(),
            ));
        }
        Ok(())
    }

    /// A pair's peer (`field`: which key named it): an admin address, this
    /// router's name (`node`), and the admin listener and token its calls
    /// go through (the same token on both routers).
    pub(super) fn check_peer(
        &self,
        (field, peer): (&'static str, &str),
        (node_field, node): (&'static str, Option<crate::pair::Node>),
    ) -> Result<(), Invalid> {
        let port_ok = peer
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !port_ok {
            return Err((
                field,
                format!("{peer:?}: the other router's admin address, host:port"),
            ));
        }
        if node.is_none() {
            return Err((
                node_field,
                format!("a pair ({field}) needs this router's name in it: a or b"),
            ));
        }
        if self.admin.token_file.is_none() || self.listen.admin.is_none() {
            return Err((
                field,
                "a pair's calls (its shared state, ACME's keys) go through the admin API: it needs listen.admin and admin.token_file (the same token on both routers)".into(),
            ));
        }
        Ok(())
    }
}
