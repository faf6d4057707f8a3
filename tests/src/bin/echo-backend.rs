//! `echo-backend [ADDR]`: the test suite's echo backend as a program, for the demo
//! and for poking at the router by hand. Answers every request with a JSON echo of
//! what it received. Default address 127.0.0.1:38032.

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:38032".into());
    let addr = match addr.parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("echo-backend: {addr}: {e}");
            std::process::exit(64);
        }
    };
    let backend = e2e::Backend::start_on(addr).await;
    eprintln!("echo-backend listening on {}", backend.addr);
    let _ = tokio::signal::ctrl_c().await;
}
