//! The pooled HTTP/1.1 client that talks to members, and what its errors mean.
//!
//! hyper-util's pooled client keeps idle connections per `address:port`; the idle
//! timeout stays below the gear haproxy's 10 s keep-alive timeout so that we do not
//! pick a connection the gear is about to close. It never sets Host (the client's
//! Host goes through verbatim) and retries on its own only a request that was never
//! written (the pool handed out a connection already closed). A request that was
//! written but got no response byte is retried by the proxy, once, if idempotent.

use std::error::Error as StdError;
use std::io;

use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::Error as ClientError;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::body::ProxyBody;
use crate::config::Upstream;
use crate::metrics::UpstreamError;

pub type Client = HyperClient<HttpConnector, ProxyBody>;

pub fn client(cfg: &Upstream) -> Client {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(cfg.connect_timeout));
    // Members are `address:port` from the SPI; the URI scheme is always http here.
    connector.enforce_http(true);
    HyperClient::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(cfg.idle_timeout)
        .pool_max_idle_per_host(cfg.max_idle_per_backend)
        .set_host(false)
        .retry_canceled_requests(true)
        .build(connector)
}

/// The kind of failure, for the status code and the metric.
pub fn classify(err: &ClientError) -> UpstreamError {
    if err.is_connect() {
        if chain(err).any(|e| {
            e.downcast_ref::<io::Error>()
                .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut)
                || e.to_string().contains("timed out")
        }) {
            return UpstreamError::ConnectTimeout;
        }
        return UpstreamError::Connect;
    }
    for e in chain(err) {
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && h.is_parse()
        {
            return UpstreamError::Protocol;
        }
    }
    UpstreamError::Reset
}

/// Whether the member closed the connection before sending any response byte, the
/// one failure after which an idempotent request may be sent again.
pub fn closed_before_response(err: &ClientError) -> bool {
    !err.is_connect()
        && chain(err).any(|e| {
            e.downcast_ref::<hyper::Error>()
                .is_some_and(|h| h.is_incomplete_message() || h.is_canceled())
                || e.downcast_ref::<io::Error>().is_some_and(|io| {
                    matches!(
                        io.kind(),
                        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
                    )
                })
        })
}

/// The error and its causes, outermost first.
fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    let mut next = Some(err);
    std::iter::from_fn(move || {
        let current = next?;
        next = current.source();
        Some(current)
    })
}
