//! The open-files limit (`RLIMIT_NOFILE`): both binaries raise the soft limit to
//! the hard one at start, then size their connection limits to what it holds (the
//! router's `fds::budget`, the portproxy's `Limits::fit`). Systemd units set the
//! hard limit (`LimitNOFILE=`); the soft one defaults to 1024 for compatibility
//! with `select()`, which neither binary uses.

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
    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        let now = super::raise().expect("getrlimit");
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
