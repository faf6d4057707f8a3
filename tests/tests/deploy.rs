//! The deployment files are real: the alert rules and scrape config pass `promtool`,
//! every metric the rules and the Grafana dashboard use is served by the programs
//! (a router with HTTPS, a routed app, a dead member and a failed handshake; a
//! portproxy; keepalived's notify script), the systemd units pass `systemd-analyze
//! verify`, and `keepalived/gen-config` writes configs keepalived accepts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use e2e::portproxy::PortProxy;
use e2e::{Backend, eventually, tempdir};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tool(name: &str) -> PathBuf {
    ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} is not installed (tests/run.sh installs it)"))
}

/// Metric names (`router_…`, `spi_…`, `portproxy_…`) in `text`, histogram suffixes
/// folded onto their family.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["router_", "spi_", "portproxy_"]
            .iter()
            .any(|p| text[i..].starts_with(p));
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts && boundary {
            let end = text[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(text.len(), |e| i + e);
            let name = &text[i..end];
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name);
            out.insert(family.to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// The per-app alert, by `promtool test rules` over made-up series: it names
/// the one app failing while the others are fine, and stays quiet when every
/// app fails (the router-wide alert says that) and for a quiet app.
#[test]
fn the_app_alert_names_the_failing_app_only_while_the_others_are_fine() {
    let promtool = tool("promtool");
    let rules = repo().join("deploy/prometheus/router-alerts.yml");
    let dir = tempdir("promtest");
    // Per minute: `bad` 60 requests, 30 of them 5xx; `good` 600, none;
    // `quiet` 3, all 5xx (under the rate floor). Then everything fails.
    let series = |app: &str, class: &str, per_min: u32| {
        format!(
            "      - series: 'router_app_requests_total{{app=\"{app}\",class=\"{class}\",instance=\"a\"}}'\n        values: '0+{per_min}x30'\n"
        )
    };
    let mut input = String::new();
    input += &series("bad-ns", "2xx", 30);
    input += &series("bad-ns", "5xx", 30);
    input += &series("good-ns", "2xx", 600);
    input += &series("good-ns", "5xx", 0);
    input += &series("quiet-ns", "5xx", 3);
    input += &series("_other", "2xx", 100);
    let all_fail = format!(
        "{}{}",
        series("bad-ns", "5xx", 60),
        series("good-ns", "5xx", 600)
    );
    let test = format!(
        "rule_files:\n  - {rules}\nevaluation_interval: 1m\ntests:\n\
         \x20 - interval: 1m\n    input_series:\n{input}\
         \x20   alert_rule_test:\n      - eval_time: 20m\n        alertname: RouterAppHigh5xxRatio\n\
         \x20       exp_alerts:\n          - exp_labels: {{ severity: warning, app: bad-ns }}\n\
         \x20           exp_annotations:\n              summary: \"50% of the answers for app bad-ns are 5xx, while the other apps are fine\"\n\
         \x20 - interval: 1m\n    input_series:\n{all_fail}\
         \x20   alert_rule_test:\n      - eval_time: 20m\n        alertname: RouterAppHigh5xxRatio\n        exp_alerts: []\n",
        rules = rules.display()
    );
    std::fs::write(dir.join("app-alert.test.yml"), test).expect("write");
    promtool_passes(
        &promtool,
        &["test", "rules"],
        &dir.join("app-alert.test.yml"),
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `promtool ARGS FILE` succeeds (its output in the failure).
fn promtool_passes(promtool: &std::path::Path, args: &[&str], file: &std::path::Path) {
    let out = Command::new(promtool)
        .args(args)
        .arg(file)
        .output()
        .expect("promtool");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_accepts_the_rules_and_the_scrape_config() {
    let promtool = tool("promtool");
    let rules = repo().join("deploy/prometheus/router-alerts.yml");
    promtool_passes(&promtool, &["check", "rules"], &rules);
    // The scrape config names the rules by their installed path: check a copy that
    // points at the file in the repository.
    let dir = tempdir("promcfg");
    let cfg = std::fs::read_to_string(repo().join("deploy/prometheus/prometheus.yml"))
        .expect("prometheus.yml")
        .replace(
            "/etc/prometheus/rules/router-alerts.yml",
            rules.to_str().expect("path"),
        );
    std::fs::write(dir.join("prometheus.yml"), cfg).expect("write");
    promtool_passes(&promtool, &["check", "config"], &dir.join("prometheus.yml"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn every_metric_of_the_rules_and_the_dashboard_is_served() {
    let dir = tempdir("deploy-metrics");
    // A router with HTTPS and two apps; the second one's member dies after serving.
    let backend = Backend::start().await;
    let doomed = Backend::start().await;
    let dead = doomed.addr;
    let ca = e2e::pki::Ca::new("deploy CA");
    let (cert, key) = e2e::pki::write_leaf(&dir, "site", &ca.leaf(&["ha-app-ns.example.com"]));
    std::fs::create_dir_all(dir.join("spool")).expect("spool");
    std::fs::write(
        dir.join("spool/1.yaml"),
        e2e::events::add_lb("app", "ns", backend.addr),
    )
    .expect("event");
    std::fs::write(
        dir.join("spool/2.yaml"),
        e2e::events::add_lb("dead", "ns", dead),
    )
    .expect("event");
    // An alias whose ACME orders fail (no CA listens there).
    std::fs::write(
        dir.join("spool/3.yaml"),
        e2e::events::add_alias("app", "ns", "shop.example.test"),
    )
    .expect("event");
    // A pair whose peer never answers (router_acme_peer_reachable).
    let token = dir.join("admin.token");
    std::fs::write(&token, "deploy-token").expect("token");
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let config = dir.join("router.yaml");
    std::fs::write(
        &config,
        format!(
            "cloud_domain: example.com\nstate_dir: {d}/state\n\
             listen: {{ http: 127.0.0.1:0, https: 127.0.0.1:0, admin: 127.0.0.1:0 }}\n\
             tls: {{ default_cert: {c}, default_key: {k} }}\n\
             spi: {{ source: spool, spool: {{ path: {d}/spool, interval: 100ms }} }}\n\
             health: {{ interval: 200ms, timeout: 100ms, fall: 2 }}\naccess_log: {{ format: json }}\n\
             worker_threads: 2\n\
             admin: {{ token_file: {d}/admin.token }}\n\
             acme: {{ directory: \"https://127.0.0.1:1/dir\", check_interval: 1s, peer: \"127.0.0.1:1\", node: a, peer_timeout: 1s }}\n\
             app_defaults: {{ acme: true }}\n",
            d = dir.display(),
            c = cert.display(),
            k = key.display()
        ),
    )
    .expect("config");
    let router = e2e::process::RouterProcess::start(&config).await;
    let https = router.https.expect("https");
    // A failed handshake (not TLS at all) and a routed request.
    let _ = e2e::raw::exchange(https, b"GET / HTTP/1.1\r\n\r\n", Duration::from_secs(5)).await;
    eventually("routed", Duration::from_secs(10), async || {
        router.status("ha-app-ns.example.com", "/").await == Some(200)
    })
    .await;
    eventually("second app routed", Duration::from_secs(10), async || {
        router.status("ha-dead-ns.example.com", "/").await == Some(200)
    })
    .await;
    let up = format!("router_backend_up{{backend=\"{dead}\"}}");
    eventually(
        "member up by its checks",
        Duration::from_secs(10),
        async || router.metric(&up).await == Some(1.0),
    )
    .await;
    drop(doomed);
    eventually("dead member ejected", Duration::from_secs(10), async || {
        router
            .metric("router_backend_ejections_total{reason=\"check\"}")
            .await
            >= Some(1.0)
    })
    .await;
    eventually(
        "an ACME order failed",
        Duration::from_secs(10),
        async || {
            router
                .metric("router_acme_order_failures{alias=\"shop.example.test\"}")
                .await
                >= Some(1.0)
        },
    )
    .await;
    eventually(
        "the ACME peer unreachable",
        Duration::from_secs(10),
        async || {
            router
                .metric("router_acme_peer_reachable{peer=\"127.0.0.1:1\"}")
                .await
                == Some(0.0)
        },
    )
    .await;
    let scrape = |addr| async move {
        String::from_utf8_lossy(
            &e2e::raw::exchange(
                addr,
                b"GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n",
                Duration::from_secs(10),
            )
            .await,
        )
        .into_owned()
    };
    let mut served = names_in(&scrape(router.admin.expect("admin")).await);
    // A portproxy.
    let pp_dir = tempdir("deploy-pp");
    let pp = PortProxy::start(&pp_dir, "gear:\n  bind: 127.0.0.1\n  ports: 1024-65535\n").await;
    served.extend(names_in(&scrape(pp.metrics).await));
    pp.stop().await;
    // keepalived's notify script, into a textfile directory.
    let text = dir.join("textfile");
    std::fs::create_dir_all(&text).expect("textfile dir");
    let ok = Command::new(repo().join("keepalived/router-notify"))
        .args(["INSTANCE", "VI_1", "MASTER", "250"])
        .env("ROUTER_VRRP_STATE_DIR", dir.join("vrrp"))
        .env("ROUTER_VRRP_TEXTFILE_DIR", &text)
        .status()
        .expect("router-notify")
        .success();
    assert!(ok);
    let prom = std::fs::read_to_string(text.join("router_vrrp.prom")).expect("textfile");
    assert!(
        prom.contains("router_vrrp_master{vrrp_instance=\"VI_1\"} 1"),
        "{prom}"
    );
    served.extend(names_in(&prom));

    let rules =
        std::fs::read_to_string(repo().join("deploy/prometheus/router-alerts.yml")).expect("rules");
    let dashboard = std::fs::read_to_string(repo().join("deploy/grafana/router-dashboard.json"))
        .expect("dashboard");
    let mut used = names_in(&rules);
    used.extend(names_in(&dashboard));
    assert!(
        used.len() > 30,
        "the rules and dashboard use {} metrics",
        used.len()
    );
    let missing: Vec<&String> = used.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "used by rules/dashboard but not served: {missing:?}"
    );
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&pp_dir);
}

#[test]
fn systemd_units_verify() {
    let analyze = tool("systemd-analyze");
    let dir = tempdir("units");
    for unit in ["router", "portproxy"] {
        // Installed paths replaced by this build's, so verify can check the commands.
        let text = std::fs::read_to_string(repo().join(format!("deploy/systemd/{unit}.service")))
            .expect("unit")
            .replace(
                &format!("/usr/bin/{unit}"),
                e2e::bin(unit).to_str().expect("path"),
            )
            .replace(
                "/usr/lib/router/vrrp-flag",
                repo().join("keepalived/vrrp-flag").to_str().expect("path"),
            );
        assert!(
            text.contains("Type=notify")
                && text.contains("WatchdogSec=")
                && text.contains("CapabilityBoundingSet=CAP_NET_BIND_SERVICE")
        );
        std::fs::write(dir.join(format!("{unit}.service")), text).expect("write");
    }
    let out = Command::new(analyze)
        .arg("verify")
        .arg(dir.join("router.service"))
        .arg(dir.join("portproxy.service"))
        .output()
        .expect("systemd-analyze");
    let err = String::from_utf8_lossy(&out.stderr);
    // Without systemd as PID 1 it still parses every directive; unknown ones are named.
    assert!(
        !err.contains("Unknown key") && !err.contains("Failed to parse"),
        "{err}"
    );
    assert!(
        out.status.success() || err.contains("System has not been booted with systemd"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gen_config_writes_what_keepalived_accepts_in_both_variants() {
    let keepalived = tool("keepalived");
    let dir = tempdir("kagen");
    for extra in [&[][..], &["--vip2", "10.200.0.9/24", "--nopreempt"][..]] {
        let ok = Command::new(repo().join("keepalived/gen-config"))
            .args([
                "--out",
                dir.to_str().expect("path"),
                "--a",
                "ra=10.200.0.11",
                "--b",
                "rb=10.200.0.12",
                "--vip",
                "10.200.0.10/24",
            ])
            .args([
                "--libexec",
                repo().join("keepalived").to_str().expect("path"),
            ])
            .args(extra)
            .status()
            .expect("gen-config")
            .success();
        assert!(ok, "gen-config {extra:?}");
        for name in ["ra", "rb"] {
            let conf = dir.join(format!("{name}.conf"));
            let out = Command::new(&keepalived)
                .arg("-t")
                .arg("-f")
                .arg(&conf)
                .output()
                .expect("keepalived -t");
            assert!(
                out.status.success(),
                "{}: {}",
                conf.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let text = std::fs::read_to_string(&conf).expect("conf");
            assert_eq!(
                text.matches("vrrp_instance").count(),
                if extra.is_empty() { 1 } else { 2 }
            );
            let nopreempt = text
                .lines()
                .any(|l| l.trim_start().starts_with("nopreempt"));
            assert_eq!(nopreempt, !extra.is_empty());
        }
    }
    // Bad input is refused with a usage message, not a half-written config.
    let out = Command::new(repo().join("keepalived/gen-config"))
        .args(["--out", "/tmp/x", "--a", "nobody"])
        .output()
        .expect("gen-config");
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn debian_packages_hold_binaries_units_conffiles_and_create_their_user() {
    let dir = tempdir("debs");
    // Package this build's (debug) binaries; the release flow is the same script.
    let out = Command::new("bash")
        .arg(repo().join("deploy/package.sh"))
        .args([
            "--no-build",
            "--profile",
            "debug",
            "--out",
            dir.to_str().expect("path"),
        ])
        .output()
        .expect("package.sh");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let debs = String::from_utf8_lossy(&out.stdout).into_owned();
    for (name, conf) in [
        ("router", "/etc/router/router.yaml"),
        ("portproxy", "/etc/portproxy/portproxy.yaml"),
    ] {
        let deb = debs
            .lines()
            .find(|l| l.contains(&format!("/{name}_")))
            .unwrap_or_else(|| panic!("no {name} package in {debs}"));
        let info = Command::new("dpkg-deb")
            .args(["-I", deb])
            .output()
            .expect("dpkg-deb");
        let info = String::from_utf8_lossy(&info.stdout);
        assert!(
            info.contains(&format!("Package: {name}")) && info.contains("Depends: adduser"),
            "{info}"
        );
        let files = Command::new("dpkg-deb")
            .args(["-c", deb])
            .output()
            .expect("dpkg-deb");
        let files = String::from_utf8_lossy(&files.stdout);
        for want in [
            format!("./usr/bin/{name}"),
            format!("./lib/systemd/system/{name}.service"),
            format!(".{conf}"),
        ] {
            assert!(files.contains(&want), "{name}: {want} missing in\n{files}");
        }
        if name == "router" {
            for s in [
                "router-check",
                "router-notify",
                "router-handover",
                "vrrp-flag",
                "gen-config",
            ] {
                assert!(
                    files.contains(&format!("./usr/lib/router/{s}")),
                    "{s} missing"
                );
            }
        }
        let ctl = dir.join(format!("{name}-control"));
        let ok = Command::new("dpkg-deb")
            .args(["-e", deb])
            .arg(&ctl)
            .status()
            .expect("dpkg-deb -e")
            .success();
        assert!(ok);
        assert_eq!(
            std::fs::read_to_string(ctl.join("conffiles"))
                .expect("conffiles")
                .trim(),
            conf
        );
        let postinst = std::fs::read_to_string(ctl.join("postinst")).expect("postinst");
        assert!(postinst.contains("adduser --system --group"), "{postinst}");
        let syntax = Command::new("sh")
            .arg("-n")
            .arg(ctl.join("postinst"))
            .status()
            .expect("sh -n")
            .success();
        assert!(syntax, "postinst is valid sh");
        // The binary in the package is stripped.
        let x = dir.join(format!("{name}-root"));
        assert!(
            Command::new("dpkg-deb")
                .args(["-x", deb])
                .arg(&x)
                .status()
                .expect("dpkg-deb -x")
                .success()
        );
        let file = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "od -An -c -N4 {}",
                x.join(format!("usr/bin/{name}")).display()
            ))
            .output()
            .expect("od");
        assert!(String::from_utf8_lossy(&file.stdout).contains("E   L   F"));
        let syms = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "readelf -S {} | grep -c '\\.symtab' || true",
                x.join(format!("usr/bin/{name}")).display()
            ))
            .output()
            .expect("readelf");
        assert_eq!(
            String::from_utf8_lossy(&syms.stdout).trim(),
            "0",
            "{name} is not stripped"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A network namespace of one test (loopback up), deleted when dropped, also when
/// the test fails: fixed ports inside it meet nothing else on the machine.
struct Netns(String);

impl Netns {
    fn new(tag: &str) -> Netns {
        let name = format!("{tag}{}", std::process::id() % 100_000);
        let made = Command::new("ip").args(["netns", "add", &name]).output();
        match made {
            Ok(o) if o.status.success() => {}
            other => panic!(
                "this test needs root and network namespaces (ip netns add: {other:?}); it cannot run here"
            ),
        }
        let ns = Netns(name);
        let up = Command::new("ip")
            .args(["-n", &ns.0, "link", "set", "lo", "up"])
            .status()
            .expect("ip");
        assert!(up.success(), "loopback up in {}", ns.0);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The profile-guided build's training load (`deploy/pgo-train.py`, what
/// `deploy/pgo.sh` runs against the instrumented router) still drives this
/// router: every step of it, at a hundredth of its size, against this build,
/// in a namespace of its own (the script's ports are fixed).
#[test]
fn the_profile_guided_builds_training_load_runs_against_this_router() {
    let ns = Netns::new("pgo");
    let bin = e2e::bin("router");
    let dir = bin.parent().expect("target dir").to_path_buf();
    // Each step of the script has its own deadline; it stops what it started.
    let out = Command::new("ip")
        .args(["netns", "exec", &ns.0, "python3"])
        .arg(repo().join("deploy/pgo-train.py"))
        .arg(&bin)
        .arg(&dir)
        .args(["--scale", "100"])
        .output()
        .expect("python3");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "pgo-train failed:\n{said}");
    // The syslog run makes HTTP/1.1 and h2 requests only.
    for (step, runs) in [
        ("HTTP/1.1 keep-alive", 3),
        ("h2 over TLS", 3),
        ("HTTP/3", 2),
        ("WebSocket tunnels", 2),
        ("routing events", 3),
    ] {
        assert_eq!(
            said.matches(&format!("pgo-train: {step}: ok")).count(),
            runs,
            "{step} in {runs} runs:\n{said}"
        );
    }
    assert!(
        said.contains("pgo-train: syslog lines: "),
        "the syslog run's lines reached the trainer:\n{said}"
    );
}
