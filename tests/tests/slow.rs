//! `slowhttptest` (Debian's package) against the router for 60 s: slow headers
//! (slowloris), slow bodies (R-U-Dead-Yet) and slow reads at once, 1000 connections
//! each from 127.0.0.1, while a probe client on 127.0.0.2 asks for a page every
//! 100 ms on a new connection, with the default configuration. At least 99 % of
//! the probe's requests get 200 within 2 s
//! (what a user on the same router must still see). Each attack is started again whenever the router has closed all its
//! connections, so the pressure lasts the whole minute; the test also checks, from
//! slowhttptest's own statistics, that every attack did connect.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e::{Backend, TestRouter, events};

const HA: &str = "ha-myapp-demo.example.com";
const SECONDS: u64 = 60;
const CONNECTIONS: &str = "1000";

/// One kind of attack, restarted until the deadline; returns the most connections
/// it held at once (from its `-g` CSV: seconds, closed, pending, connected, ...).
async fn attack(
    name: &'static str,
    args: &'static [&'static str],
    proxy: String,
    dir: &Path,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let mut most = 0;
    let mut round = 0;
    while Instant::now() + Duration::from_secs(1) < deadline {
        round += 1;
        let prefix = dir.join(format!("{name}-{round}"));
        let left = deadline
            .saturating_duration_since(Instant::now())
            .as_secs()
            .max(1);
        let status = tokio::process::Command::new("slowhttptest")
            .args(args)
            .args([
                "-d",
                &proxy,
                "-c",
                CONNECTIONS,
                "-r",
                "200",
                "-p",
                "3",
                "-g",
                "-o",
            ])
            .arg(&prefix)
            .args(["-l", &left.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .status()
            .await
            .expect("slowhttptest runs (tests/run.sh installs Debian's slowhttptest)");
        assert!(status.success(), "slowhttptest -{name} failed: {status}");
        let csv = std::fs::read_to_string(prefix.with_extension("csv")).unwrap_or_default();
        for line in csv.lines().skip(1) {
            if let Some(n) = line.split(',').nth(3).and_then(|v| v.trim().parse().ok()) {
                most = u64::max(most, n);
            }
        }
    }
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_bodies_and_readers_for_a_minute_leave_others_served() {
    let b = Backend::start().await;
    let r = TestRouter::start("").await;
    r.drop_event("01.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_route(HA).await;
    let dir = e2e::tempdir("slowhttptest");
    let proxy = r.http.to_string();
    let until = Instant::now() + Duration::from_secs(SECONDS);
    // Through `-d` (the router as an HTTP proxy: absolute-form requests), so that
    // the Host is the app's while the connection goes to the router.
    let (h, bodies, reads, ok_total) = tokio::join!(
        attack(
            "H",
            &[
                "-H",
                "-i",
                "10",
                "-x",
                "24",
                "-t",
                "GET",
                "-u",
                "http://ha-myapp-demo.example.com/"
            ],
            proxy.clone(),
            &dir
        ),
        attack(
            "B",
            &[
                "-B",
                "-i",
                "10",
                "-x",
                "10",
                "-s",
                "8192",
                "-u",
                "http://ha-myapp-demo.example.com/"
            ],
            proxy.clone(),
            &dir
        ),
        // 16 chunks of 64 KiB: a 1 MiB answer read at 5 bytes a second.
        attack(
            "X",
            &[
                "-X",
                "-k",
                "3",
                "-w",
                "1",
                "-y",
                "512",
                "-n",
                "1",
                "-z",
                "5",
                "-u",
                "http://ha-myapp-demo.example.com/stream?chunks=16"
            ],
            proxy.clone(),
            &dir
        ),
        e2e::probe::probe(
            r.http,
            HA,
            "127.0.0.2",
            Duration::from_millis(100),
            Duration::from_secs(2),
            until
        ),
    );
    let (ok, total) = (ok_total.ok, ok_total.total);
    eprintln!("probe {ok}/{total}; most connections held: -H {h}, -B {bodies}, -X {reads}");
    for (name, held) in [("H", h), ("B", bodies), ("X", reads)] {
        assert!(
            held >= 100,
            "slowhttptest -{name} never held many connections ({held})"
        );
    }
    assert!(
        f64::from(ok) >= 0.99 * f64::from(total),
        "probe success {ok}/{total} under slow clients"
    );
    assert!(
        total >= 300,
        "the probe ran the whole minute, unhindered ({total})"
    );
}
