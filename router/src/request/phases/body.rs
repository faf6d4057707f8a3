//! The body of every response the router sends: a member's streamed body (with the
//! connection it arrives on, see [`Lease`]), or a small local one (error pages).
//!
//! A response body also carries the request's [`Completion`]: the member's in-flight
//! slot, the duration metric and the access-log record. They settle when the body
//! ends or is dropped (the client went away), whichever comes first, so the access
//! log sees the bytes really sent and a slot is never held past its request.
//! Bodies stream frame by frame in both directions; nothing is buffered whole.

use compress::encode::Compressing;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::members::MemberSlot;
use crate::metrics::Metrics;
use crate::metrics::apps::AppTraffic;
use crate::request::connection::activity::ActiveRequest;
use crate::request::phases::access_log::AccessRecord;
use crate::upstream::Lease;

pub struct ProxyBody {
    inner: Inner,
    completion: Option<Box<Completion>>,
}

enum Inner {
    Upstream(Lease),
    /// A member's body whose connection another task drives (upgrade requests).
    Detached(Incoming),
    Full(Option<Bytes>),
    /// A body compressed on its way (see the `compress` crate).
    Compressed(Box<Compressing<ProxyBody>>),
}

impl ProxyBody {
    pub fn upstream(lease: Lease) -> ProxyBody {
        ProxyBody {
            inner: Inner::Upstream(lease),
            completion: None,
        }
    }

    pub fn detached(body: Incoming) -> ProxyBody {
        ProxyBody {
            inner: Inner::Detached(body),
            completion: None,
        }
    }

    pub fn full(bytes: impl Into<Bytes>) -> ProxyBody {
        let bytes = bytes.into();
        ProxyBody {
            inner: Inner::Full((!bytes.is_empty()).then_some(bytes)),
            completion: None,
        }
    }

    /// A body compressed as it streams (its completion stays outside: the
    /// bytes counted are the ones the client gets).
    pub fn compressed(c: Compressing<ProxyBody>) -> ProxyBody {
        ProxyBody {
            inner: Inner::Compressed(Box::new(c)),
            completion: None,
        }
    }

    pub fn empty() -> ProxyBody {
        ProxyBody::full(Bytes::new())
    }

    pub fn with_completion(mut self, c: Completion) -> ProxyBody {
        self.completion = Some(Box::new(c));
        self
    }
}

/// Why a response body broke off: the member's connection (ours, or hyper's on
/// an upgrade request's answer).
pub type ProxyBodyError = Box<dyn std::error::Error + Send + Sync>;

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = ProxyBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ProxyBodyError>>> {
        let this = &mut *self;
        if let Some(active) = this.completion.as_mut().and_then(|c| c.active.as_mut()) {
            active.client_took();
        }
        let polled = match &mut this.inner {
            Inner::Upstream(lease) => lease.poll_frame(cx).map_err(ProxyBodyError::from),
            Inner::Detached(body) => Pin::new(body).poll_frame(cx).map_err(ProxyBodyError::from),
            Inner::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Inner::Compressed(c) => c.poll_frame(cx),
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(c) = this.completion.as_mut() {
                    if let Some(data) = frame.data_ref() {
                        c.bytes += data.len() as u64;
                    }
                    if let Some(active) = c.active.as_mut() {
                        active.wait_on_client();
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(c) = this.completion.as_mut() {
                    c.aborted = true;
                }
                this.completion = None;
            }
            Poll::Ready(None) => this.completion = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Upstream(lease) => lease.is_end_stream(),
            Inner::Detached(body) => body.is_end_stream(),
            Inner::Full(bytes) => bytes.is_none(),
            Inner::Compressed(c) => c.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Upstream(lease) => lease.size_hint(),
            Inner::Detached(body) => body.size_hint(),
            Inner::Full(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Inner::Compressed(c) => c.size_hint(),
        }
    }
}

/// What to do when a response is finished.
pub struct Completion {
    pub start: Instant,
    pub status: u16,
    pub metrics: Arc<Metrics>,
    /// Boxed: most routers log no requests, and a completion is moved.
    pub log: Option<Box<AccessRecord>>,
    pub bytes: u64,
    /// The body ended with an error (member reset mid-body) or the client left early.
    pub aborted: bool,
    pub in_flight: Option<MemberSlot>,
    /// Keeps the client connection from counting as idle until the body is done.
    pub active: Option<ActiveRequest>,
    /// The request's count against its app's `max_connections_per_client`.
    pub hold: Option<crate::policy::clients::ClientSlot>,
    /// The app's traffic counters (`None`: the request reached no app) and its
    /// request body's bytes.
    pub app: Option<Arc<AppTraffic>>,
    pub received: u64,
    /// Its span, exported when the response is done (sampled requests, spans on).
    pub span: Option<Box<spans::SpanRecord>>,
}

impl Drop for Completion {
    fn drop(&mut self) {
        // One clock read for the duration and the connection's last activity.
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.start);
        if let Some(active) = self.active.as_mut() {
            active.ends_at(now.into());
        }
        self.metrics.request(self.status);
        let app = self
            .app
            .as_ref()
            .unwrap_or(self.metrics.app_traffic.unrouted());
        app.record(self.status, elapsed, self.received, self.bytes);
        self.metrics.duration.observe(elapsed.as_secs_f64());
        if let Some(slot) = &self.in_flight {
            slot.member().stats.record(self.status, elapsed);
        }
        if let Some(log) = self.log.take() {
            log.emit(now, self.status, self.bytes, elapsed, self.aborted);
        }
        if let Some(span) = self.span.take() {
            span.finish(self.status, self.bytes, self.aborted, now);
        }
    }
}

/// Compression takes a response's body and gives it back compressed.
impl compress::Compressible for ProxyBody {
    fn empty() -> ProxyBody {
        ProxyBody::empty()
    }

    fn compressed(compressing: Compressing<ProxyBody>) -> ProxyBody {
        ProxyBody::compressed(compressing)
    }
}
