//! The edge an OpenShift IngressController offers, through the real path: TLS
//! profiles for clients (openssl s_client and testssl.sh see what the profile
//! says) and for members (a real `openssl s_server` member that speaks TLS 1.2
//! only is reached under `intermediate`, refused under `modern`).

use std::path::Path;
use std::time::Duration;

use e2e::openssl_ca::OpensslCa;
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
            .args(["req", "-x509"])
            .args(e2e::openssl_ca::NEW_EC_KEY)
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

/// curl over HTTPS with the client certificate `stem` (none: without one) and
/// `extra` arguments: the member's echo, or curl's failure.
async fn with_cert(
    https: std::net::SocketAddr,
    (ca, server_ca): (&OpensslCa, &Path),
    stem: Option<&str>,
    extra: &[&str],
) -> Result<e2e::backend::Echo, String> {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sS", "--max-time", "10", "--cacert"])
        .arg(server_ca)
        .args(["--resolve", &format!("{HOST}:{}:127.0.0.1", https.port())])
        .args(extra);
    if let Some(stem) = stem {
        cmd.args([
            "--cert",
            &ca.path(&format!("{stem}.crt")),
            "--key",
            &ca.path(&format!("{stem}.key")),
        ]);
    }
    let out = cmd
        .arg(format!("https://{HOST}:{}/", https.port()))
        .output()
        .await
        .expect("curl");
    if !out.status.success() {
        return Err(format!(
            "{} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(e2e::backend::Echo::parse(&out.stdout))
}

#[tokio::test]
async fn client_certificates_are_verified_revoked_by_crl_matched_and_passed_to_members() {
    let pki = Wildcard::new("client-certs");
    let ca = OpensslCa::new(&pki.dir, "Partner CA");
    let good = ca.issue("partner.example.com");
    let revoked = ca.issue("partner-old.example.com");
    let late = ca.issue("partner-late.example.com");
    let stranger = ca.issue("stranger.example.org");
    ca.revoke(&revoked);
    let tls = format!(
        "  client_certificates:\n    mode: required\n    ca_file: {}\n    crl_files: [{}]\n    allowed_subjects: [\"^/CN=partner[-a-z]*\\\\.example\\\\.com$\"]\n",
        ca.path("ca.crt"),
        ca.path("ca.crl")
    );
    let r = router(&pki, "required", &tls).await;
    let https = r.https.expect("https");
    let both = (&ca, pki.ca_file.as_path());

    // A valid certificate: served, and the member told what it was (never
    // what the client claims).
    let echo = with_cert(
        https,
        both,
        Some(&good),
        &[
            "-H",
            "X-SSL-Client-Verify: FORGED",
            "-H",
            "X-SSL-Client-DN: /CN=admin",
        ],
    )
    .await
    .expect("a valid certificate is served");
    assert_eq!(echo.all("x-ssl-client-verify"), ["SUCCESS"], "{echo:?}");
    assert_eq!(
        echo.all("x-ssl-client-dn"),
        ["/CN=partner.example.com"],
        "{echo:?}"
    );
    let der = std::process::Command::new("openssl")
        .args([
            "x509",
            "-outform",
            "der",
            "-in",
            &ca.path(&format!("{good}.crt")),
        ])
        .output()
        .expect("openssl x509");
    use base64ct::Encoding as _;
    assert_eq!(
        echo.header("x-ssl-client-cert"),
        Some(base64ct::Base64::encode_string(&der.stdout).as_str())
    );
    // Over h2 too.
    let echo = with_cert(https, both, Some(&good), &["--http2"])
        .await
        .expect("h2");
    assert_eq!(echo.header("x-ssl-client-verify"), Some("SUCCESS"));

    // Refused in the handshake: no certificate, a revoked one, a subject no
    // pattern allows.
    for (stem, why) in [
        (None, "none"),
        (Some(revoked.as_str()), "revoked"),
        (Some(stranger.as_str()), "subject"),
    ] {
        let got = with_cert(https, both, stem, &[]).await;
        assert!(got.is_err(), "{why}: served {got:?}");
    }

    // A revocation published while the router runs applies without a restart.
    assert!(
        with_cert(https, both, Some(&late), &[]).await.is_ok(),
        "late is valid first"
    );
    ca.revoke(&late);
    e2e::eventually(
        "the new CRL is read (every 10 s)",
        Duration::from_secs(30),
        async || with_cert(https, both, Some(&late), &[]).await.is_err(),
    )
    .await;
    assert!(
        with_cert(https, both, Some(&good), &[]).await.is_ok(),
        "the others still pass"
    );

    // Optional: without a certificate served, the member told NONE (not the
    // client's own claim).
    let tls = format!(
        "  client_certificates:\n    mode: optional\n    ca_file: {}\n",
        ca.path("ca.crt")
    );
    let r = router(&pki, "optional", &tls).await;
    let https = r.https.expect("https");
    let echo = with_cert(
        https,
        both,
        None,
        &[
            "-H",
            "X-SSL-Client-Verify: SUCCESS",
            "-H",
            "X-SSL-Client-Cert: Zm9yZ2Vk",
        ],
    )
    .await
    .expect("optional, without a certificate");
    assert_eq!(echo.all("x-ssl-client-verify"), ["NONE"], "{echo:?}");
    assert!(echo.all("x-ssl-client-cert").is_empty(), "{echo:?}");
    let echo = with_cert(https, both, Some(&good), &[])
        .await
        .expect("optional, with one");
    assert_eq!(echo.header("x-ssl-client-verify"), Some("SUCCESS"));
}

/// curl over HTTPS to `name` (its SNI and URL), with `host` as the Host (or
/// :authority) when given, the client certificate `stem` when given, over h2
/// or HTTP/1.1: the status and body, or curl's failure (a failed handshake).
async fn curl_name(
    https: std::net::SocketAddr,
    (ca, server_ca): (&OpensslCa, &Path),
    (name, host): (&str, Option<&str>),
    stem: Option<&str>,
    h2: bool,
) -> Result<(u16, String), String> {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code}",
        "--cacert",
    ])
    .arg(server_ca)
    .args(["--resolve", &format!("{name}:{}:127.0.0.1", https.port())])
    .arg(if h2 { "--http2" } else { "--http1.1" });
    if let Some(host) = host {
        cmd.args(["-H", &format!("Host: {host}")]);
    }
    if let Some(stem) = stem {
        let (crt, key) = (
            ca.path(&format!("{stem}.crt")),
            ca.path(&format!("{stem}.key")),
        );
        cmd.args(["--cert", &crt, "--key", &key]);
    }
    let out = cmd
        .arg(format!("https://{name}:{}/", https.port()))
        .output()
        .await
        .expect("curl");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    Ok((code.parse().unwrap_or(0), body.to_string()))
}

#[tokio::test]
async fn a_name_with_a_client_certificate_policy_of_its_own_asks_for_one_and_is_not_reached_past_it()
 {
    const PARTNER: &str = "partner.example.com";
    let pki = Wildcard::new("client-by-name");
    let ca = OpensslCa::new(&pki.dir, "Partner CA");
    let good = ca.issue(PARTNER);
    let tls = format!(
        "  client_certificates_by_name:\n    {PARTNER}:\n      mode: required\n      ca_file: {}\n",
        ca.path("ca.crt")
    );
    let r = router(&pki, "by-name", &tls).await;
    r.drop_event("01.yaml", &events::add_alias("myapp", "demo", PARTNER));
    r.wait_route(PARTNER).await;
    let https = r.https.expect("https");
    let both = (&ca, pki.ca_file.as_path());

    // The other names keep the router-wide policy (none here): no certificate
    // asked for, none claimed to the member.
    let (status, body) = curl_name(https, both, (HOST, None), None, true)
        .await
        .expect("a name without a policy of its own");
    assert_eq!(status, 200, "{body}");
    assert!(
        e2e::backend::Echo::parse(body.as_bytes())
            .all("x-ssl-client-verify")
            .is_empty(),
        "{body}"
    );

    // The partner's name: no certificate, no handshake; with one, served and
    // the member told.
    let refused = curl_name(https, both, (PARTNER, None), None, true).await;
    assert!(
        refused.is_err(),
        "a handshake without a certificate for {PARTNER}: {refused:?}"
    );
    let (status, body) = curl_name(https, both, (PARTNER, None), Some(&good), true)
        .await
        .expect("the partner with its certificate");
    assert_eq!(status, 200, "{body}");
    let echo = e2e::backend::Echo::parse(body.as_bytes());
    assert_eq!(echo.all("x-ssl-client-verify"), ["SUCCESS"], "{echo:?}");
    assert_eq!(
        echo.all("x-ssl-client-dn"),
        [format!("/CN={PARTNER}")],
        "{echo:?}"
    );

    // A connection made for another name (no certificate asked) carrying a
    // request for the partner's: 421, over h2 (coalescing) and HTTP/1.1.
    for h2 in [true, false] {
        let (status, _) = curl_name(https, both, (HOST, Some(PARTNER)), None, h2)
            .await
            .expect("the handshake for HOST");
        assert_eq!(
            status, 421,
            "a request for {PARTNER} past its policy (h2: {h2})"
        );
    }
}

/// curl to `url` from the loopback address `from`: status and the member's echo.
async fn curl_from(
    from: &str,
    url: &str,
    ca: &Path,
    extra: &[&str],
) -> Result<(u16, String), String> {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--interface", from, "--cacert"])
        .arg(ca)
        .args(["-H", &format!("Host: {HOST}"), "-w", "\n%{http_code}"])
        .args(extra)
        .arg(url)
        .output()
        .await
        .expect("curl");
    if !out.status.success() {
        return Err(format!(
            "{} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", ""));
    Ok((code.parse().unwrap_or(0), body.to_string()))
}

#[tokio::test]
async fn a_real_haproxy_in_front_sends_proxy_v2_and_its_clients_are_the_clients() {
    let pki = Wildcard::new("proxy-in");
    let root = pki.dir.join("router");
    let extra = format!(
        "{}proxy_protocol:\n  trusted: [127.0.0.1]\n",
        pki.tls_section()
    );
    let r = TestRouter::start_https(root, &extra).await;
    let b = Backend::start().await;
    r.drop_event("00.yaml", &events::add_lb("myapp", "demo", b.addr));
    r.wait_health(b.addr, "up").await;
    let https = r.https.expect("https");
    // haproxy in tcp mode in front of both listeners, from 127.0.0.1, PROXY v2.
    let (plain_port, tls_port) = (
        e2e::free_port("127.0.0.1".parse().expect("ip")),
        e2e::free_port("127.0.0.1".parse().expect("ip")),
    );
    let cfg = pki.dir.join("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 100\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n  timeout server 10s\n\
             listen plain\n  bind 127.0.0.1:{plain_port}\n  server r {} send-proxy-v2 source 127.0.0.1\n\
             listen tls\n  bind 127.0.0.1:{tls_port}\n  server r {https} send-proxy-v2 source 127.0.0.1\n",
            r.http
        ),
    )
    .expect("cfg");
    let mut haproxy = tokio::process::Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&cfg)
        .kill_on_drop(true)
        .spawn()
        .expect("haproxy (apt-get install haproxy)");
    let plain_url = format!("http://127.0.0.1:{plain_port}/");
    let tls_url = format!("https://{HOST}:{tls_port}/");
    let resolve = format!("{HOST}:{tls_port}:127.0.0.1");
    let ca = pki.ca_file.as_path();
    e2e::eventually("haproxy forwards", Duration::from_secs(10), async || {
        curl_from("127.0.0.2", &plain_url, ca, &[])
            .await
            .is_ok_and(|(s, _)| s == 200)
    })
    .await;

    // Each client is itself: in X-Forwarded-For, over plain HTTP and HTTPS.
    for from in ["127.0.0.2", "127.0.0.3"] {
        let (s, body) = curl_from(from, &plain_url, ca, &[]).await.expect("plain");
        assert_eq!(s, 200);
        let echo = e2e::backend::Echo::parse(body.as_bytes());
        assert_eq!(
            echo.header("x-forwarded-for"),
            Some(from),
            "plain from {from}: {echo:?}"
        );
        let (s, body) = curl_from(from, &tls_url, ca, &["--resolve", &resolve])
            .await
            .expect("tls");
        assert_eq!(s, 200);
        let echo = e2e::backend::Echo::parse(body.as_bytes());
        assert_eq!(
            echo.header("x-forwarded-for"),
            Some(from),
            "https from {from}"
        );
        assert_eq!(echo.header("x-forwarded-proto"), Some("https"));
    }
    // An app's deny list sees the client, not haproxy.
    let (s, text) = r
        .admin_call(
            "PUT",
            "/apps/myapp-demo/settings",
            r#"{"deny": ["127.0.0.3"]}"#,
            None,
        )
        .await;
    assert_eq!(s, 200, "{text}");
    assert_eq!(
        curl_from("127.0.0.3", &plain_url, ca, &[])
            .await
            .map(|r| r.0),
        Ok(403)
    );
    assert_eq!(
        curl_from("127.0.0.2", &plain_url, ca, &[])
            .await
            .map(|r| r.0),
        Ok(200)
    );

    // A forged header from an address not trusted is not believed: its bytes
    // are a malformed request (400), and the member never sees 10.9.9.9.
    let router_http = r.http;
    let forged = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        socket
            .bind(
                &"127.0.0.5:0"
                    .parse::<std::net::SocketAddr>()
                    .expect("addr")
                    .into(),
            )
            .expect("bind");
        socket.connect(&router_http.into()).expect("connect");
        let mut s: std::net::TcpStream = socket.into();
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        s.write_all(
            format!(
                "PROXY TCP4 10.9.9.9 127.0.0.1 1234 80\r\nGET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n"
            )
            .as_bytes(),
        )
        .expect("write");
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    })
    .await
    .expect("forged");
    assert!(forged.starts_with("HTTP/1.1 400"), "{forged}");
    // The trusted address without a header: closed, never answered; counted.
    let direct = curl_from("127.0.0.1", &format!("http://{}/", r.http), ca, &[]).await;
    assert!(
        direct.is_err(),
        "a trusted source without a header was served: {direct:?}"
    );
    let refused = r
        .metric_sum(
            "router_connections_refused_total",
            &[("reason", "proxy_header")],
        )
        .await;
    assert!(refused >= 1.0, "counted: {refused}");
    let _ = haproxy.kill().await;
}

/// A real rsyslogd (Debian's) in the foreground, receiving on a UDP and a TCP
/// port of loopback and writing each message's tag and text to a file.
struct Rsyslog {
    child: tokio::process::Child,
    udp: u16,
    tcp: u16,
    out: std::path::PathBuf,
}

impl Rsyslog {
    async fn start(dir: &Path) -> Rsyslog {
        let dir = dir.join("rsyslog");
        std::fs::create_dir_all(&dir).expect("dir");
        let ip: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
        let (udp, tcp) = (e2e::free_port(ip), e2e::free_port(ip));
        let out = dir.join("out.log");
        let conf = dir.join("rsyslog.conf");
        std::fs::write(
            &conf,
            format!(
                "global(workDirectory=\"{d}\")\nmodule(load=\"imuxsock\" SysSock.Use=\"off\")\ninput(type=\"imuxsock\" Socket=\"{d}/log.sock\")\n\
                 module(load=\"imudp\")\ninput(type=\"imudp\" address=\"127.0.0.1\" port=\"{udp}\")\n\
                 module(load=\"imtcp\")\ninput(type=\"imtcp\" address=\"127.0.0.1\" port=\"{tcp}\")\n\
                 template(name=\"raw\" type=\"string\" string=\"%syslogtag%|%msg%\\n\")\n\
                 *.* action(type=\"omfile\" file=\"{o}\" template=\"raw\")\n",
                d = dir.display(),
                o = out.display()
            ),
        )
        .expect("conf");
        let child = tokio::process::Command::new("rsyslogd")
            .args(["-n", "-f"])
            .arg(&conf)
            .arg("-i")
            .arg(dir.join("pid"))
            .kill_on_drop(true)
            .spawn()
            .expect("rsyslogd (apt-get install rsyslog)");
        e2e::eventually(
            "rsyslog listening on TCP",
            Duration::from_secs(10),
            async || tokio::net::TcpStream::connect((ip, tcp)).await.is_ok(),
        )
        .await;
        Rsyslog {
            child,
            udp,
            tcp,
            out,
        }
    }

    /// Waits for a line containing `want`; the line.
    async fn line(&self, want: &str) -> String {
        let mut found = String::new();
        e2e::eventually(
            &format!("rsyslog wrote a line with {want:?}"),
            Duration::from_secs(10),
            async || {
                let text = std::fs::read_to_string(&self.out).unwrap_or_default();
                match text.lines().find(|l| l.contains(want)) {
                    Some(l) => {
                        found = l.to_string();
                        true
                    }
                    None => false,
                }
            },
        )
        .await;
        found
    }
}

#[tokio::test]
async fn access_lines_reach_rsyslog_in_the_operators_template_and_a_dead_sink_slows_nothing() {
    let dir = e2e::tempdir("syslog");
    std::fs::create_dir_all(&dir).expect("dir");
    let syslog = Rsyslog::start(&dir).await;
    // 1. RFC 5424 over UDP, a template of our own with captures.
    let extra = format!(
        "access_log:\n  syslog: {{address: \"udp://127.0.0.1:{}\", tag: edge}}\n  \
         template: \"%{{client_ip}} %{{method}} %{{path}} %{{status}} app=%{{app}} ua=%{{req.user-agent}} sid=%{{cookie.session}} ct=%{{res.content-type}} id=%{{request_id}}\"\n  \
         capture: {{request: [User-Agent], response: [Content-Type], cookies: [session], length: 12}}\n",
        syslog.udp
    );
    let (r, _b) = TestRouter::with_backend(&extra).await;
    let out = tokio::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-A",
            "curl-syslog-test/1.0",
            "-b",
            "a=1; session=abc123",
        ])
        .args(["-H", &format!("Host: {HOST}")])
        .arg(format!("http://{}/hello?x=1", r.http))
        .output()
        .await
        .expect("curl");
    assert!(out.status.success());
    let line = syslog.line("/hello?x=1").await;
    assert!(line.starts_with("edge["), "the tag: {line}");
    assert!(
        line.contains("127.0.0.1 GET /hello?x=1 200 app=myapp-demo ua=curl-syslog- sid=abc123 ct=application/ id="),
        "{line}"
    );

    // 2. RFC 3164 over TCP, the httplog preset: what haproxy log parsers read.
    let extra = format!(
        "access_log:\n  syslog: {{address: \"tcp://127.0.0.1:{}\", protocol: rfc3164}}\n  template: httplog\n",
        syslog.tcp
    );
    let (r2, _b2) = TestRouter::with_backend(&extra).await;
    let _ = r2.get(HOST, "/httplog-check").await;
    let line = syslog.line("/httplog-check").await;
    let msg = line.split_once('|').map_or("", |(_, m)| m).trim();
    let httplog = regex::Regex::new(
        r#"^\d+\.\d+\.\d+\.\d+:\d+ \[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2}\.\d{3}\] \S+ \S+/\S+ \d+/\d+/\d+/\d+/\d+ \d{3} \d+ - - ---- \d+/\d+/\d+/\d+/\d+ \d+/\d+ "GET /httplog-check HTTP/1\.1"$"#,
    )
    .expect("regex");
    assert!(httplog.is_match(msg), "not an httplog line: {msg:?}");

    // 3. A unix datagram socket (as /dev/log is), RFC 3164.
    let sock = dir.join("rsyslog/log.sock");
    let extra = format!(
        "access_log:\n  syslog: {{address: \"unix://{}\", protocol: rfc3164, tag: viasock}}\n  template: \"%{{path}} %{{status}}\"\n",
        sock.display()
    );
    let (r4, _b4) = TestRouter::with_backend(&extra).await;
    let _ = r4.get(HOST, "/over-unix").await;
    let line = syslog.line("/over-unix 200").await;
    assert!(line.starts_with("viasock["), "{line}");

    // 4. A dead sink (nothing listens) and a queue of one: every request is
    // served, the lines are dropped and counted.
    let refusing = e2e::Refusing::new();
    let dead = refusing.addr;
    let extra = format!("access_log:\n  syslog: {{address: \"tcp://{dead}\", queue: 1}}\n");
    let (r3, _b3) = TestRouter::with_backend(&extra).await;
    let statuses = r3.get_n(HOST, 50).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let dropped = r3.metric_sum("router_access_log_dropped_total", &[]).await;
    assert!(dropped >= 1.0, "dropped lines counted: {dropped}");
    drop(syslog.child);
}

/// `access_log.stderr: false` with a syslog sink: the access lines go to
/// syslog only, the router's stderr carries none of them; with the default
/// (`true`) to both. The `router` binary as a process, its stderr read line by
/// line.
#[tokio::test]
async fn with_stderr_off_access_lines_go_to_syslog_only() {
    let dir = e2e::tempdir("syslog-only");
    std::fs::create_dir_all(&dir).expect("dir");
    let syslog = Rsyslog::start(&dir).await;
    let b = Backend::start().await;
    for stderr in [false, true] {
        let sub = dir.join(format!("stderr-{stderr}"));
        let config = format!(
            "cloud_domain: example.com\nstate_dir: {d}/state\n\
             listen:\n  http: 127.0.0.1:0\n  admin: 127.0.0.1:0\n\
             spi: {{ source: spool, spool: {{ path: {d}/spool, interval: 100ms }} }}\n\
             access_log:\n  format: json\n  stderr: {stderr}\n  \
             syslog: {{address: \"udp://127.0.0.1:{udp}\", tag: only}}\n  \
             template: \"only-{stderr} %{{path}} %{{status}}\"\n",
            d = sub.display(),
            udp = syslog.udp,
        );
        let event = events::add_lb("myapp", "demo", b.addr);
        let cfg = e2e::process::spool_router(&sub, &event, &config);
        let mut router = e2e::process::RouterProcess::start(&cfg).await;
        let http = router.http;
        e2e::eventually("route", Duration::from_secs(10), async || {
            let head = format!("GET /only HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n");
            let answer = e2e::raw::exchange(http, head.as_bytes(), Duration::from_secs(5)).await;
            e2e::raw::status(&answer) == Some(200)
        })
        .await;
        syslog.line(&format!("only-{stderr} /only 200")).await;
        router.signal("TERM");
        router.exits_cleanly("SIGTERM").await;
        let logs = router.rest_of_logs().await;
        let access: Vec<_> = logs
            .iter()
            .filter(|v| v["target"] == "access" && v["path"] == "/only")
            .collect();
        assert_eq!(
            !access.is_empty(),
            stderr,
            "access_log.stderr: {stderr}, yet the router's stderr had these access lines: {access:?}"
        );
    }
    drop(syslog.child);
}
