//! File descriptors: the router raises its soft `RLIMIT_NOFILE` to the hard limit
//! at start, and sizes the client listeners so that the rest of the process never
//! runs out.
//!
//! Each client connection may hold a member connection too, so clients get at most
//! `(limit - reserve - admin) / 2` slots ([`budget`]); the reserve stays for the
//! spool and state files, the broker session, health checks, TLS files and the like,
//! so those never fail with EMFILE because clients took every descriptor. When
//! `limits.max_connections` (or `max_admin_connections`) does not fit, it is lowered
//! and the log says so with the numbers; nothing is silently clipped.

/// Raises the soft limit to the hard one; returns the soft limit now in force.
pub fn raise_limit() -> std::io::Result<u64> {
    nofile::raise()
}

/// What fits in a file-descriptor limit.
#[derive(Debug, PartialEq, Eq)]
pub struct Budget {
    /// Kept for everything else: spool and state files, the broker, health checks,
    /// TLS files (an eighth of the limit, between 32 and 256).
    pub reserve: u64,
    pub admin_connections: usize,
    pub client_connections: usize,
}

/// Splits `limit` descriptors: the reserve first, then admin connections (at most a
/// sixteenth of the limit, at least 4), then two per client connection (one to the
/// client, one to a member); never more than configured, never zero.
pub fn budget(limit: u64, clients: usize, admin: usize) -> Budget {
    let reserve = (limit / 8).clamp(32, 256);
    let admin_fit = admin.min(usize::try_from((limit / 16).max(4)).unwrap_or(usize::MAX));
    let free = limit.saturating_sub(reserve + admin_fit as u64) / 2;
    let client_fit = usize::try_from(free).unwrap_or(usize::MAX).max(1);
    Budget {
        reserve,
        admin_connections: admin_fit,
        client_connections: clients.min(client_fit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_get_half_of_what_the_reserve_and_admin_leave() {
        let b = budget(1_048_576, 10_000, 256);
        assert_eq!(
            (b.reserve, b.admin_connections, b.client_connections),
            (256, 256, 10_000)
        );
        let b = budget(20_000, 10_000, 256);
        assert_eq!(
            b.client_connections,
            (20_000 - 256 - 256) / 2,
            "does not fit: lowered"
        );
        let b = budget(256, 10_000, 256);
        assert_eq!((b.reserve, b.admin_connections), (32, 16));
        assert_eq!(b.client_connections, (256 - 32 - 16) / 2);
        assert_eq!(budget(8, 10_000, 256).client_connections, 1, "never zero");
        assert!(raise_limit().expect("getrlimit") >= 8);
    }
}
