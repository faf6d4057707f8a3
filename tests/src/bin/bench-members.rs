//! `bench-members STATE_DIR N BASE_PORT`: writes a routing-state snapshot with N apps,
//! each with one member `127.0.0.1:(BASE_PORT + i)`, for the health-check cost
//! benchmark (bench/health.py, which listens on those ports).

use e2e::events;
use spi_consumer::{RoutingState, Store};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, n, base] = args.as_slice() else {
        eprintln!("usage: bench-members STATE_DIR N BASE_PORT");
        std::process::exit(64);
    };
    let n: u16 = n.parse().expect("N");
    let base: u16 = base.parse().expect("BASE_PORT");
    let mut state = RoutingState::new();
    for i in 0..n {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], base + i));
        events::apply(
            &mut state,
            &events::add_lb(&format!("app{i}"), "bench", addr),
        );
    }
    let mut store = Store::open(dir.as_str()).expect("state dir");
    store.compact(&state).expect("snapshot");
    eprintln!("wrote {n} apps with one member each to {dir}");
}
