//! SIGHUP reload of the real binary under load: a valid file changes the response
//! timeout at once (also on kept-alive connections) and names the setting that needs
//! a restart; an invalid file is refused with file:line and changes nothing; no
//! request fails throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use e2e::process::RouterProcess;
use e2e::{Backend, events};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const HA: &str = "ha-myapp-demo.example.com";

fn config(dir: &std::path::Path, http: &str, extra: &str) -> String {
    e2e::process::spool_config(dir, http, true, extra)
}

/// One GET through the router on a fresh connection; the status.
async fn status(router: &RouterProcess, path: &str) -> u16 {
    router.status(HA, path).await.expect("a status")
}

/// A mutating admin call with this token; its status.
async fn rotate_in(router: &RouterProcess, token: &str) -> Option<u16> {
    e2e::raw::status(
        &e2e::raw::exchange(
            router.admin?,
            format!(
                "POST /backends/10.9.9.9:80/rotate-in HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Authorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
            Duration::from_secs(5),
        )
        .await,
    )
}

#[tokio::test]
async fn sighup_applies_a_valid_file_and_refuses_an_invalid_one_under_load() {
    let b = Backend::start().await;
    let dir = e2e::tempdir("reload");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("old.token"), "old-token\n").expect("token");
    std::fs::write(dir.join("new.token"), "new-token\n").expect("token");
    let token = |name: &str| format!("admin:\n  token_file: {}\n", dir.join(name).display());
    let cfg = e2e::process::spool_router(
        &dir,
        &events::add_lb("myapp", "demo", b.addr),
        &config(
            &dir,
            "127.0.0.1:0",
            &format!("upstream:\n  response_timeout: 10s\n{}", token("old.token")),
        ),
    );
    let mut router = RouterProcess::start(&cfg).await;
    e2e::eventually("routed", Duration::from_secs(10), async || {
        router.status(HA, "/").await == Some(200)
    })
    .await;
    assert_eq!(status(&router, "/slow?ms=1500").await, 200, "10 s timeout");

    // Load: four keep-alive clients, every answer must be 200.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut load = Vec::new();
    for _ in 0..4 {
        let (stop, ok, failed, http) = (stop.clone(), ok.clone(), failed.clone(), router.http);
        load.push(tokio::spawn(async move {
            let client: Client<_, Empty<Bytes>> =
                Client::builder(TokioExecutor::new()).build_http();
            while !stop.load(Ordering::Relaxed) {
                let req = http::Request::get(format!("http://{http}/"))
                    .header("host", HA)
                    .body(Empty::new())
                    .expect("request");
                let good = match client.request(req).await {
                    Ok(r) => r.status() == 200 && r.into_body().collect().await.is_ok(),
                    Err(_) => false,
                };
                let counter = if good { &ok } else { &failed };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // A kept-alive connection made before the reload.
    let before: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let http = router.http;
    let slow = |client: &Client<_, Empty<Bytes>>, ms: u64| {
        let req = http::Request::get(format!("http://{http}/slow?ms={ms}"))
            .header("host", HA)
            .body(Empty::new())
            .expect("request");
        let f = client.request(req);
        async move { f.await.expect("answer").status().as_u16() }
    };
    assert_eq!(slow(&before, 10).await, 200);

    assert_eq!(rotate_in(&router, "old-token").await, Some(200));
    assert_eq!(rotate_in(&router, "new-token").await, Some(401));
    // A valid file: a 500 ms response timeout, and a listener change that needs a
    // restart (named, not applied: the old port keeps serving).
    std::fs::write(
        &cfg,
        config(
            &dir,
            "127.0.0.1:1",
            &format!(
                "upstream:\n  response_timeout: 500ms\n{}",
                token("new.token")
            ),
        ),
    )
    .expect("config");
    router.signal("HUP");
    let warned = router.log_line("cannot change while running").await;
    assert_eq!(warned["setting"], "listen", "{warned}");
    let done = router.log_line("configuration reloaded").await;
    assert!(done.to_string().contains("listen"), "{done}");
    assert_eq!(status(&router, "/slow?ms=1500").await, 504, "new timeout");
    assert_eq!(slow(&before, 1500).await, 504, "also on an old connection");
    assert_eq!(status(&router, "/slow?ms=50").await, 200);
    // The admin token changed with the file.
    assert_eq!(rotate_in(&router, "old-token").await, Some(401));
    assert_eq!(rotate_in(&router, "new-token").await, Some(200));

    // An invalid file (a good-looking timeout plus a bad field): refused with
    // file:line, and the running 500 ms stays.
    std::fs::write(
        &cfg,
        config(
            &dir,
            "127.0.0.1:0",
            "upstream:\n  response_timeout: 10s\nlimits:\n  max_headers: many\n",
        ),
    )
    .expect("config");
    router.signal("HUP");
    let refused = router.log_line("reload refused").await;
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("router.yaml:11") && error.contains("max_headers"),
        "{refused}"
    );
    assert_eq!(
        status(&router, "/slow?ms=1500").await,
        504,
        "old config kept"
    );

    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.await.expect("load task");
    }
    assert!(ok.load(Ordering::Relaxed) > 100, "load ran");
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no request failed");
    assert_eq!(
        router
            .metric("router_config_reloads_total{result=\"ok\"}")
            .await,
        Some(1.0)
    );
    assert_eq!(
        router
            .metric("router_config_reloads_total{result=\"error\"}")
            .await,
        Some(1.0)
    );
    router.signal("TERM");
    let _ = router.child.wait().await;
    let _ = std::fs::remove_dir_all(&dir);
}
