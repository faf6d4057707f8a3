//! `pair-demo`: the HA pair in the terminal (deploy/pair-demo.sh builds and runs it).
//!
//! Creates the namespaces, a real ActiveMQ, an echo backend, two routers under their
//! supervisors and keepalived on each (e2e::hapair), publishes one routing event, then
//! shows a client polling the VIP while it kills the active router, brings it back,
//! and stops the other one gracefully. Every change is printed as it happens.
//! Everything is removed at the end, and on Ctrl-C.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use e2e::hapair::{NAMES, Pair, publish_route};
use e2e::netns::VIP;

fn main() {
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                let _ = tokio::signal::ctrl_c().await;
            });
            stop.store(true, Ordering::SeqCst);
        });
    }
    let t0 = Instant::now();
    let say = |m: &str| println!("[{:6.2}s] {m}", t0.elapsed().as_secs_f64());
    say("creating namespaces, starting ActiveMQ, the backend and both routers ...");
    let mut pair = Pair::new(&[]);
    say(&format!(
        "routers ready; state and logs in {}",
        pair.dir.display()
    ));
    publish_route(&pair);
    say("published one add_public_endpoint event to the topic routinginfo (both queues get it)");
    pair.start_keepalived(0);
    pair.start_keepalived(1);
    say("keepalived started on router-a (priority 250) and router-b (249)");

    // The client's view, printed only when it changes.
    let mut last = String::new();
    let mut watch = |pair: &Pair, secs: f64| {
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < end && !stop.load(Ordering::SeqCst) {
            let holder = (0..2)
                .find(|&i| pair.topo.has_addr(NAMES[i], VIP))
                .map_or("nobody".to_string(), |i| format!("router-{}", NAMES[i]));
            let answer = pair
                .get(VIP)
                .map_or("no answer".to_string(), |c| format!("HTTP {c}"));
            let now = format!("VIP {VIP} on {holder}; client GET http://{VIP}:8080/ -> {answer}");
            if now != last {
                say(&now);
                last = now;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    watch(&pair, 6.0);
    let steps: [(&str, f64); 3] = [
        ("kill -9 the active router", 5.0),
        ("restart it (it takes the VIP back: preempt)", 6.0),
        (
            "stop the active router gracefully (flag, VIP moves, then drain)",
            5.0,
        ),
    ];
    for (what, secs) in steps {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let h = (0..2)
            .find(|&i| pair.topo.has_addr(NAMES[i], VIP))
            .unwrap_or(0);
        if what.starts_with("restart") {
            say(&format!(">>> {what}"));
        } else {
            say(&format!(">>> {what} (router-{})", NAMES[h]));
        }
        match what.split_whitespace().next() {
            Some("kill") => {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pair.router_pid(h)])
                    .status();
            }
            Some("restart") => {
                for i in 0..2 {
                    if pair.routers[i]
                        .as_mut()
                        .is_some_and(|c| c.try_wait().ok().flatten().is_some())
                    {
                        let _ = pair.routers[i].take().map(|mut c| c.wait());
                        pair.start_router(i);
                    }
                }
            }
            _ => pair.stop_router(h),
        }
        watch(&pair, secs);
    }
    say("done: stopping everything and removing the namespaces");
}
