//! `bench-certs STATE_DIR N BACKEND_ADDR`: writes a routing-state snapshot with N apps,
//! each with one member at BACKEND_ADDR, an alias `aliasI.bench.test` and its own
//! certificate (ECDSA P-256, self-signed, made with rcgen), for the TLS benchmark's
//! "handshakes with 100k alias certificates loaded" (bench/tls.py).

use std::net::SocketAddr;

use e2e::events;
use spi_consumer::{RoutingState, Store};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, n, backend] = args.as_slice() else {
        eprintln!("usage: bench-certs STATE_DIR N BACKEND_ADDR");
        std::process::exit(64);
    };
    let n: usize = n.parse().expect("N");
    let backend: SocketAddr = backend.parse().expect("BACKEND_ADDR");
    let mut state = RoutingState::new();
    for i in 0..n {
        let app = format!("app{i}");
        let alias = format!("alias{i}.bench.test");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![alias.clone()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        events::apply(&mut state, &events::add_lb(&app, "bench", backend));
        events::apply(&mut state, &events::add_alias(&app, "bench", &alias));
        events::apply(
            &mut state,
            &events::add_ssl(
                &app,
                "bench",
                &alias,
                &cert.pem(),
                &key.serialize_pem(),
                None,
            ),
        );
    }
    let mut store = Store::open(dir.as_str()).expect("state dir");
    store.compact(&state).expect("snapshot");
    eprintln!("wrote {n} apps with alias certificates to {dir}");
}
