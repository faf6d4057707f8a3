//! The HA pair (see `e2e::hapair`): routing through the VIP, failover on `kill -9`
//! (at most the requests in flight fail) and on a graceful stop and both failbacks
//! (planned moves: none fails), nopreempt, TLS resumption across a failover,
//! active-active, a planned move under keep-alive, h2 and WebSocket load.
//! Real keepalived, ActiveMQ and routers in network namespaces this test creates.

use std::time::{Duration, Instant};

use e2e::hapair::{
    HANDOVER, HOST, NAMES, Pair, download_result, failures, load_report, publish_route,
};
use e2e::netns::{A_IP, B_IP, VIP, VIP2};

#[test]
fn routes_through_the_vip_and_fails_over_on_kill_and_on_graceful_stop() {
    let mut pair = Pair::new(&[]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(15));
    // Both routers applied the event from their own queue: each serves the route.
    for ip in [A_IP, B_IP] {
        pair.wait_served(ip, Duration::from_secs(20));
    }
    assert_eq!(pair.get(VIP), Some(200), "served through the VIP");

    // kill -9 of the active router under a request loop: the VIP moves.
    let (mut poll, log) = pair.poller(VIP, 4.0);
    let pid = pair.router_pid(0);
    let killed = Instant::now();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status();
    let moved = pair.wait_vip(1, VIP, Duration::from_secs(5));
    poll.wait().expect("poller");
    let (failed, gap) = failures(&log);
    eprintln!(
        "kill -9: VIP on router-b after {moved:?}; {failed} failed requests, gap {gap:?} (since kill: {:?})",
        killed.elapsed()
    );
    assert!(moved < Duration::from_secs(2), "VIP moved in {moved:?}");
    // keepalived sees the flag by inotify and sends a priority-0 advert; router-b
    // (priority 249) takes over after its ~3 ms skew.
    assert!(failed <= 3, "{failed} failed requests");

    // Router-a comes back: with preempt (the default) it takes the VIP back,
    // a planned move (keepalived/router-handover): nothing is lost.
    let _ = pair.routers[0].take().map(|mut c| c.wait());
    failback(&mut pair, "the failback after the kill");

    // Graceful stop of the active router: flag first, VIP moves, then the drain;
    // the new holder forwards what is still open on the old one: nothing is lost.
    let (mut poll, log) = pair.poller(VIP, 4.0);
    pair.stop_router(0);
    poll.wait().expect("poller");
    assert!(pair.topo.has_addr("b", VIP));
    let (failed, gap) = failures(&log);
    eprintln!("graceful stop: {failed} failed requests, gap {gap:?}");
    assert_eq!(failed, 0, "failed requests on a graceful stop");
    failback(&mut pair, "the failback after the graceful stop");
}

/// The h2 client's summary ([`Pair::h2_poller`]): it ran, no stream failed on
/// its first try, and it moved to a new connection after a GOAWAY.
fn h2_streams_all_answered(mut h2: std::process::Child, h2_log: &std::path::Path) {
    h2.wait().expect("h2 client");
    let text = std::fs::read_to_string(h2_log).expect("h2 log");
    let summary: serde_json::Value = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["summary"].clone())
        .expect("the h2 client's summary");
    eprintln!("h2 client over TLS: {summary}");
    let failures: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.contains("\"error\"")
                || l.contains("connect_error")
                || (l.contains("\"status\"") && !l.contains("\"status\":200"))
        })
        .collect();
    assert!(
        summary["requests"].as_u64() > Some(500),
        "the h2 client ran: {summary}"
    );
    assert_eq!(
        summary["failed"],
        0,
        "no h2 stream failed on its first try over a planned stop and its failback: {summary}\n{}",
        failures.join("\n")
    );
    assert!(
        summary["connections"].as_u64() >= Some(2),
        "the h2 client moved to a new connection after the leaving router's GOAWAY: {summary}"
    );
}

/// Starts router a again under a request loop through the VIP (a new
/// connection every 20 ms) and waits for its preemption to take the VIP back:
/// a planned move, which fails no request.
fn failback(pair: &mut Pair, what: &str) {
    let (mut poll, log) = pair.poller(VIP, 10.0);
    let started = Instant::now();
    pair.start_router(0);
    let moved = pair.wait_vip(0, VIP, Duration::from_secs(10));
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{what}: the VIP moved while the request loop ran (after {:?})",
        started.elapsed()
    );
    poll.wait().expect("poller");
    let (failed, gap) = failures(&log);
    eprintln!("{what}: VIP back on a after {moved:?}; {failed} failed requests, gap {gap:?}");
    assert_eq!(failed, 0, "failed requests over {what}");
}

/// HTTP/3 through the VIP, the active router killed: the surviving router knows
/// nothing of the client's QUIC connection, but it shares the stateless-reset key
/// (derived from the pair's ticket secret), so its answer to the next packet is a
/// reset the client recognises at once and it reconnects, instead of waiting for
/// its request or idle timeout.
#[test]
fn http3_clients_are_back_within_a_second_after_a_kill() {
    let pair = Pair::new(&[]);
    publish_route(&pair);
    let mut pair = pair;
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(15));
    for ip in [A_IP, B_IP] {
        pair.wait_served(ip, Duration::from_secs(20));
    }
    let (mut client, log) = pair.h3_poller(VIP, 5.0);
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pair.router_pid(0)])
        .status();
    pair.wait_vip(1, VIP, Duration::from_secs(5));
    client.wait().expect("h3-client");
    let text = std::fs::read_to_string(&log).expect("log");
    let summary = e2e::h3client::loop_summary(&text, "kill -9");
    assert_eq!(
        summary["endings"][0], "reset by peer",
        "the old connection ended by the survivor's stateless reset: {summary}"
    );
    assert!(
        summary["connections"].as_u64() >= Some(2),
        "a new connection after the failover: {summary}"
    );
    let gap = summary["longest_gap_s"].as_f64().expect("gap");
    assert!(gap < 1.0, "HTTP/3 clients back within a second: {summary}");
    assert!(
        text.lines().last().is_some_and(|l| l.contains("summary"))
            && text
                .lines()
                .rev()
                .nth(1)
                .is_some_and(|l| l.contains("\"ok\":true")),
        "served at the end"
    );
}

#[test]
fn nopreempt_keeps_the_vip_where_it_is_and_tls_sessions_resume_across_failover() {
    let mut pair = Pair::new(&["--nopreempt"]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    // With nopreempt the first router ready may win the election: either is fine.
    let first = pair.holder(VIP, Duration::from_secs(15));
    let other = 1 - first;
    pair.wait_served(VIP, Duration::from_secs(20));
    // A TLS session from the first router ...
    let sess = pair.dir.join("session.pem");
    let s_client = |extra: &str| {
        pair.topo.sh(
            "c",
            &format!(
                // -ign_eof: s_client reads until the router closes (after its
                // answer, `Connection: close`), session tickets included.
                "printf 'GET / HTTP/1.1\\r\\nHost: {HOST}\\r\\nConnection: close\\r\\n\\r\\n' | \
                 openssl s_client -ign_eof -connect {VIP}:8443 -servername {HOST} -CAfile {} -tls1_3 {extra} 2>&1",
                pair.dir.join("ca.pem").display()
            ),
        )
    };
    let first_session = s_client(&format!("-sess_out {}", sess.display()));
    assert!(
        first_session.contains("Verify return code: 0"),
        "{first_session}"
    );
    // ... the VIP moves (that router killed) ...
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pair.router_pid(first)])
        .status();
    pair.wait_vip(other, VIP, Duration::from_secs(5));
    // ... and the session resumes on the other one (the shared ticket key).
    let second = s_client(&format!("-sess_in {}", sess.display()));
    assert!(
        second.contains("Reused, TLSv1.3"),
        "not resumed on the other router: {second}"
    );

    // nopreempt: the first router back and ready, the VIP stays where it is, even
    // when the returning router has the higher priority.
    let _ = pair.routers[first].take().map(|mut c| c.wait());
    pair.start_router(first);
    // Back from FAULT (its flag 0 again) at its full priority, it has taken three
    // adverts from the holder: with preempt the first of them would have moved
    // the VIP.
    pair.wait_state(first, "BACKUP", Duration::from_secs(10));
    let before = pair.adverts_received(first);
    e2e::wait_for(
        "three adverts from the holder",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || match pair.adverts_received(first) - before {
            n if n >= 3 => Ok(()),
            n => Err(format!("{n} so far")),
        },
    );
    assert!(
        pair.topo.has_addr(NAMES[other], VIP) && !pair.topo.has_addr(NAMES[first], VIP),
        "VIP moved back despite nopreempt"
    );
    assert_eq!(pair.get(VIP), Some(200));
}

#[test]
fn active_active_each_vip_served_and_a_death_moves_only_its_vip() {
    let mut pair = Pair::new(&["--vip2", &format!("{VIP2}/24")]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(15));
    pair.wait_vip(1, VIP2, Duration::from_secs(15));
    for vip in [VIP, VIP2] {
        pair.wait_served(vip, Duration::from_secs(20));
    }
    // router-b dies: its VIP moves to router-a, router-a's VIP stays.
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pair.router_pid(1)])
        .status();
    pair.wait_vip(0, VIP2, Duration::from_secs(5));
    assert!(pair.topo.has_addr("a", VIP), "router-a kept its own VIP");
    assert_eq!(pair.get(VIP), Some(200));
    assert_eq!(pair.get(VIP2), Some(200));
}

/// A planned stop of the VIP holder, then its failback (the recovered router
/// taking the VIP back: preemption on), under eight keep-alive HTTP/1.1 clients
/// and with a 50 MB download in flight at each move: no request fails on its first
/// try and both downloads complete. A WebSocket open on the leaving router keeps
/// echoing until that router's grace ends, which closes it cleanly: never reset. The new holder forwards the old one's open
/// connections for `HANDOVER` (keepalived/router-handover); the old one drains
/// them (SIGTERM on the stop, SIGUSR1 on the failback).
#[test]
fn a_planned_stop_and_its_failback_reset_nothing() {
    const BYTES: u64 = 50 * 1024 * 1024;
    let mut pair = Pair::new(&[]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(15));
    for ip in [A_IP, B_IP, VIP] {
        pair.wait_served(ip, Duration::from_secs(20));
    }
    let (mut load, log) = pair.keepalive_load(VIP, 20.0, 8);
    let (h2, h2_log) = pair.h2_poller(VIP, 20.0);
    let (mut ws, ws_log) = pair.websocket(VIP, 15.0);

    // The planned stop: a download of 2.6 s at 20 MB/s begins, then a leaves.
    let started = Instant::now();
    let download = pair.download(VIP, BYTES, 20_000_000);
    pair.begin_stop(0);
    let moved = started.elapsed() + pair.wait_vip(1, VIP, Duration::from_secs(5));
    let got = download_result(download);
    let took = started.elapsed();
    let _ = pair.routers[0].take().map(|mut c| c.wait());
    eprintln!(
        "planned stop at {:.3}: VIP on b after {moved:?}; the download {got:?} in {took:?}",
        epoch() - took.as_secs_f64()
    );
    assert_eq!(
        got,
        Ok(BYTES),
        "the download in flight at the planned stop completes"
    );
    assert!(
        took > moved,
        "the download was still running when the VIP moved"
    );

    // The failback: a back and ready takes the VIP once its check has passed
    // twice (about 2 s); a download of 4.4 s at 12 MB/s is running on b then.
    pair.start_router(0);
    let started = Instant::now();
    let download = pair.download(VIP, BYTES, 12_000_000);
    let moved = pair.wait_vip(0, VIP, Duration::from_secs(10));
    let got = download_result(download);
    let took = started.elapsed();
    eprintln!(
        "failback at {:.3}: VIP on a after {moved:?}; the download {got:?} in {took:?}",
        epoch() - took.as_secs_f64() + moved.as_secs_f64()
    );
    assert_eq!(
        got,
        Ok(BYTES),
        "the download in flight at the failback completes"
    );
    assert!(
        took > moved,
        "the download was still running when the VIP moved back"
    );
    assert!(
        moved < HANDOVER,
        "the failback came within the forwarding window"
    );

    ws.wait().expect("WebSocket client");
    let ws_end: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(&ws_log)
            .expect("WebSocket log")
            .trim(),
    )
    .expect("the WebSocket client's summary");
    eprintln!("WebSocket open on the leaving router: {ws_end}");
    assert_eq!(
        ws_end["ending"], "closed",
        "a WebSocket on the leaving router is closed at its grace's end, never reset: {ws_end}"
    );
    assert!(
        ws_end["echoed"].as_u64() > Some(100),
        "it kept echoing through the move: {ws_end}"
    );
    load.wait().expect("keep-alive clients");
    let report = load_report(&log);
    eprintln!(
        "keep-alive clients: {} requests, {} failed, longest gap between two answers {:?}",
        report.requests,
        report.failed.len(),
        report.longest_gap
    );
    assert!(
        report.requests > 1000,
        "the clients ran: {}",
        report.requests
    );
    assert!(
        report.failed.is_empty(),
        "no first-try failure over a planned stop and its failback:\n{}",
        report.failed.join("\n")
    );
    h2_streams_all_answered(h2, &h2_log);
}

/// Now in seconds since the epoch, as the clients' logs write it.
fn epoch() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[test]
fn a_binary_upgrade_under_the_supervisor_keeps_the_vip_and_is_followed() {
    let mut pair = Pair::new(&[]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(15));
    pair.wait_served(VIP, Duration::from_secs(20));

    // SIGUSR2: the router starts its own binary as `upgrade`, hands over its
    // sockets and drains. Under a request loop nothing fails and the VIP
    // stays: the supervisor does not take the old process's exit for a death.
    let (mut poll, log) = pair.poller(VIP, 6.0);
    let old = pair.router_pid(0);
    pair.upgrade_router(0);
    assert_ne!(pair.router_pid(0), old);
    poll.wait().expect("poller");
    let (failed, _) = failures(&log);
    assert_eq!(failed, 0, "failed requests during the upgrade");
    assert!(pair.topo.has_addr("a", VIP), "the VIP stayed on router-a");
    assert_eq!(
        std::fs::read_to_string(pair.flag(0))
            .map(|s| s.trim().to_string())
            .ok(),
        Some("0".to_string()),
        "router-a's flag says up after the upgrade"
    );

    // The followed process is the router now: its death is noticed (the flag
    // goes to 1 and the VIP moves), as the first one's would have been.
    pair.kill_router(0);
    let moved = pair.wait_vip(1, VIP, Duration::from_secs(5));
    assert!(
        moved < Duration::from_secs(2),
        "VIP moved in {moved:?} after the upgraded router's kill -9"
    );
}
