//! One line per request, through `tracing` (target `access`), written when the
//! response is finished so that it carries the bytes sent and the full duration.
//! Text or JSON follows the process's log format (`access_log.format`).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// What is known of a request when it arrives; completed by [`AccessRecord::emit`].
pub struct AccessRecord {
    pub client: IpAddr,
    pub method: http::Method,
    pub host: String,
    pub path: String,
    pub version: http::Version,
    /// The member it went to, if any.
    pub upstream: Option<Arc<str>>,
    /// From the request head to the response head (the member's, or the router's
    /// own answer): with `duration_ms`, where a slow request spent its time, as
    /// haproxy's `Tr` and nginx's `$upstream_header_time` tell.
    pub head: Option<Duration>,
    /// The request's ID and trace (see `request::trace`).
    pub ids: Option<super::trace::Trace>,
}

impl AccessRecord {
    /// What the log line will say of `req` from `client` (`host`: as it was
    /// read for routing).
    pub fn of<B>(req: &http::Request<B>, client: IpAddr, host: Option<&http::HeaderValue>) -> Self {
        AccessRecord {
            client,
            method: req.method().clone(),
            host: host
                .and_then(|h| h.to_str().ok().map(str::to_owned))
                .unwrap_or_default(),
            path: req
                .uri()
                .path_and_query()
                .map_or_else(|| req.uri().to_string(), |p| p.as_str().to_owned()),
            version: req.version(),
            upstream: None,
            head: None,
            ids: None,
        }
    }

    pub fn emit(self, status: u16, bytes: u64, duration: Duration, aborted: bool) {
        tracing::info!(
            target: "access",
            client = %self.client.to_canonical(),
            host = %self.host,
            method = %self.method,
            path = %self.path,
            version = ?self.version,
            status,
            upstream = self.upstream.as_deref().unwrap_or("-"),
            bytes,
            head_ms = self.head.map_or(0.0, |h| h.as_secs_f64() * 1000.0),
            duration_ms = duration.as_secs_f64() * 1000.0,
            aborted,
            request_id = self.ids.as_ref().map_or("-", |t| t.request_id.as_str()),
            trace_id = self.ids.as_ref().map_or("-", |t| t.trace_id()),
        );
    }
}
