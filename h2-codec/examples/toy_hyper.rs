//! `toy.rs`'s server for `GET`s on hyper's HTTP/2 server and the `h2`
//! crate, which the router uses today: the other side of the count in
//! `bench/RESULTS.md` ("h2's own codec against hyper's, end to end").
//!
//!     cargo run --release -p h2-codec --example toy_hyper 127.0.0.1:0

#[allow(dead_code)]
mod common;

use std::convert::Infallible;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    common::serve_each(serve).await
}

/// Serves one connection with hyper's h2 server.
async fn serve(stream: tokio::net::TcpStream) {
    let service = service_fn(|req: http::Request<hyper::body::Incoming>| async move {
        let body = Bytes::from(format!("hello {}", req.uri().path()));
        let length = HeaderValue::from(body.len());
        let mut response = http::Response::new(Full::new(body));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        headers.insert(CONTENT_LENGTH, length);
        Ok::<_, Infallible>(response)
    });
    let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
}
