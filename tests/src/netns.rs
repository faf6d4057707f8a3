//! Network namespaces for the HA-pair tests: one bridge with four hosts (below),
//! made per test with unique names, and removed (every process in them killed by PID,
//! every namespace deleted) when dropped, also when the test fails.
//!
//! ```text
//!   <tag>a  eth0 10.200.0.11 ─┐
//!   <tag>b  eth0 10.200.0.12 ─┼─ <tag>sw: br0     VIPs 10.200.0.10 (and .9)
//!   <tag>c  eth0 10.200.0.100 ┤  (the client)
//!   <tag>m  eth0 10.200.0.20 ─┘  (broker and backends)
//! ```
//!
//! The addresses exist only inside these namespaces; the root namespace is untouched.
//! Needs root and a kernel with network namespaces: without them the test fails with a
//! message that says so (it never passes silently).

use std::process::{Command, Stdio};

pub const A_IP: &str = "10.200.0.11";
pub const B_IP: &str = "10.200.0.12";
pub const CLIENT_IP: &str = "10.200.0.100";
pub const MQ_IP: &str = "10.200.0.20";
pub const VIP: &str = "10.200.0.10";
pub const VIP2: &str = "10.200.0.9";

/// The namespaces of one test.
pub struct Topology {
    pub tag: String,
}

/// Runs `ip ARGS…`, panicking with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip (apt-get install iproute2)");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Topology {
    /// Creates the five namespaces and the bridge.
    pub fn new() -> Topology {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "ha{}x{}",
            std::process::id() % 100_000,
            N.fetch_add(1, Ordering::Relaxed)
        );
        let probe = Command::new("ip")
            .args(["netns", "add", &format!("{tag}sw")])
            .output();
        match probe {
            Ok(o) if o.status.success() => {}
            Ok(o) => panic!(
                "this test needs root and network namespaces (ip netns add failed: {}); it cannot run here",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => panic!("this test needs iproute2's `ip` (apt-get install iproute2): {e}"),
        }
        let t = Topology { tag };
        let sw = t.ns("sw");
        ip(&["-n", &sw, "link", "set", "lo", "up"]);
        ip(&["-n", &sw, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &sw, "link", "set", "br0", "up"]);
        for (i, (name, addr)) in [("a", A_IP), ("b", B_IP), ("c", CLIENT_IP), ("m", MQ_IP)]
            .iter()
            .enumerate()
        {
            let ns = t.ns(name);
            ip(&["netns", "add", &ns]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
            let port = format!("p{i}");
            ip(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &sw,
            ]);
            ip(&["-n", &sw, "link", "set", &port, "master", "br0"]);
            ip(&["-n", &sw, "link", "set", &port, "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
        }
        t
    }

    /// The full name of namespace `short` (`a`, `b`, `c`, `m`, `sw`).
    pub fn ns(&self, short: &str) -> String {
        format!("{}{short}", self.tag)
    }

    /// A command that runs `program` inside namespace `short`.
    pub fn cmd(&self, short: &str, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(short), program]);
        c
    }

    /// The same for tokio.
    pub fn tokio_cmd(&self, short: &str, program: &str) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("ip");
        c.args(["netns", "exec", &self.ns(short), program]);
        c.kill_on_drop(true);
        c
    }

    /// Runs `sh -c script` in namespace `short`; returns stdout (panics on failure).
    pub fn sh(&self, short: &str, script: &str) -> String {
        let out = self
            .cmd(short, "sh")
            .args(["-c", script])
            .stderr(Stdio::inherit())
            .output()
            .expect("sh");
        assert!(out.status.success(), "in {short}: {script}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Does namespace `short` hold `addr` on eth0?
    pub fn has_addr(&self, short: &str, addr: &str) -> bool {
        let out = Command::new("ip")
            .args(["-n", &self.ns(short), "-br", "addr", "show", "dev", "eth0"])
            .output()
            .expect("ip");
        String::from_utf8_lossy(&out.stdout).contains(&format!("{addr}/"))
    }
}

impl Default for Topology {
    fn default() -> Topology {
        Topology::new()
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for short in ["a", "b", "c", "m", "sw"] {
            let ns = self.ns(short);
            // Only processes inside our own namespaces: ours.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-KILL", pid]).status();
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        for short in ["a", "b", "c", "m", "sw"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(short)])
                .status();
        }
    }
}
