//! The `router` binary: configuration checking, SIGTERM, access log.

use std::time::Duration;

use e2e::{Backend, events};

fn write_config(dir: &std::path::Path, extra: &str) -> std::path::PathBuf {
    let path = dir.join("router.yaml");
    std::fs::write(
        &path,
        format!(
            "cloud_domain: example.com\nstate_dir: {d}/state\nlisten:\n  http: 127.0.0.1:0\n  admin: 127.0.0.1:0\n\
             spi:\n  source: spool\n  spool:\n    path: {d}/spool\n    interval: 20ms\n{extra}",
            d = dir.display()
        ),
    )
    .expect("write config");
    path
}

/// A config with `extra` and a spool holding one app whose member is `b`.
fn routed_config(tag: &str, b: &Backend, extra: &str) -> std::path::PathBuf {
    let dir = e2e::tempdir(tag);
    let cfg = write_config(&dir, extra);
    std::fs::create_dir_all(dir.join("spool")).expect("spool");
    std::fs::write(
        dir.join("spool/01.yaml"),
        events::add_lb("myapp", "demo", b.addr),
    )
    .expect("event");
    cfg
}

#[test]
fn check_config_accepts_a_good_file() {
    let dir = e2e::tempdir("cli-good");
    let cfg = write_config(&dir, "");
    let out = std::process::Command::new(e2e::bin("router"))
        .args(["check-config", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_config_names_file_line_and_field() {
    let dir = e2e::tempdir("cli-bad");
    let cfg = write_config(&dir, "upstream:\n  idle_timout: 5s\n");
    let out = std::process::Command::new(e2e::bin("router"))
        .args(["check-config", "--config"])
        .arg(&cfg)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!("{}:12: upstream.idle_timout: unknown field", cfg.display());
    assert!(err.starts_with(&want), "{err}");
    // Running (not just checking) refuses to start the same way.
    let out = std::process::Command::new(e2e::bin("router"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn version_and_help() {
    let out = std::process::Command::new(e2e::bin("router"))
        .arg("--version")
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("router "));
    let out = std::process::Command::new(e2e::bin("router"))
        .arg("--help")
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&out.stdout).contains("check-config"));
}

#[tokio::test]
async fn sigterm_drains_and_access_log_is_json() {
    let b = Backend::start().await;
    let cfg = routed_config(
        "cli-run",
        &b,
        "access_log:\n  format: json\nshutdown_grace: 10s\n",
    );
    let mut router = e2e::process::RouterProcess::start(&cfg).await;
    let http = router.http;
    let host = "ha-myapp-demo.example.com";
    e2e::eventually("route", Duration::from_secs(10), async || {
        e2e::raw::status(
            &e2e::raw::exchange(
                http,
                format!("GET /warm HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
                Duration::from_secs(5),
            )
            .await,
        ) == Some(200)
    })
    .await;
    let slow = tokio::spawn(async move {
        e2e::raw::exchange(
            http,
            format!("GET /slow?ms=800 HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
            Duration::from_secs(20),
        )
        .await
    });
    let before = b.hits();
    e2e::eventually("in flight", Duration::from_secs(10), async || {
        b.hits() > before
    })
    .await;
    router.signal("TERM");
    let resp = slow.await.expect("join");
    assert_eq!(
        e2e::raw::status(&resp),
        Some(200),
        "in-flight request finished after SIGTERM"
    );
    router.exits_cleanly("SIGTERM and draining").await;
    // One access line per request, with the fields operators need.
    let logs = router.rest_of_logs().await;
    let access: Vec<_> = logs.iter().filter(|v| v["target"] == "access").collect();
    let slow_line = access
        .iter()
        .find(|v| v["path"] == "/slow?ms=800")
        .unwrap_or_else(|| panic!("no access line for /slow: {access:?}"));
    assert_eq!(slow_line["status"], 200);
    assert_eq!(slow_line["host"], host);
    assert_eq!(slow_line["method"], "GET");
    assert_eq!(slow_line["client"], "127.0.0.1");
    assert_eq!(slow_line["upstream"], b.addr.to_string());
    assert!(slow_line["bytes"].as_u64() > Some(0));
    assert!(slow_line["duration_ms"].as_f64() >= Some(800.0));
    // The member took 800 ms before its response head: the head's time says so.
    assert!(slow_line["head_ms"].as_f64() >= Some(800.0), "{slow_line}");
    assert!(slow_line["head_ms"].as_f64() <= slow_line["duration_ms"].as_f64());
}

/// Under `ulimit -n 256` with the default `limits.max_connections` (10 000): the
/// router says it lowered the limit to what fits, and when clients take every client
/// slot the admin API still answers and health checks still run (no EMFILE is ever
/// charged to the member: it stays up), and clients are served again once the flood
/// goes.
#[tokio::test]
async fn under_a_low_fd_limit_clients_cannot_starve_admin_or_health_checks() {
    let b = Backend::start().await;
    let cfg = routed_config(
        "cli-nofile",
        &b,
        "access_log:\n  format: json\nhealth:\n  interval: 200ms\n  timeout: 150ms\n  jitter: 10ms\n  fall: 2\n",
    );
    let router = e2e::process::RouterProcess::start_with_nofile(&cfg, 256).await;
    let host = "ha-myapp-demo.example.com";
    e2e::eventually("route", Duration::from_secs(10), async || {
        router.status(host, "/").await == Some(200)
    })
    .await;
    let lowered = router
        .startup
        .iter()
        .find(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.contains("do not fit in the file-descriptor limit"))
        })
        .expect("a warning says the limit was lowered");
    assert_eq!(lowered["nofile"], 256);
    let slots = lowered["effective"].as_u64().expect("effective");
    assert!((1..=128).contains(&slots), "{lowered}");

    // More clients than the process has descriptors: the first `slots` take every
    // client slot, the rest wait in the kernel's backlog (before the limit was sized,
    // accepting them exhausted the descriptors and health checks failed with EMFILE).
    let mut flood = Vec::new();
    for _ in 0..300 {
        flood.push(
            tokio::net::TcpStream::connect(router.http)
                .await
                .expect("the kernel accepts into the backlog"),
        );
    }
    let checks = "router_health_checks_total{result=\"pass\"}";
    let before = router.metric(checks).await.unwrap_or(0.0);
    e2e::eventually("health checks go on", Duration::from_secs(10), async || {
        router.metric(checks).await >= Some(before + 5.0)
    })
    .await;
    let up = format!("router_backend_up{{backend=\"{}\"}}", b.addr);
    assert_eq!(router.metric(&up).await, Some(1.0), "the member stays up");
    assert_eq!(
        router
            .metric("router_health_checks_total{result=\"skipped\"}")
            .await,
        Some(0.0),
        "no check had to be skipped: the reserve held"
    );
    assert_eq!(
        router
            .metric("router_accept_errors_total{listener=\"http\"}")
            .await,
        Some(0.0),
        "the flood waited in the backlog: accept never ran out of descriptors"
    );
    drop(flood);
    e2e::eventually("served again", Duration::from_secs(15), async || {
        router.status(host, "/").await == Some(200)
    })
    .await;
}

/// HTTP/2 rapid reset from 150 connections: the router's h2 server ends each with
/// GOAWAY (ENHANCE_YOUR_CALM) and logs a WARN for it, and those lines are
/// rate-limited (a burst, then a few a second), so an attacker cannot flood the
/// log; the router keeps serving.
#[tokio::test]
async fn log_lines_caused_by_clients_are_rate_limited() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let b = Backend::start().await;
    let cfg = routed_config(
        "cli-loglimit",
        &b,
        "access_log:\n  format: json\n  enabled: false\n",
    );
    let mut router = e2e::process::RouterProcess::start(&cfg).await;
    let host = "ha-myapp-demo.example.com";
    e2e::eventually("route", Duration::from_secs(10), async || {
        router.status(host, "/").await == Some(200)
    })
    .await;
    // Each connection opens and cancels 100 streams at once (HEADERS + RST_STREAM).
    let mut attack =
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00".to_vec();
    for i in 0..100u32 {
        let id = (2 * i + 1).to_be_bytes();
        // :method GET, :scheme http, :path /, :authority "x" (HPACK).
        attack.extend_from_slice(b"\x00\x00\x06\x01\x05");
        attack.extend_from_slice(&id);
        attack.extend_from_slice(b"\x82\x86\x84\x41\x01x");
        attack.extend_from_slice(b"\x00\x00\x04\x03\x00");
        attack.extend_from_slice(&id);
        attack.extend_from_slice(b"\x00\x00\x00\x08");
    }
    let connections = 150;
    for _ in 0..connections {
        let mut s = tokio::net::TcpStream::connect(router.http)
            .await
            .expect("connect");
        s.write_all(&attack).await.expect("write");
        // Until the router's GOAWAY closes it.
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink)).await;
        // GOAWAY (type 7, 8 bytes, stream 0): the last stream, then the code.
        let goaway = sink
            .windows(9)
            .position(|w| w == b"\x00\x00\x08\x07\x00\x00\x00\x00\x00")
            .and_then(|at| sink.get(at + 13..at + 17));
        assert_eq!(
            goaway,
            Some(&[0, 0, 0, 0xb][..]),
            "each rapid-reset connection ends in GOAWAY ENHANCE_YOUR_CALM"
        );
    }
    assert_eq!(router.status(host, "/").await, Some(200), "still serving");
    // Every attacking connection is closed, so its lines are in the log pipe: a
    // reload's line, written after them, marks the end of what to count.
    router.signal("HUP");
    let mut from_h2 = 0;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let v = router.logs.recv().await.expect("router running");
            if v["target"].as_str().is_some_and(|t| t.starts_with("h2")) {
                from_h2 += 1;
            }
            if v["message"]
                .as_str()
                .is_some_and(|m| m.contains("configuration reloaded"))
            {
                break;
            }
        }
    })
    .await
    .expect("the reload's log line");
    assert!(
        from_h2 >= 1,
        "the attack was seen (h2 threw connections out)"
    );
    assert!(
        from_h2 <= 80,
        "{from_h2} h2 log lines for {connections} attacking connections: not rate-limited"
    );
}

/// A token file other users can read is used, and the router says so at start.
#[tokio::test]
async fn a_token_file_readable_by_others_is_warned_about() {
    use std::os::unix::fs::PermissionsExt;
    let b = Backend::start().await;
    let dir = e2e::tempdir("cli-token");
    let token = dir.join("admin.token");
    std::fs::write(&token, "t0ken\n").expect("token");
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let extra = format!("admin:\n  token_file: {}\n", token.display());
    let cfg = e2e::process::spool_router(
        &dir,
        &events::add_lb("myapp", "demo", b.addr),
        &e2e::process::spool_config(&dir, "127.0.0.1:0", false, &extra),
    );
    let router = e2e::process::RouterProcess::start(&cfg).await;
    let warned = router.startup.iter().find(|v| {
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("can be read by other users"))
    });
    let warned = warned.expect("a warning names the readable token file");
    assert_eq!(warned["mode"], "0644");
}
