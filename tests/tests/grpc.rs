//! gRPC end to end: a real gRPC server and client (Debian's
//! `python3-grpcio`, `tests/grpc/echo.py`) through the router, to an app whose
//! members speak h2 (`members_protocol: h2`): unary, server, client and
//! bidirectional streaming, an error status with trailing metadata, and a deadline,
//! through the plain listener (h2 prior knowledge) and the HTTPS one (ALPN h2), to a
//! plain member (h2c) and a TLS one (ALPN h2). Without the setting the same calls
//! fail: the member would get HTTP/1.1.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use e2e::pki::Wildcard;
use e2e::{TestRouter, events};
use tokio::io::AsyncBufReadExt;

const APP_HOST: &str = "ha-grpc-demo.example.com";
/// Debian's interpreter, where `python3-grpcio` is (tests/run.sh installs it).
const PYTHON: &str = "/usr/bin/python3";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("grpc/echo.py")
}

/// The gRPC member, killed when dropped, and the port it reported.
struct Member {
    child: tokio::process::Child,
    port: u16,
}

impl Member {
    async fn start(tls: Option<(&Path, &Path)>) -> Member {
        let mut cmd = tokio::process::Command::new(PYTHON);
        cmd.arg(script()).arg("serve");
        if let Some((cert, key)) = tls {
            cmd.arg(cert).arg(key);
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 (apt-get install python3-grpcio)");
        let out = child.stdout.take().expect("stdout");
        let mut line = String::new();
        tokio::io::BufReader::new(out)
            .read_line(&mut line)
            .await
            .expect("the member's port");
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                panic!("no port from echo.py: {line:?} (is python3-grpcio installed?)")
            });
        Member { child, port }
    }

    fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Every call through `addr` (TLS when `ca` is given): echo.py's JSON.
async fn calls(addr: std::net::SocketAddr, ca: Option<&Path>) -> serde_json::Value {
    let mut cmd = tokio::process::Command::new(PYTHON);
    cmd.arg(script())
        .args(["call", &addr.to_string(), APP_HOST]);
    if let Some(ca) = ca {
        cmd.arg(ca);
    }
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("the calls end")
        .expect("python3");
    assert!(
        out.status.success(),
        "echo.py call failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from echo.py")
}

fn assert_all_passed(v: &serde_json::Value) {
    assert_eq!(v["unary"], "olleh", "{v}");
    assert_eq!(v["unary_trailer"], "echo", "trailing metadata: {v}");
    assert_eq!(
        v["server_stream"],
        serde_json::json!(["part-0", "part-1", "part-2", "part-3", "part-4"])
    );
    assert_eq!(v["client_stream"], "a|b|c");
    assert_eq!(v["bidi"], serde_json::json!(["X", "Y"]));
    assert_eq!(
        v["fail"],
        serde_json::json!(["NOT_FOUND", "nothing called gizmo", "no-such-thing"]),
        "an error status with its details and trailing metadata"
    );
    assert_eq!(v["deadline"], "DEADLINE_EXCEEDED");
}

async fn set_h2(r: &TestRouter) {
    r.set_members_h2("grpc-demo").await;
}

#[tokio::test]
async fn grpc_calls_pass_through_both_listeners_to_an_h2c_member() {
    let pki = Wildcard::new("grpc");
    let (dir, ca_file, tls) = (&pki.dir, &pki.ca_file, pki.tls_section());
    let member = Member::start(None).await;
    let r = TestRouter::start_https(dir.join("router"), &tls).await;
    r.drop_event("01.yaml", &events::add_lb("grpc", "demo", member.addr()));
    r.wait_member(member.addr()).await;

    // HTTP/1.1 to the member (the default): gRPC cannot pass.
    let mut cmd = tokio::process::Command::new(PYTHON);
    let out = cmd
        .arg(script())
        .args(["call", &r.http.to_string(), APP_HOST])
        .output()
        .await
        .expect("python3");
    assert!(
        !out.status.success(),
        "without h2 to the member, the calls fail"
    );

    set_h2(&r).await;
    assert_all_passed(&calls(r.http, None).await);
    // An HTTP/1.1 client reaches the h2 member too: one unary call framed by hand
    // (a 5-byte gRPC message header, then the message), sent by curl.
    let frame = dir.join("frame.bin");
    std::fs::write(&frame, b"\x00\x00\x00\x00\x05hello").expect("frame");
    let out = tokio::process::Command::new("curl")
        .args(["-s", "--http1.1", "-H", &format!("Host: {APP_HOST}")])
        .args(["-H", "Content-Type: application/grpc", "-H", "TE: trailers"])
        .arg("--data-binary")
        .arg(format!("@{}", frame.display()))
        .arg(format!("http://{}/test.Echo/Unary", r.http))
        .output()
        .await
        .expect("curl");
    assert_eq!(out.stdout, b"\x00\x00\x00\x00\x05olleh", "{out:?}");
    let https = r.https.expect("https listener");
    assert_all_passed(&calls(https, Some(ca_file)).await);
    // The member's slots are all back (the deadline's stream was reset, not leaked).
    e2e::eventually(
        "no request in flight",
        std::time::Duration::from_secs(10),
        async || {
            r.backend_state(member.addr())
                .await
                .and_then(|s| s["in_flight"].as_u64())
                == Some(0)
        },
    )
    .await;
}

#[tokio::test]
async fn grpc_calls_reach_a_tls_member_over_alpn_h2() {
    let pki = Wildcard::new("grpc-tls");
    let (dir, ca_file) = (&pki.dir, &pki.ca_file);
    let member = Member::start(Some((&pki.cert, &pki.key))).await;
    let extra = format!("upstream:\n  tls:\n    ca_file: {}\n", ca_file.display());
    let r = TestRouter::start_in(dir.join("router"), &extra).await;
    r.drop_event(
        "01.yaml",
        &events::add_tls_lb("grpc", "demo", member.addr()),
    );
    r.wait_member(member.addr()).await;
    set_h2(&r).await;
    assert_all_passed(&calls(r.http, None).await);
}
