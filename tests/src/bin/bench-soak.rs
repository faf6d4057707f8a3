//! `bench-soak [MINUTES] [FAULT_EVERY_SECONDS]`: the HA pair (e2e::hapair: real
//! keepalived, ActiveMQ, routers under their supervisor, in network namespaces)
//! under steady mixed load for MINUTES (20), with a fault every
//! FAULT_EVERY_SECONDS (120), and what it holds minute by minute.
//!
//! Load through the VIP for the whole run: 8 keep-alive HTTP/1.1 clients (a GET
//! every 20 ms each), a WebSocket (a message every 20 ms), an h2 client over TLS
//! and an HTTP/3 one (a GET every 20 ms each, new connections and TLS handshakes
//! after every move), a latency probe (a GET every 50 ms), and routing events at
//! 100 a second (an alias of 199 added or removed in turn, over the broker: an
//! uneven count, so the aliases left at the end are most of them, not none). Faults in turn, on
//! whichever router holds the VIP: `kill -9` of the router, a planned stop (the
//! supervisor's SIGTERM: flag, drain) and start, a broker restart, the member
//! killed (back after 3 s), the holder's link down for 10 s, a binary upgrade
//! (SIGUSR2: the router starts its own binary as `upgrade`, hands its sockets
//! over and drains; the supervisor follows the new process by its `Router-Pid`).
//! Each minute: both routers' RSS and open descriptors, the probe's p99 and its
//! errors.
//!
//! Asserted at the end: every event applied on both routers (the aliases there
//! are what the events leave), no failed request during a planned move (the
//! keep-alive clients and the probe, which never retry), and each router's RSS
//! and descriptors within 10 % of minute five (a router restarted or upgraded
//! since is measured as it runs now). Planned moves, whose requests must not
//! fail: the planned stop and the upgrade. Run as root:
//! `bash bench/soak.sh [MINUTES]`.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::hapair::{HOST, NAMES, Pair, publish_route, repo};
use e2e::netns::{MQ_IP, VIP};

#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill,
    Planned,
    Broker,
    Member,
    LinkDown,
    Upgrade,
}

const FAULTS: [Fault; 6] = [
    Fault::Kill,
    Fault::Planned,
    Fault::Broker,
    Fault::Member,
    Fault::LinkDown,
    Fault::Upgrade,
];

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// One router's RSS (KiB) and open descriptors.
type Footprint = (u64, usize);

/// One router's RSS (KiB) and open descriptors now.
fn footprint(pair: &Pair, i: usize) -> Footprint {
    let pid = pair.router_pid(i);
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss, fds)
}

/// A script of bench/ in namespace `ns` with `args`.
fn script(pair: &Pair, ns: &str, name: &str, args: &[String]) -> Child {
    pair.topo
        .cmd(ns, "python3")
        .arg(repo().join("bench").join(name))
        .args(args)
        .spawn()
        .expect(name)
}

/// The probe's lines from `from` to `to`: p99 latency (ms) and errors.
fn probe_window(log: &Path, from: f64, to: f64) -> (f64, usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut ms = Vec::new();
    let mut errors = 0;
    for l in text.lines() {
        let mut f = l.split(' ');
        let (Some(t), Some(lat), Some(status)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let Ok(t) = t.parse::<f64>() else { continue };
        if t < from || t >= to {
            continue;
        }
        ms.push(lat.parse::<f64>().unwrap_or(f64::NAN));
        errors += usize::from(status != "200");
    }
    ms.sort_by(|a, b| a.total_cmp(b));
    let p99 = ms
        .get(((ms.len() as f64 - 1.0) * 0.99).round() as usize)
        .copied()
        .unwrap_or(f64::NAN);
    (p99, errors, ms.len())
}

/// Failed first tries in a `start_ts ... status` log (the status last) within
/// any of `windows`.
fn failed_within(log: &Path, windows: &[(f64, f64)]) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| !l.ends_with(" 200"))
        .filter(|l| {
            let t: f64 = l
                .split(' ')
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0.0);
            windows.iter().any(|(a, b)| t >= *a && t < *b)
        })
        .map(str::to_string)
        .collect()
}

/// Applies `fault` to whichever router holds the VIP and restores it; for a
/// planned move, the window in which no request may fail.
fn apply(pair: &mut Pair, fault: Fault) -> Option<(f64, f64)> {
    let h = pair.holder(VIP, Duration::from_secs(30));
    let other = 1 - h;
    let t = now();
    match fault {
        Fault::Kill => {
            pair.kill_router(h);
            pair.wait_vip(other, VIP, Duration::from_secs(10));
            let _ = pair.routers[h].take().map(|mut c| c.wait());
            pair.start_router(h);
        }
        Fault::Planned => {
            pair.stop_router(h);
            pair.start_router(h);
        }
        Fault::Broker => pair.restart_broker(),
        Fault::Member => pair.restart_backend(Duration::from_secs(3)),
        Fault::LinkDown => {
            let ns = pair.topo.ns(NAMES[h]);
            e2e::netns::ip(&["-n", &ns, "link", "set", "eth0", "down"]);
            std::thread::sleep(Duration::from_secs(10));
            e2e::netns::ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        }
        Fault::Upgrade => pair.upgrade_router(h),
    }
    pair.wait_vip(0, VIP, Duration::from_secs(30));
    pair.wait_served(VIP, Duration::from_secs(30));
    matches!(fault, Fault::Planned | Fault::Upgrade).then(|| (t, now() + 5.0))
}

/// The aliases router `i` serves for the soak's app.
fn aliases(pair: &Pair, i: usize) -> Vec<String> {
    let out = pair
        .topo
        .cmd(NAMES[i], "curl")
        .args(["-s", "-m", "5", "http://127.0.0.1:9090/routes"])
        .output()
        .expect("curl");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let mut out: Vec<String> = v["apps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["name"] == "app")
        .flat_map(|a| a["aliases"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .filter(|a| a.starts_with("soak-"))
        .collect();
    out.sort();
    out
}

fn main() {
    let (minutes, every) = (arg(1, 20), arg(2, 120));
    let mut pair = Pair::new(&[]);
    publish_route(&pair);
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    pair.wait_vip(0, VIP, Duration::from_secs(20));
    pair.wait_served(VIP, Duration::from_secs(30));
    let secs = (minutes * 60) as f64;
    let load = secs + 20.0;
    let (ka, ka_log) = pair.keepalive_load(VIP, load, 8);
    let (ws, ws_log) = pair.websocket(VIP, load);
    let (h2, h2_log) = pair.h2_poller(VIP, load);
    let (h3, h3_log) = pair.h3_poller(VIP, load);
    let probe_log = pair.dir.join("probe.log");
    let events_log = pair.dir.join("events.json");
    let path = |p: &Path| p.display().to_string();
    let probe = script(
        &pair,
        "c",
        "soak_probe.py",
        &[VIP.into(), load.to_string(), path(&probe_log), HOST.into()],
    );
    let events = script(
        &pair,
        "m",
        "soak_events.py",
        &[
            MQ_IP.into(),
            secs.to_string(),
            "100".into(),
            path(&events_log),
            "app".into(),
            "ns".into(),
            "199".into(),
        ],
    );
    let start = Instant::now();
    let t0 = now();
    let mut planned = Vec::new();
    let mut samples = Vec::new();
    let mut next_fault = Duration::from_secs(every / 2);
    println!(
        "minute  fault        rss a / b (KiB)      fds a / b   probe p99 ms  errors / requests"
    );
    for minute in 1..=minutes {
        let mut fault_here = String::new();
        while start.elapsed() < Duration::from_secs(minute * 60) {
            if start.elapsed() >= next_fault {
                let fault = FAULTS[(next_fault.as_secs() / every.max(1)) as usize % FAULTS.len()];
                fault_here = format!("{fault:?}");
                planned.extend(apply(&mut pair, fault));
                next_fault += Duration::from_secs(every);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let (a, b) = (footprint(&pair, 0), footprint(&pair, 1));
        let from = t0 + ((minute - 1) * 60) as f64;
        let (p99, errors, n) = probe_window(&probe_log, from, from + 60.0);
        println!(
            "{minute:>6}  {fault_here:<10} {:>9} / {:<9} {:>5} / {:<5} {p99:>12.1}  {errors} / {n}",
            a.0, b.0, a.1, b.1
        );
        samples.push((a, b));
    }
    let _ = events.wait_with_output();
    for c in [ka, ws, h2, h3, probe] {
        let _ = c.wait_with_output();
    }
    check(
        &pair,
        &samples,
        &planned,
        [&ka_log, &probe_log, &ws_log, &h2_log, &h3_log],
        &events_log,
    );
}

/// The soak's assertions (see the module doc), each printed met / NOT MET.
fn check(
    pair: &Pair,
    samples: &[(Footprint, Footprint)],
    planned: &[(f64, f64)],
    [ka_log, probe_log, ..]: [&Path; 5],
    events_log: &Path,
) {
    let sent: serde_json::Value =
        serde_json::from_slice(&std::fs::read(events_log).unwrap_or_default()).unwrap_or_default();
    let want: Vec<String> = sent["present"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let settled = (0..60).any(|_| {
        std::thread::sleep(Duration::from_secs(1));
        (0..2).all(|i| aliases(pair, i) == want)
    });
    let mut ok = true;
    let mut verdict = |what: String, met: bool| {
        println!("{what}: {}", if met { "met" } else { "NOT MET" });
        ok &= met;
    };
    verdict(
        format!(
            "events: {} sent ({} resent after a broker restart), {} aliases left; both routers serve exactly those",
            sent["sent"],
            sent["retries"],
            want.len()
        ),
        settled,
    );
    let failed: Vec<String> = [ka_log, probe_log]
        .iter()
        .flat_map(|l| failed_within(l, planned))
        .collect();
    verdict(
        format!(
            "planned moves: {} failed first tries ({failed:?})",
            failed.len()
        ),
        failed.is_empty(),
    );
    if let (Some(five), Some(end)) = (samples.get(4), samples.last()) {
        for (i, (at5, atend)) in [(five.0, end.0), (five.1, end.1)].into_iter().enumerate() {
            let within = |a: f64, b: f64| b <= a * 1.1;
            verdict(
                format!(
                    "router-{}: RSS {} -> {} KiB, descriptors {} -> {} (minute 5 -> end, within 10 %)",
                    NAMES[i], at5.0, atend.0, at5.1, atend.1
                ),
                within(at5.0 as f64, atend.0 as f64) && within(at5.1 as f64, atend.1 as f64),
            );
        }
    }
    if !ok {
        std::process::exit(1);
    }
}
