//! Routing events through a real ActiveMQ into the live router.

use std::time::Duration;

use e2e::activemq::ActiveMq;
use e2e::{Backend, TestRouter, events};
use spi_consumer::source::stomp::StompSession;

const QUEUE: &str = "/queue/routinginfo.router-a";

fn spi(amq: &ActiveMq) -> String {
    format!(
        "spi:\n  source: stomp\n  stomp:\n    hosts: [\"{}\"]\n    destination: {QUEUE}\n    heartbeat: 1s\n",
        amq.stomp
    )
}

async fn publisher(amq: &ActiveMq) -> StompSession {
    StompSession::connect(&amq.session_config("/queue/publisher.unused"), 0)
        .await
        .expect("publisher connects")
}

async fn publish(amq: &ActiveMq, bodies: &[String]) {
    let mut p = publisher(amq).await;
    for b in bodies {
        p.publish(QUEUE, b.clone(), Duration::from_secs(10))
            .await
            .expect("publish");
    }
    p.disconnect(Duration::from_secs(10))
        .await
        .expect("disconnect");
}

#[tokio::test]
async fn events_from_activemq_change_what_the_router_serves() {
    let amq = ActiveMq::start();
    let b = Backend::start().await;
    let r = TestRouter::start_with_spi(e2e::tempdir("amq-live"), &spi(&amq), "").await;
    publish(&amq, &[events::add_lb("myapp", "demo", b.addr)]).await;
    r.wait_route("ha-myapp-demo.example.com").await;
    assert_eq!(r.get("ha-myapp-demo.example.com", "/via-amq").await.0, 200);
    assert_eq!(r.metric("spi_broker_connected").await, Some(1.0));
    assert!(r.metric("spi_route_propagation_seconds_count").await >= Some(1.0));
    // A redelivered duplicate changes nothing.
    publish(&amq, &[events::add_lb("myapp", "demo", b.addr)]).await;
    e2e::eventually("duplicate counted", Duration::from_secs(10), async || {
        r.metric("spi_events_total{action=\"add_public_endpoint\",outcome=\"unchanged\"}")
            .await
            == Some(1.0)
    })
    .await;
    // Removal takes effect too: with its only endpoint gone (and no alias) the app
    // is back to "created, nothing announced", which has no route.
    publish(&amq, &[events::remove_endpoint("myapp", "demo", b.addr)]).await;
    e2e::eventually("member removed", Duration::from_secs(10), async || {
        r.get("ha-myapp-demo.example.com", "/").await.0 == 404
    })
    .await;
}

#[tokio::test]
async fn a_poison_message_is_parked_and_the_next_one_still_applies() {
    let amq = ActiveMq::start();
    let b = Backend::start().await;
    let root = e2e::tempdir("amq-poison");
    let r = TestRouter::start_with_spi(root.clone(), &spi(&amq), "").await;
    let poison =
        std::fs::read_to_string(e2e::fixtures().join("92-synthetic-malformed-truncated.yaml"))
            .expect("fixture");
    publish(
        &amq,
        &[
            events::add_lb("first", "demo", b.addr),
            poison.clone(),
            events::add_lb("second", "demo", b.addr),
        ],
    )
    .await;
    r.wait_route("ha-second-demo.example.com").await;
    assert_eq!(r.get("ha-first-demo.example.com", "/").await.0, 200);
    assert_eq!(r.metric("spi_dead_letters_total").await, Some(1.0));
    let parked: Vec<_> = std::fs::read_dir(root.join("state/dead-letters"))
        .expect("dead-letter dir")
        .map(|e| e.expect("entry").path())
        .collect();
    let body = parked
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "yaml"))
        .expect("parked body");
    assert_eq!(
        std::fs::read_to_string(body).expect("body"),
        poison,
        "kept byte for byte"
    );
    assert!(
        parked
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".reason"))
    );
}

/// The router keeps running on its own threads while the broker restarts (the
/// restart blocks only a thread of the blocking pool), so it really is mid-stream:
/// it sees the session die, reconnects, and loses nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_restart_mid_stream_loses_nothing() {
    let mut amq = ActiveMq::start();
    let b = Backend::start().await;
    let r = TestRouter::start_with_spi(e2e::tempdir("amq-restart"), &spi(&amq), "").await;
    let bodies: Vec<String> = (0..20)
        .map(|i| events::add_lb(&format!("app{i}"), "demo", b.addr))
        .collect();
    publish(&amq, &bodies).await;
    e2e::eventually("subscribed", Duration::from_secs(30), async || {
        r.metric("spi_broker_connected").await == Some(1.0)
    })
    .await;
    // Restart at once, with most messages probably still queued, while the router
    // runs: it must notice the broker gone (connected 0) during the restart.
    let restart = tokio::task::spawn_blocking(move || {
        amq.restart();
        amq
    });
    let mut saw_disconnected = false;
    while !restart.is_finished() {
        saw_disconnected |= r.metric("spi_broker_connected").await == Some(0.0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let amq = restart.await.expect("restart");
    assert!(
        saw_disconnected,
        "the router saw the broker go away while it restarted"
    );
    publish(&amq, &[events::add_lb("after", "demo", b.addr)]).await;
    for i in 0..20 {
        r.wait_route(&format!("ha-app{i}-demo.example.com")).await;
    }
    r.wait_route("ha-after-demo.example.com").await;
    assert!(r.metric("spi_broker_reconnects_total").await >= Some(1.0));
}

#[tokio::test]
async fn kill_9_then_restart_serves_at_once_and_loses_nothing() {
    let amq = ActiveMq::start();
    let b = Backend::start().await;
    let dir = e2e::tempdir("amq-kill9");
    let cfg = dir.join("router.yaml");
    std::fs::write(
        &cfg,
        format!(
            "cloud_domain: example.com\nstate_dir: {}/state\nlisten:\n  http: 127.0.0.1:0\n  admin: 127.0.0.1:0\n\
             {}access_log:\n  format: json\n",
            dir.display(),
            spi(&amq)
        ),
    )
    .expect("config");
    let router = e2e::process::RouterProcess::start(&cfg).await;
    publish(&amq, &[events::add_lb("before", "demo", b.addr)]).await;
    e2e::eventually("first route", Duration::from_secs(15), async || {
        router.status("ha-before-demo.example.com", "/").await == Some(200)
    })
    .await;
    router.signal("KILL");
    drop(router);
    // Published while the router is dead.
    publish(&amq, &[events::add_lb("during", "demo", b.addr)]).await;
    let router = e2e::process::RouterProcess::start(&cfg).await;
    // Served from state_dir at once: the very first request after start succeeds.
    assert_eq!(
        router.status("ha-before-demo.example.com", "/").await,
        Some(200)
    );
    // And the event sent while it was down is applied once it reconnects.
    e2e::eventually(
        "missed event applied",
        Duration::from_secs(15),
        async || router.status("ha-during-demo.example.com", "/").await == Some(200),
    )
    .await;
}

#[tokio::test]
async fn replay_and_echo_tools_round_trip_fixtures() {
    let amq = ActiveMq::start();
    let dir = e2e::tempdir("replay");
    let names = [
        "01-create_application.yaml",
        "03-add_public_endpoint-load_balancer.yaml",
        "10-add_ssl-pass_phrase.yaml",
        "92-synthetic-malformed-truncated.yaml",
    ];
    for n in names {
        std::fs::copy(e2e::fixtures().join(n), dir.join(n)).expect("copy fixture");
    }
    let host = amq.stomp.to_string();
    let replay = tokio::process::Command::new(e2e::bin("spi-consumer"))
        .args([
            "replay",
            &dir.display().to_string(),
            "--host",
            &host,
            "--destination",
            "/queue/echo.test",
        ])
        .output()
        .await
        .expect("replay runs");
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    let echo = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(e2e::bin("spi-consumer"))
            .args([
                "echo",
                "--host",
                &host,
                "--destination",
                "/queue/echo.test",
                "--count",
                "4",
            ])
            .output(),
    )
    .await
    .expect("echo exits after 4 messages")
    .expect("echo runs");
    assert!(
        echo.status.success(),
        "{}",
        String::from_utf8_lossy(&echo.stderr)
    );
    let out = String::from_utf8_lossy(&echo.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[0].starts_with("create_application myapp-demo"),
        "{out}"
    );
    assert!(lines[1].contains("10.0.0.11:38032"), "{out}");
    assert!(
        lines[2].contains("add_ssl myapp-demo secure.example.net"),
        "{out}"
    );
    assert!(lines[3].starts_with("undecodable:"), "{out}");
    // Never a secret on screen.
    assert!(
        !out.contains("correct-horse-battery") && !out.contains("PRIVATE KEY"),
        "{out}"
    );
}

#[tokio::test]
async fn router_consumes_over_tls_when_configured() {
    use e2e::pki;
    let dir = e2e::tempdir("router-tls");
    let ca = pki::Ca::new("Routing test CA");
    let amq = ActiveMq::start_tls(e2e::activemq::BrokerTls {
        keystore: pki::pkcs12_keystore(&dir, &ca.leaf(&["127.0.0.1"]), &ca.pem),
        truststore: pki::pkcs12_truststore(&dir, &ca.pem),
    });
    std::fs::write(dir.join("ca.crt"), &ca.pem).expect("ca");
    let (cert, key) = pki::write_leaf(&dir, "router-a", &ca.leaf(&["router-a"]));
    let spi = format!(
        "spi:\n  source: stomp\n  stomp:\n    hosts: [\"{}\"]\n    destination: {QUEUE}\n    tls:\n      ca_file: {}\n      cert_file: {}\n      key_file: {}\n",
        amq.stomp_tls.expect("tls port"),
        dir.join("ca.crt").display(),
        cert.display(),
        key.display()
    );
    let b = Backend::start().await;
    let r = TestRouter::start_with_spi(dir.join("router"), &spi, "").await;
    publish(&amq, &[events::add_lb("secure", "demo", b.addr)]).await;
    r.wait_route("ha-secure-demo.example.com").await;
    assert_eq!(r.get("ha-secure-demo.example.com", "/").await.0, 200);
}

/// A tmpfs mounted for one test, unmounted when dropped (needs root, as CI has).
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(path: &std::path::Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(path).expect("mount point");
        let ok = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(path)
            .status()
            .expect("mount runs")
            .success();
        assert!(ok, "mount tmpfs failed (root needed)");
        SmallDisk(path.to_path_buf())
    }

    /// Writes until the disk is full; returns the filler's path.
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let chunk = vec![0u8; 16 * 1024];
        while f.write_all(&chunk).and_then(|()| f.sync_all()).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test]
async fn a_full_disk_withholds_the_ack_and_the_broker_redelivers() {
    let amq = ActiveMq::start();
    let b = Backend::start().await;
    let root = e2e::tempdir("disk-full");
    let disk = SmallDisk::mount(&root.join("state"), "2m");
    let r = TestRouter::start_with_spi(root.clone(), &spi(&amq), "").await;
    publish(&amq, &[events::add_lb("before", "demo", b.addr)]).await;
    r.wait_route("ha-before-demo.example.com").await;

    let filler = disk.fill();
    // A certificate event (~4.4 KB): more than the free part of the journal's last
    // page, so the append really needs space (tmpfs allocates 4 KiB pages).
    let big = std::fs::read_to_string(e2e::fixtures().join("08-add_ssl.yaml"))
        .expect("fixture")
        .replace(":app_name: myapp", ":app_name: during");
    publish(&amq, &[big]).await;
    e2e::eventually("save failed", Duration::from_secs(20), async || {
        r.metric("spi_persist_failures_total").await >= Some(1.0)
    })
    .await;
    // Not durable, so not live and not acknowledged.
    assert_eq!(r.get("ha-during-demo.example.com", "/").await.0, 404);
    assert!(!r.admin_get("/routes").await.1.contains("during"));

    std::fs::remove_file(filler).expect("free the disk");
    // The broker redelivers the unacknowledged message; now it sticks.
    // (The app has a certificate and no member: known, so 503 rather than 404.)
    e2e::eventually(
        "redelivered and applied",
        Duration::from_secs(60),
        async || r.get("ha-during-demo.example.com", "/").await.0 == 503,
    )
    .await;
    r.stop().await;
    // The journal survived the episode intact: a restart serves both.
    let r = TestRouter::start_with_spi(root, "spi:\n  source: none\n", "").await;
    assert_eq!(r.get("ha-before-demo.example.com", "/").await.0, 200);
    assert_eq!(r.get("ha-during-demo.example.com", "/").await.0, 503);
    assert!(
        r.admin_get("/routes")
            .await
            .1
            .contains("\"www.example.net\""),
        "certificate kept"
    );
    r.stop().await;
    drop(disk);
}
