//! The codec against real HTTP/2 clients (curl, h2load and nghttp, all on
//! nghttp2): `examples/toy.rs`'s server, on this process's runtime, answers
//! GETs, a megabyte through a 64 KiB window, and a 300 KB upload through
//! one. Needs `curl` and Debian's `nghttp2-client` (`tests/run.sh`
//! installs them); a missing one fails the test, naming it.

use std::process::Command;

#[allow(dead_code)]
#[path = "../examples/toy.rs"]
mod toy;

/// The toy server on a port of its own, served from a runtime thread.
fn server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(toy::serve(stream));
            }
        });
    });
    port
}

/// `program`'s output, or a failure naming what is missing.
fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} cannot run ({e}): install curl and nghttp2-client"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn curl_gets_and_uploads() {
    let base = format!("http://127.0.0.1:{}", server());
    let got = run(
        "curl",
        &["-s", "--http2-prior-knowledge", &format!("{base}/abc")],
    );
    assert_eq!(got, "hello /abc");
    let big = run(
        "curl",
        &["-s", "--http2-prior-knowledge", &format!("{base}/big")],
    );
    assert_eq!(big.len(), 1 << 20);
    let file = std::env::temp_dir().join(format!("h2-codec-upload-{}", std::process::id()));
    std::fs::write(&file, vec![7u8; 300_000]).expect("upload file");
    let data = format!("@{}", file.display());
    let sent = run(
        "curl",
        &[
            "-s",
            "--http2-prior-knowledge",
            "--data-binary",
            &data,
            &format!("{base}/up"),
        ],
    );
    let _ = std::fs::remove_file(&file);
    assert_eq!(sent, "got 300000");
}

#[test]
fn h2load_completes_every_request_ten_streams_at_a_time() {
    let url = format!("http://127.0.0.1:{}/", server());
    let said = run("h2load", &["-n", "2000", "-c", "2", "-m", "10", &url]);
    assert!(
        said.contains("2000 succeeded, 0 failed, 0 errored"),
        "{said}"
    );
    assert!(said.contains("Application protocol: h2c"), "{said}");
}

/// nghttp with 64 KiB windows both ways: the megabyte waits on the
/// client's window updates, the upload on the server's.
#[test]
fn nghttp_through_small_windows_both_ways() {
    let base = format!("http://127.0.0.1:{}", server());
    let said = run(
        "nghttp",
        &["-W", "16", "-w", "16", "-n", "-s", &format!("{base}/big")],
    );
    assert!(said.contains(" 200 ") && said.contains("1M /big"), "{said}");
    let file = std::env::temp_dir().join(format!("h2-codec-nghttp-{}", std::process::id()));
    std::fs::write(&file, vec![1u8; 200_000]).expect("upload file");
    let path = file.display().to_string();
    let said = run(
        "nghttp",
        &["-W", "16", "-w", "16", "-d", &path, &format!("{base}/up")],
    );
    let _ = std::fs::remove_file(&file);
    assert_eq!(said, "got 200000");
}
