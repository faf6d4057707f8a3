//! What the toy servers share: their listener, on the address the first
//! argument names (`127.0.0.1:0` by default), its port printed for the
//! caller (`bench/h2_toys.py`) to read, and a task a connection.

use std::future::Future;

use tokio::net::{TcpListener, TcpStream};

/// Serves each connection with `serve`, in a task of its own.
pub async fn serve_each<F>(serve: impl Fn(TcpStream) -> F) -> std::io::Result<()>
where
    F: Future<Output = ()> + 'static,
{
    let addr = std::env::args().nth(1).unwrap_or("127.0.0.1:0".into());
    let listener = TcpListener::bind(addr).await?;
    println!("{}", listener.local_addr()?.port());
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            loop {
                let (stream, _) = listener.accept().await?;
                tokio::task::spawn_local(serve(stream));
            }
        })
        .await
}
