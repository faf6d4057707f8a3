//! Binary upgrade of the real process under wrk: `router upgrade` takes the
//! listening sockets over from the running router, which drains and exits, with no
//! failed request and no refused connection; events apply in the new process; a
//! successor that goes away before it serves leaves the old one running with its
//! event source.

use std::io::{Read, Write};
use std::time::Duration;

use e2e::process::RouterProcess;
use e2e::{Backend, events};

const HA: &str = "ha-myapp-demo.example.com";

#[tokio::test]
async fn upgrade_under_wrk_drops_nothing_and_a_failed_successor_changes_nothing() {
    let b = Backend::start().await;
    let dir = e2e::tempdir("upgrade");
    let spool = dir.join("spool");
    let cfg = e2e::process::spool_router(
        &dir,
        &events::add_lb("myapp", "demo", b.addr),
        &e2e::process::spool_config(&dir, "127.0.0.1:0", false, ""),
    );
    let mut old = RouterProcess::start(&cfg).await;
    e2e::eventually("routed", Duration::from_secs(10), async || {
        old.status(HA, "/").await == Some(200)
    })
    .await;

    // A second router on the same state directory is refused while one runs.
    let second = std::process::Command::new(e2e::bin("router"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .expect("second router");
    assert!(!second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("another router runs"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );

    // wrk for 6 s, keep-alive, 16 connections; the upgrade happens in the middle.
    let wrk = tokio::process::Command::new("wrk")
        .args(["-t2", "-c16", "-d6s", "-H", &format!("Host: {HA}")])
        .arg(format!("http://{}/", old.http))
        .kill_on_drop(true)
        .output();
    let before = b.proxied();
    let wrk = tokio::spawn(wrk);
    // The upgrade happens under load: once wrk's requests flow.
    e2e::eventually("wrk's load flowing", Duration::from_secs(10), async || {
        b.proxied() >= before + 500
    })
    .await;
    let new = RouterProcess::start_args(&cfg, &["upgrade"]).await;
    assert_eq!(new.http, old.http, "the same socket");
    assert_eq!(new.admin, old.admin);
    let exit = tokio::time::timeout(Duration::from_secs(20), old.child.wait())
        .await
        .expect("the old router drains and exits")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
    let out = wrk.await.expect("join").expect("wrk runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let requests: u64 = text
        .lines()
        .find_map(|l| {
            l.trim()
                .split_once(" requests in ")
                .map(|(n, _)| n.trim().parse().ok())
        })
        .flatten()
        .expect("a request count");
    assert!(requests > 1000, "{text}");
    assert!(
        !text.contains("Socket errors"),
        "errors during the upgrade:\n{text}"
    );
    assert!(
        !text.contains("Non-2xx"),
        "failed requests during the upgrade:\n{text}"
    );
    let drained = old_logs(&mut old).await;
    assert!(drained.contains("the new router serves"), "{drained}");

    // The new process consumes events and answers readiness on the same admin port.
    std::fs::write(
        spool.join("02.yaml"),
        events::add_alias("myapp", "demo", "www.example.org"),
    )
    .expect("event");
    e2e::eventually(
        "event applied by the new router",
        Duration::from_secs(10),
        async || new.status("www.example.org", "/").await == Some(200),
    )
    .await;
    let ready = e2e::raw::exchange(
        new.admin.expect("admin"),
        b"GET /readyz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(e2e::raw::status(&ready), Some(200));

    // A successor that takes the sockets and goes away before READY: the running
    // router keeps serving and starts its event source again.
    let sock = dir.join("state/upgrade.sock");
    let mut s = std::os::unix::net::UnixStream::connect(&sock).expect("upgrade socket");
    s.write_all(b"TAKEOVER 1\n").expect("hello");
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).expect("the listener list");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("\"http\""));
    drop(s);
    std::fs::write(
        spool.join("03.yaml"),
        events::add_alias("myapp", "demo", "www.example.com"),
    )
    .expect("event");
    e2e::eventually("events apply again", Duration::from_secs(10), async || {
        new.status("www.example.com", "/").await == Some(200)
    })
    .await;
    assert_eq!(new.status(HA, "/").await, Some(200));

    // SIGUSR2 (what `systemctl kill -s USR2 router` sends): the router starts its own
    // binary as `upgrade`, which takes over; the old one exits.
    let admin = new.admin.expect("admin");
    let pid_of = async || -> Option<u64> {
        let raw = e2e::raw::exchange(
            admin,
            b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
        .await;
        let text = String::from_utf8_lossy(&raw);
        let body = text.split_once("\r\n\r\n")?.1;
        serde_json::from_str::<serde_json::Value>(body).ok()?["pid"].as_u64()
    };
    let before = pid_of().await.expect("pid");
    new.signal("USR2");
    let mut new = new;
    let exit = tokio::time::timeout(Duration::from_secs(20), new.child.wait())
        .await
        .expect("the signalled router drains and exits")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
    let after = pid_of()
        .await
        .expect("the successor answers on the same admin port");
    assert_ne!(after, before);
    // Not our child: killed by its PID if an assertion below fails.
    let guard = KillOnDrop(Some(after));
    assert_eq!(
        new.status(HA, "/").await,
        Some(200),
        "served by the successor"
    );
    // The successor is not our child: end it by its PID, and wait for the port to close.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &after.to_string()])
        .status();
    e2e::eventually(
        "the successor stopped",
        Duration::from_secs(20),
        async || tokio::net::TcpStream::connect(new.http).await.is_err(),
    )
    .await;
    guard.disarm();
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGKILL to a process this test caused but did not spawn, unless disarmed.
struct KillOnDrop(Option<u64>);

impl KillOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// Every log line the old router wrote, as one string.
async fn old_logs(p: &mut RouterProcess) -> String {
    let mut all = String::new();
    while let Ok(Some(v)) = tokio::time::timeout(Duration::from_millis(200), p.logs.recv()).await {
        all.push_str(&v.to_string());
        all.push('\n');
    }
    all
}

/// `router upgrade` with the HTTP/3 listener: the successor takes the UDP socket
/// over (same port), and an HTTP/3 client (quinn, a GET every 20 ms) that was on
/// the old process keeps getting answers, on a new connection to the new one.
#[tokio::test]
async fn upgrade_hands_the_http3_socket_over_and_http3_clients_carry_on() {
    let b = Backend::start().await;
    let pki = e2e::pki::Wildcard::new("upgrade-h3");
    let dir = pki.dir.join("router");
    let tls = format!(
        "tls:\n  default_cert: {}\n  default_key: {}\n",
        pki.cert.display(),
        pki.key.display()
    );
    let config = e2e::process::spool_config(&dir, "127.0.0.1:0", false, &tls).replace(
        "  admin: 127.0.0.1:0\n",
        "  admin: 127.0.0.1:0\n  https: 127.0.0.1:0\n  http3: 127.0.0.1:0\n",
    );
    let cfg = e2e::process::spool_router(&dir, &events::add_lb("myapp", "demo", b.addr), &config);
    let mut old = RouterProcess::start(&cfg).await;
    let udp = old.http3.expect("the HTTP/3 listener");
    e2e::eventually("routed", Duration::from_secs(10), async || {
        old.status(HA, "/").await == Some(200)
    })
    .await;
    // The port is fixed from here on: the successor reads the same configuration.
    let fixed = std::fs::read_to_string(&cfg)
        .expect("config")
        .replace("  http3: 127.0.0.1:0\n", &format!("  http3: {udp}\n"));
    std::fs::write(&cfg, fixed).expect("config");
    let client = tokio::process::Command::new(e2e::bin("h3-client"))
        .args(["loop", &udp.to_string(), HA])
        .arg(&pki.ca_file)
        .args(["/", "20", "5"])
        .kill_on_drop(true)
        .output();
    let before = b.proxied();
    let client = tokio::spawn(client);
    // The upgrade happens while the client is on the old process: once its
    // requests flow.
    e2e::eventually(
        "HTTP/3 requests flowing",
        Duration::from_secs(10),
        async || b.proxied() >= before + 10,
    )
    .await;
    let new = RouterProcess::start_args(&cfg, &["upgrade"]).await;
    assert_eq!(new.http3, Some(udp), "the same UDP socket");
    let exit = tokio::time::timeout(Duration::from_secs(20), old.child.wait())
        .await
        .expect("the old router drains and exits")
        .expect("wait");
    assert!(exit.success(), "{exit:?}");
    let out = client.await.expect("join").expect("h3-client");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = e2e::h3client::loop_summary(&text, "the upgrade");
    assert!(summary["ok"].as_u64() > Some(100), "{summary}");
    assert!(
        summary["connections"].as_u64() >= Some(2),
        "moved to a new connection: {summary}"
    );
    assert!(
        summary["longest_gap_s"].as_f64() < Some(1.0),
        "HTTP/3 clients carry on within a second: {summary}"
    );
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &new.pid()])
        .status();
}
