//! Response compression (`compression:`, an app's `compression` setting),
//! through the real binary with real clients: curl (gzip, brotli, zstd, each
//! decoded by curl itself) and Python's own gzip reader. Bodies decode to the
//! member's bytes; what is already encoded, short, a range or not text passes
//! untouched; a 100 MB streamed response is compressed without the router's
//! memory growing past its bound; one client holds at most its share of the
//! streams being compressed.

use std::process::Stdio;
use std::time::Duration;

use e2e::Backend;
use e2e::backend::page_bytes;
use e2e::process::RouterProcess;

const HOST: &str = "ha-myapp-demo.example.com";
const ON: &str = "app_defaults:\n  compression: true\n";

/// `curl` for `path` with `fields`: the response's head (lower-case names)
/// and its body, decoded by curl when `decode`.
async fn curl(
    r: &RouterProcess,
    path: &str,
    fields: &[&str],
    decode: bool,
) -> (Vec<(String, String)>, Vec<u8>) {
    let dir = e2e::tempdir("curl");
    let head = dir.join("head");
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-s", "--max-time", "60", "-D"])
        .arg(&head)
        .args(["-H", &format!("Host: {HOST}")]);
    for f in fields {
        cmd.args(["-H", f]);
    }
    if decode {
        cmd.arg("--compressed");
    }
    let out = cmd
        .arg(format!("http://{}{path}", r.http))
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("curl runs");
    assert!(out.status.success(), "curl {path}: {:?}", out.status);
    let head = std::fs::read_to_string(head).expect("head");
    let fields = head
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (fields, out.stdout)
}

/// What Debian's Python printed running `script` (which must succeed).
async fn python(script: &str) -> Vec<u8> {
    let out = tokio::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .output()
        .await
        .expect("python runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn each_coding_the_client_asks_for_decodes_to_the_members_bytes() {
    let b = Backend::start().await;
    let r = RouterProcess::one_app("compress-codings", &b, ON).await;
    let page = page_bytes(0, 200_000);
    for (asked, coding) in [
        ("gzip", Some("gzip")),
        ("br", Some("br")),
        ("zstd", Some("zstd")),
        ("gzip, deflate, br, zstd", Some("zstd")),
        ("gzip;q=1.0, br;q=0.5", Some("gzip")),
        ("identity", None),
        ("br;q=0, gzip;q=0", None),
    ] {
        let ae = format!("Accept-Encoding: {asked}");
        let (fields, body) = curl(&r, "/page?bytes=200000", &[&ae], true).await;
        assert_eq!(
            field(&fields, "content-encoding"),
            coding,
            "{asked}: {fields:?}"
        );
        assert_eq!(field(&fields, "vary"), Some("Accept-Encoding"), "{asked}");
        assert!(
            body == page,
            "{asked}: {} bytes decoded, not the member's 200000",
            body.len()
        );
        if coding.is_some() {
            assert_eq!(
                field(&fields, "content-length"),
                None,
                "{asked}: the length is the stream's"
            );
            let (_, raw) = curl(&r, "/page?bytes=200000", &[&ae], false).await;
            assert!(
                raw.len() < page.len() / 3,
                "{asked}: {} bytes on the wire",
                raw.len()
            );
        }
    }
    // Python's own HTTP client and gzip reader.
    let script = format!(
        "import gzip, urllib.request\n\
         req = urllib.request.Request('http://{}/page?bytes=200000', headers={{'Host': '{HOST}', 'Accept-Encoding': 'gzip'}})\n\
         r = urllib.request.urlopen(req, timeout=30)\n\
         assert r.headers['Content-Encoding'] == 'gzip', dict(r.headers)\n\
         import sys; sys.stdout.buffer.write(gzip.decompress(r.read()))\n",
        r.http
    );
    let out = python(&script).await;
    assert!(out == page, "python: {} bytes decoded", out.len());
}

#[tokio::test]
async fn encoded_short_ranged_head_and_binary_responses_pass_untouched() {
    let b = Backend::start().await;
    let r = RouterProcess::one_app("compress-untouched", &b, ON).await;
    let gzip = "Accept-Encoding: gzip, br, zstd";
    // Already encoded by the member: its bytes and its coding, as they were.
    let (fields, body) = curl(&r, "/page?bytes=5000&encoding=br", &[gzip], false).await;
    assert_eq!(field(&fields, "content-encoding"), Some("br"));
    assert!(
        body == page_bytes(0, 5000),
        "the member's encoded bytes untouched"
    );
    for (path, extra, why) in [
        ("/page?bytes=500", None, "shorter than min_length"),
        (
            "/page?bytes=5000&type=image%2Fpng",
            None,
            "not a compressible type",
        ),
        (
            "/page?bytes=5000",
            Some("Range: bytes=0-99"),
            "a range asked",
        ),
    ] {
        let fields_sent: Vec<&str> = [Some(gzip), extra].into_iter().flatten().collect();
        let (fields, body) = curl(&r, path, &fields_sent, false).await;
        assert_eq!(
            field(&fields, "content-encoding"),
            None,
            "{why}: {fields:?}"
        );
        let len = body.len();
        assert!(
            body == page_bytes(0, len) && len > 0,
            "{why}: the member's bytes"
        );
    }
    // HEAD: the head as it was, no coding.
    let (fields, _) = curl(&r, "/page?bytes=5000", &[gzip], false).await;
    assert!(
        field(&fields, "content-encoding").is_some(),
        "GET is compressed"
    );
    let dir = e2e::tempdir("head");
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-I", "-H", &format!("Host: {HOST}"), "-H", gzip])
        .arg(format!("http://{}/page?bytes=5000", r.http))
        .current_dir(&dir)
        .output()
        .await
        .expect("curl -I");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(!head.contains("content-encoding"), "HEAD: {head}");
    // An app without it: nothing compressed, no Vary added.
    let b2 = Backend::start().await;
    let off = RouterProcess::one_app("compress-off", &b2, "").await;
    let (fields, _) = curl(&off, "/page?bytes=200000", &[gzip], false).await;
    assert_eq!(field(&fields, "content-encoding"), None);
    assert_eq!(field(&fields, "vary"), None);
    // Turned on for the app alone through the admin API: compressed at once.
    let body = r#"{"compression": true}"#;
    let put = format!(
        "PUT /apps/myapp-demo/settings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let admin = off.admin.expect("admin");
    let answer = e2e::raw::exchange(admin, put.as_bytes(), Duration::from_secs(10)).await;
    assert_eq!(
        e2e::raw::status(&answer),
        Some(200),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let (fields, body) = curl(&off, "/page?bytes=200000", &[gzip], true).await;
    assert_eq!(
        field(&fields, "content-encoding"),
        Some("zstd"),
        "the app's own setting"
    );
    assert!(
        body == page_bytes(0, 200_000),
        "decoded to the member's bytes"
    );
}

/// The router's resident memory (`VmRSS`), in KiB.
fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_100_mb_stream_is_compressed_within_the_routers_memory_bound() {
    let b = Backend::start().await;
    let r = RouterProcess::one_app("compress-stream", &b, ON).await;
    let pid = r.pid();
    let before = rss_kib(&pid);
    // The highest RSS seen while the stream runs, sampled every 20 ms.
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(before));
    let sampler = {
        let (pid, peak) = (pid.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(&pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // 1600 chunks of 64 KiB (100 MiB) of text, decoded by Python as it comes.
    let script = format!(
        "import urllib.request, zlib\n\
         req = urllib.request.Request('http://{}/stream?chunks=1600&type=text%2Fplain', headers={{'Host': '{HOST}', 'Accept-Encoding': 'gzip'}})\n\
         r = urllib.request.urlopen(req, timeout=120)\n\
         assert r.headers['Content-Encoding'] == 'gzip', dict(r.headers)\n\
         d = zlib.decompressobj(16 + zlib.MAX_WBITS)\n\
         wire = plain = 0\n\
         while True:\n\
         \x20   c = r.read(65536)\n\
         \x20   if not c: break\n\
         \x20   wire += len(c); plain += len(d.decompress(c))\n\
         plain += len(d.flush())\n\
         print(wire, plain)\n",
        r.http
    );
    let out = python(&script).await;
    let text = String::from_utf8_lossy(&out);
    let mut n = text
        .split_whitespace()
        .map(|v| v.parse::<u64>().expect("a count"));
    let (wire, plain) = (n.next().expect("wire"), n.next().expect("plain"));
    assert_eq!(plain, 1600 * 65536, "every byte of the member's, decoded");
    assert!(wire < plain / 2, "compressed on the wire: {wire}");
    sampler.abort();
    let peak = peak
        .load(std::sync::atomic::Ordering::Relaxed)
        .max(rss_kib(&pid));
    eprintln!("router RSS before {before} KiB, at most {peak} KiB while streaming");
    assert!(
        peak < before + 32 * 1024,
        "the router held the stream: RSS {before} -> {peak} KiB"
    );
}

/// One client holds at most `compression.max_streams_per_client` streams being
/// compressed: its third concurrent download (none of them read past the head)
/// goes uncompressed and is counted, while another client's is compressed.
#[tokio::test]
async fn one_client_holds_at_most_its_share_of_the_compressed_streams() {
    let b = Backend::start().await;
    let config = format!("{ON}compression:\n  max_streams_per_client: 2\n");
    let r = RouterProcess::one_app("compress-share", &b, &config).await;
    let (host, port) = (r.http.ip(), r.http.port());
    // Each from its source address; every socket is kept open (unread) until
    // the script ends, so the streams stay in flight.
    let script = format!(
        "import socket\n\
         held = []\n\
         def head(src):\n\
         \x20   s = socket.create_connection(('{host}', {port}), source_address=(src, 0))\n\
         \x20   s.sendall(b'GET /stream?chunks=1600&type=text%2Fplain HTTP/1.1\\r\\nHost: {HOST}\\r\\nAccept-Encoding: gzip\\r\\n\\r\\n')\n\
         \x20   buf = b''\n\
         \x20   while b'\\r\\n\\r\\n' not in buf:\n\
         \x20       c = s.recv(4096)\n\
         \x20       assert c, buf\n\
         \x20       buf += c\n\
         \x20   held.append(s)\n\
         \x20   return 'gzip' if b'content-encoding: gzip' in buf.split(b'\\r\\n\\r\\n')[0].lower() else 'plain'\n\
         print(' '.join(head(src) for src in ['127.0.0.1', '127.0.0.1', '127.0.0.1', '127.0.0.2']))\n"
    );
    let out = python(&script).await;
    assert_eq!(
        String::from_utf8_lossy(&out).trim(),
        "gzip gzip plain gzip",
        "the first client's third stream is past its share; the other client's is not"
    );
    assert_eq!(
        r.metric("router_compression_over_client_share_total").await,
        Some(1.0)
    );
}
