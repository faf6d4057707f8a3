//! The edge an OpenShift IngressController offers, through the real path: TLS
//! profiles for clients (openssl s_client and testssl.sh see what the profile
//! says) and for members (a real `openssl s_server` member that speaks TLS 1.2
//! only is reached under `intermediate`, refused under `modern`).

use std::path::Path;
use std::time::Duration;

use e2e::pki::Wildcard;
use e2e::{Backend, TestRouter, events};

const HOST: &str = "ha-myapp-demo.example.com";

/// `openssl s_client` to the router's HTTPS port with `args` (a version, a
/// suite): the negotiated `(version, cipher)`, or `None` if the handshake
/// failed.
async fn s_client(https: std::net::SocketAddr, args: &[&str]) -> Option<(String, String)> {
    let out = tokio::process::Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &https.to_string(),
            "-servername",
            HOST,
        ])
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("openssl");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("New, TLS"))?;
    // "New, TLSv1.3, Cipher is TLS_AES_128_GCM_SHA256"
    let (version, cipher) = line.strip_prefix("New, ")?.split_once(", Cipher is ")?;
    Some((version.to_string(), cipher.trim().to_string()))
}

async fn router(pki: &Wildcard, dir: &str, tls_extra: &str) -> TestRouter {
    let root = pki.dir.join(dir);
    let extra = format!("{}{tls_extra}", pki.tls_section());
    let r = TestRouter::start_https(root, &extra).await;
    let b = Backend::start().await;
    r.drop_event("00.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_health(b.addr, "up").await;
    std::mem::forget(b);
    r
}

#[tokio::test]
async fn a_client_side_profile_decides_the_versions_and_suites_offered() {
    let pki = Wildcard::new("profiles");
    // modern: TLS 1.3 only.
    let r = router(&pki, "modern", "  profile: modern\n").await;
    let https = r.https.expect("https");
    assert_eq!(
        s_client(https, &["-tls1_2"]).await,
        None,
        "TLS 1.2 under modern"
    );
    let (v, _) = s_client(https, &["-tls1_3"])
        .await
        .expect("TLS 1.3 under modern");
    assert_eq!(v, "TLSv1.3");
    let out = tokio::process::Command::new("testssl")
        .args([
            "--protocols",
            "--quiet",
            "--color",
            "0",
            "--ip",
            "127.0.0.1",
        ])
        .arg(format!("https://{HOST}:{}/", https.port()))
        .output()
        .await
        .expect("testssl (apt-get install testssl.sh)");
    let report = String::from_utf8_lossy(&out.stdout);
    let line = |v: &str| {
        report
            .lines()
            .find(|l| l.trim_start().starts_with(v))
            .unwrap_or_else(|| panic!("no {v} line: {report}"))
            .to_string()
    };
    assert!(
        line("TLS 1.2").contains("not offered"),
        "{}",
        line("TLS 1.2")
    );
    assert!(
        line("TLS 1.3").contains("offered") && !line("TLS 1.3").contains("not offered"),
        "{}",
        line("TLS 1.3")
    );
    assert!(line("TLS 1.1").contains("not offered") && line("SSLv3").contains("not offered"));

    // custom: one TLS 1.2 suite and one TLS 1.3 suite, by OpenSSL and IANA names.
    let r = router(
        &pki,
        "custom",
        "  profile: custom\n  min_version: \"1.2\"\n  ciphers: [TLS_AES_256_GCM_SHA384, ECDHE-ECDSA-AES256-GCM-SHA384]\n",
    )
    .await;
    let https = r.https.expect("https");
    let got = s_client(
        https,
        &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES256-GCM-SHA384"],
    )
    .await;
    assert_eq!(
        got,
        Some(("TLSv1.2".into(), "ECDHE-ECDSA-AES256-GCM-SHA384".into()))
    );
    assert_eq!(
        s_client(
            https,
            &["-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"]
        )
        .await,
        None
    );
    let got = s_client(
        https,
        &["-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384"],
    )
    .await;
    assert_eq!(
        got,
        Some(("TLSv1.3".into(), "TLS_AES_256_GCM_SHA384".into()))
    );
    assert_eq!(
        s_client(
            https,
            &["-tls1_3", "-ciphersuites", "TLS_AES_128_GCM_SHA256"]
        )
        .await,
        None
    );
}

/// A member that speaks TLS 1.2 only: `openssl s_server -www` (an HTML status
/// page for any GET), on the port it reports.
struct OpensslMember {
    child: tokio::process::Child,
    addr: std::net::SocketAddr,
}

impl OpensslMember {
    async fn start(dir: &Path) -> OpensslMember {
        use tokio::io::AsyncBufReadExt;
        let (cert, key) = (dir.join("member.crt"), dir.join("member.key"));
        let made = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
            ])
            .args(["-days", "1", "-subj", "/CN=member", "-keyout"])
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .expect("openssl req");
        assert!(made.status.success(), "{made:?}");
        let mut child = tokio::process::Command::new("openssl")
            .args([
                "s_server",
                "-accept",
                "127.0.0.1:0",
                "-tls1_2",
                "-www",
                "-cert",
            ])
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("openssl s_server");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let addr = tokio::time::timeout(Duration::from_secs(10), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(a) = line.strip_prefix("ACCEPT ") {
                    return a.parse().ok();
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .expect("s_server reports its port");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        OpensslMember { child, addr }
    }
}

#[tokio::test]
async fn a_member_side_profile_decides_what_members_are_offered() {
    let dir = e2e::tempdir("member-profile");
    std::fs::create_dir_all(&dir).expect("dir");
    let member = OpensslMember::start(&dir).await;
    for (profile, want) in [("intermediate", 200), ("modern", 502)] {
        let root = dir.join(profile);
        let extra = format!(
            "upstream:\n  tls:\n    verify: false\n    profile: {profile}\nhealth:\n  checks: false\n"
        );
        let r = TestRouter::start_in(root, &extra).await;
        r.drop_event("00.yaml", &events::add_tls_lb("myapp", "demo", member.addr));
        r.wait_member(member.addr).await;
        let (status, _) = r.get(HOST, "/").await;
        assert_eq!(
            status, want,
            "a TLS 1.2-only member under upstream.tls.profile {profile}"
        );
    }
    drop(member.child);
}
