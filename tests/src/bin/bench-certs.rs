//! `bench-certs STATE_DIR N BACKEND_ADDR [--no-certs]`: writes a routing-state
//! snapshot with N apps, each with one member at BACKEND_ADDR, an alias
//! `aliasI.bench.test` and its own certificate (ECDSA P-256, self-signed, made with
//! rcgen), for the TLS benchmark's "handshakes with 100k alias certificates loaded"
//! (bench/tls.py). `--no-certs`: the same apps and aliases without certificates, to
//! tell what the certificates themselves cost.

use std::net::SocketAddr;

use e2e::events;
use spi_consumer::{RoutingState, Store};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (dir, n, backend, certs) = match args.as_slice() {
        [_, dir, n, backend] => (dir, n, backend, true),
        [_, dir, n, backend, flag] if flag == "--no-certs" => (dir, n, backend, false),
        _ => {
            eprintln!("usage: bench-certs STATE_DIR N BACKEND_ADDR [--no-certs]");
            std::process::exit(64);
        }
    };
    let n: usize = n.parse().expect("N");
    let backend: SocketAddr = backend.parse().expect("BACKEND_ADDR");
    let mut state = RoutingState::new();
    for i in 0..n {
        let app = format!("app{i}");
        let alias = format!("alias{i}.bench.test");
        events::apply(&mut state, &events::add_lb(&app, "bench", backend));
        events::apply(&mut state, &events::add_alias(&app, "bench", &alias));
        if !certs {
            continue;
        }
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec![alias.clone()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
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
