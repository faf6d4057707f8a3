//! The open-files limit (`RLIMIT_NOFILE`): both binaries raise the soft limit to
//! the hard one at start, then size their connection limits to what it holds (the
//! router's `fds::budget`, the portproxy's `Limits::fit`). Systemd units set the
//! hard limit (`LimitNOFILE=`); the soft one defaults to 1024 for compatibility
//! with `select()`, which neither binary uses.

/// How long a listener pauses after `accept(2)` failed with `e`, the one rule of
/// every accept loop of both binaries (each also counts the error in its
/// `*_accept_errors_total`).
///
/// An error that belongs to one client (it reset before it was accepted, a
/// signal, a firewall's refusal) says nothing about the listener: accept the next
/// at once, as nginx does for `ECONNABORTED`. Anything else, out of descriptors
/// (`EMFILE`, `ENFILE`) or memory first, would fail again at once and spin a core:
/// pause 100 ms (nginx stops accepting for 500 ms, haproxy until a connection
/// ends) so that connections can end and give their descriptors back.
pub fn accept_pause(e: &std::io::Error) -> std::time::Duration {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionReset, Interrupted, WouldBlock};
    let clients = matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || matches!(e.raw_os_error(), Some(libc::EPROTO | libc::EPERM));
    if clients {
        std::time::Duration::ZERO
    } else {
        std::time::Duration::from_millis(100)
    }
}

/// What every accept loop of both binaries does after `accept(2)` on `listener`
/// failed with `e` (each also counts it in its `*_accept_errors_total`): logs it
/// and takes [`accept_pause`]. A client's own error is logged at debug only, so
/// that clients cannot fill the log with it.
pub async fn after_accept_error(listener: &str, e: &std::io::Error) {
    let pause = accept_pause(e);
    if pause.is_zero() {
        tracing::debug!(listener, error = %e, "accept failed");
    } else {
        tracing::warn!(listener, error = %e, pause = ?pause, "accept failed; pausing");
        tokio::time::sleep(pause).await;
    }
}

/// Raises the soft limit to the hard one; returns the soft limit now in force.
pub fn raise() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Ok(raised.rlim_cur);
        }
    }
    Ok(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_error_is_no_pause_running_out_is() {
        use std::io::{Error, ErrorKind};
        assert!(accept_pause(&Error::from(ErrorKind::ConnectionAborted)).is_zero());
        assert!(accept_pause(&Error::from_raw_os_error(libc::EPROTO)).is_zero());
        for e in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert!(!accept_pause(&Error::from_raw_os_error(e)).is_zero(), "{e}");
        }
    }

    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        let now = raise().expect("getrlimit");
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `raise`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(now, lim.rlim_cur);
        assert_eq!(lim.rlim_cur, lim.rlim_max, "raised to the hard limit");
    }
}
