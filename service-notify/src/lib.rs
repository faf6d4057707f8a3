//! What the router and the portproxy tell systemd (`Type=notify` units in
//! `deploy/systemd/`): `READY=1` once their state is loaded and their listeners are up,
//! watchdog pings, `STOPPING=1` when they begin to stop. Outside systemd (no
//! `NOTIFY_SOCKET`) every call does nothing.
//!
//! The work is the `sd-notify` crate's; this only fixes when and how often.

/// Says "ready" and, when the unit has `WatchdogSec=`, pings the watchdog at half the
/// interval from a task on the current runtime: a stuck runtime stops the pings and
/// systemd restarts the service. Call it from inside the runtime.
pub fn ready() {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    if let Some(every) = sd_notify::watchdog_enabled() {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every / 2);
            loop {
                tick.tick().await;
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            }
        });
    }
}

/// Says this process is the service's main process now (after `router upgrade`
/// took over from the old one; the unit needs `NotifyAccess=all`).
pub fn main_pid(pid: u32) {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::MainPid(pid)]);
}

/// Says "stopping" (systemd then waits `TimeoutStopSec=` for the drain).
pub fn stopping() {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
}

#[cfg(test)]
mod tests {
    /// Without a service manager (no NOTIFY_SOCKET, as in every test here) both calls
    /// are harmless no-ops: the programs call them unconditionally.
    #[tokio::test]
    async fn outside_systemd_the_calls_do_nothing() {
        assert!(
            std::env::var_os("NOTIFY_SOCKET").is_none(),
            "tests run outside systemd"
        );
        super::ready();
        super::stopping();
    }
}
