//! The Debian packages installed and run under a real systemd as PID 1: a
//! Debian 12 root made by `debootstrap` (cached in `target/nspawn-bookworm`, one
//! minute the first time), booted with `systemd-nspawn --boot` on a private
//! network, the packages installed with `dpkg -i`. Checks that `router.service`
//! starts and answers `/readyz`, reloads on `systemctl reload`, comes back after
//! `kill -9`, and that `dpkg --purge` leaves nothing behind; the same for
//! `portproxy.service`, with a mapping made through its CLI kept across `kill -9`.
//!
//! Found when first run: neither package had ever started. The router's default
//! spool directory did not exist and `ProtectSystem=strict` kept the service from
//! making it; the portproxy's packaged configuration named Simplenetes files no
//! node has, and its admin socket's directory under `/run` was read-only.
//!
//! Needs root, `debootstrap`, `systemd-nspawn` (Debian's `systemd-container`) and
//! `nsenter`; `tests/run.sh` installs them. Without them the test fails and says
//! why: it never passes silently.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn require_root_and_tools() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "this test boots a container: it needs root (tests/run.sh runs as root)"
    );
    for tool in ["debootstrap", "systemd-nspawn", "nsenter", "dpkg-deb"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "{tool} is missing: tests/run.sh installs it (debootstrap, systemd-container, util-linux)"
        );
    }
}

/// A minimal Debian 12 root with systemd, made once and kept in `target/`.
fn bookworm_root() -> PathBuf {
    let base = repo().join("target/nspawn-bookworm");
    let done = base.join(".complete");
    if done.exists() {
        return base;
    }
    let _ = std::fs::remove_dir_all(&base);
    run(Command::new("debootstrap").args([
        "--variant=minbase",
        "--include=systemd,systemd-sysv,dbus,adduser,curl,ca-certificates,procps",
        "bookworm",
        base.to_str().expect("path"),
        "http://deb.debian.org/debian",
    ]));
    std::fs::write(&done, b"").expect("marker");
    base
}

/// A booted container, ended (by PID) when dropped.
struct Container {
    nspawn: Child,
    /// The container's PID 1, as the host sees it.
    leader: u32,
}

impl Container {
    fn boot(root: &Path) -> Container {
        let mut nspawn = Command::new("systemd-nspawn")
            .args([
                "--boot",
                "--register=no",
                "--keep-unit",
                "--private-network",
            ])
            .arg("--directory")
            .arg(root)
            .args(["--machine", &format!("router-test-{}", std::process::id())])
            .args(["--console=pipe"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("systemd-nspawn");
        let pid = nspawn.id();
        // The container's init is nspawn's child, once it has become systemd.
        let leader: u32 = e2e::wait_for(
            "the container's init (systemd, nspawn's child)",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || {
                if let Ok(Some(status)) = nspawn.try_wait() {
                    panic!("systemd-nspawn exited before booting: {status}");
                }
                let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                    .unwrap_or_default();
                let first = children.split_whitespace().next().ok_or("no child yet")?;
                let comm =
                    std::fs::read_to_string(format!("/proc/{first}/comm")).unwrap_or_default();
                match comm.trim() {
                    "systemd" => first.parse().map_err(|e| format!("{first}: {e}")),
                    other => Err(format!("its child is {other:?}")),
                }
            },
        );
        let c = Container { nspawn, leader };
        // Waits for the boot to finish (running, or degraded with a failed unit);
        // until its manager listens, systemctl prints nothing.
        let state = e2e::wait_for(
            "systemctl is-system-running to answer",
            Duration::from_secs(30),
            Duration::from_millis(500),
            || {
                let state = c.sh("systemctl is-system-running --wait 2>/dev/null || true");
                if state.trim().is_empty() {
                    Err("no answer yet".to_string())
                } else {
                    Ok(state)
                }
            },
        );
        assert!(
            state.trim() == "running" || state.trim() == "degraded",
            "boot ended {state:?}"
        );
        c
    }

    /// Runs `script` with `sh -c` inside the container; its stdout (any exit code).
    fn sh(&self, script: &str) -> String {
        let out = Command::new("nsenter")
            .args(["-t", &self.leader.to_string(), "-a", "sh", "-c", script])
            .output()
            .expect("nsenter");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Like [`sh`](Self::sh), and the script must succeed.
    fn ok(&self, script: &str) -> String {
        let out = run(Command::new("nsenter").args([
            "-t",
            &self.leader.to_string(),
            "-a",
            "sh",
            "-c",
            script,
        ]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `script` until its output holds `want` (30 s at most).
    fn until(&self, what: &str, script: &str, want: &str) -> String {
        let (limit, start) = (Duration::from_secs(30), std::time::Instant::now());
        e2e::wait_for(what, limit, Duration::from_millis(100), || {
            let got = self.sh(script);
            if got.contains(want) {
                return Ok(got);
            }
            // Near the end, the unit's own account of why.
            let status = if start.elapsed() + Duration::from_secs(2) > limit {
                self.sh("systemctl status router --no-pager; journalctl -u router --no-pager | tail -20")
            } else {
                String::new()
            };
            Err(format!("`{script}` gave {got:?}, not {want:?}\n{status}"))
        })
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // Killing the container's init ends its PID namespace, every process in it.
        // SAFETY: plain kill(2) on PIDs this test started.
        unsafe {
            libc::kill(self.leader as i32, libc::SIGKILL);
            libc::kill(self.nspawn.id() as i32, libc::SIGKILL);
        }
        let _ = self.nspawn.wait();
    }
}

const READYZ: &str = "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9090/readyz";
const RELOADS: &str =
    "curl -s http://127.0.0.1:9090/metrics | grep '^router_config_reloads_total{result=\"ok\"}'";

#[test]
fn the_packages_run_under_systemd_as_pid_1() {
    require_root_and_tools();
    let base = bookworm_root();
    let dir = e2e::tempdir("nspawn");
    let root = dir.join("root");
    run(Command::new("cp").arg("-a").arg(&base).arg(&root));
    // This build's (debug) binaries, packaged as a release would be.
    let debs = dir.join("debs");
    let out = run(Command::new("bash")
        .arg(repo().join("deploy/package.sh"))
        .args(["--no-build", "--profile", "debug", "--out"])
        .arg(&debs));
    // Not /tmp: the container mounts its own there.
    for name in ["router", "portproxy"] {
        let deb = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains(&format!("/{name}_")))
            .unwrap_or_else(|| panic!("the {name} package"))
            .to_string();
        std::fs::copy(&deb, root.join(format!("root/{name}.deb"))).expect("copy the package");
    }

    let c = Container::boot(&root);
    c.ok("dpkg -i /root/router.deb");
    assert_eq!(c.sh("systemctl is-enabled router").trim(), "enabled");
    c.ok("systemctl start router");
    c.until(
        "router.service active",
        "systemctl is-active router",
        "active",
    );
    c.until("/readyz", READYZ, "200");
    assert_eq!(
        c.sh("cat /run/router-vrrp/state").trim(),
        "0",
        "keepalived's flag"
    );

    // systemctl reload: SIGHUP, the file applied, counted.
    assert!(c.sh(RELOADS).trim().ends_with(" 0"), "{}", c.sh(RELOADS));
    c.ok("systemctl reload router");
    c.until("a reload counted", RELOADS, "} 1");

    // kill -9: systemd starts it again (Restart=on-failure), and it serves.
    let first = c.sh("systemctl show -p MainPID --value router");
    c.ok(&format!("kill -9 {}", first.trim()));
    c.until(
        "restarted once",
        "systemctl show -p NRestarts --value router",
        "1",
    );
    c.until("active again", "systemctl is-active router", "active");
    let second = c.sh("systemctl show -p MainPID --value router");
    assert_ne!(first.trim(), second.trim(), "a new process");
    c.until("/readyz after the restart", READYZ, "200");

    // Purged: no unit, no binary, no configuration, no state, no process.
    c.ok("dpkg --purge router");
    assert_eq!(c.sh("systemctl is-active router").trim(), "inactive");
    let left = c.sh(
        "for p in /usr/bin/router /lib/systemd/system/router.service /etc/router /var/lib/router /var/spool/router; do [ -e $p ] && echo $p; done; pgrep -x router",
    );
    assert_eq!(left.trim(), "", "left behind after purge");

    // The portproxy package: gear mode as shipped, a mapping made with its CLI
    // (over the admin socket in its RuntimeDirectory) kept across kill -9.
    const PP: &str = "portproxy --config /etc/portproxy/portproxy.yaml";
    c.ok("dpkg -i /root/portproxy.deb");
    c.ok("systemctl start portproxy");
    c.until(
        "portproxy.service active",
        "systemctl is-active portproxy",
        "active",
    );
    c.ok(&format!("{PP} add 40000 127.0.0.1:8080"));
    let first = c.sh("systemctl show -p MainPID --value portproxy");
    c.ok(&format!("kill -9 {}", first.trim()));
    c.until(
        "portproxy restarted",
        "systemctl show -p NRestarts --value portproxy",
        "1",
    );
    c.until(
        "portproxy active again",
        "systemctl is-active portproxy",
        "active",
    );
    c.until(
        "the mapping kept",
        &format!("{PP} show"),
        "40000 127.0.0.1:8080",
    );
    c.ok("systemctl reload portproxy");
    c.ok("dpkg --purge portproxy");
    let left = c.sh(
        "for p in /usr/bin/portproxy /etc/portproxy /var/lib/portproxy /run/portproxy; do [ -e $p ] && echo $p; done; pgrep -x portproxy",
    );
    assert_eq!(left.trim(), "", "left behind after purge");
}
