//! A request body is read ahead before the request takes a member's slot.
//!
//! A member has at most `upstream.max_connections_per_backend` requests in flight.
//! Were a request to take its slot as soon as its head arrives, clients that send
//! their bodies slowly (R-U-Dead-Yet, `slowhttptest -B`) would fill every slot of an
//! app while sending nothing, and the app would answer 503 to everyone. So, as
//! haproxy's `option http-buffer-request` does, the router first reads the body up to
//! `limits.body_buffer_bytes` (or to its end, which covers most bodies) within
//! `limits.header_read_timeout`: a client that is too slow gets 408 and never touches
//! a member. A longer body then streams on, and stalls longer than
//! `limits.body_timeout` end it (see [`crate::upstream::ClientBody`]).

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::{Body as _, Frame, Incoming};
use tokio::time::Instant;

use crate::metrics::UpstreamError;
use crate::upstream::{ClientBody, RequestBody, Rest};

/// How a request body is read (from `limits`).
#[derive(Clone, Copy, Debug)]
pub struct UploadSettings {
    /// Bytes read before the request goes to a member.
    pub buffer: usize,
    /// Time to read them (or the whole body, if shorter).
    pub first: Duration,
    /// Once streaming: the longest wait for the client's next bytes.
    pub stall: Duration,
}

/// A request body as the client's connection delivers it: hyper's (HTTP/1 on
/// connections hyper serves), read whole already by the router's own HTTP/1
/// path (see [`crate::request::connection::h1`]; empty when the request has
/// none), or another server's stream (the own h2 server's, HTTP/3's).
pub enum Received {
    Hyper(Incoming),
    Read(Bytes),
    /// Another kind of connection's stream (the own h2 server's, HTTP/3's).
    Stream(crate::upstream::StreamBody),
}

impl Received {
    /// The body's length as known when its head arrives: read whole, or a
    /// `Content-Length`; 0 for a chunked one (the per-app `received` bytes
    /// count what is declared).
    pub fn declared_len(&self) -> u64 {
        match self {
            Received::Read(bytes) => bytes.len() as u64,
            Received::Hyper(body) => body.size_hint().exact().unwrap_or(0),
            Received::Stream(body) => body.size_hint().exact().unwrap_or(0),
        }
    }
}

/// The body as it will be sent, when nothing is left to read: none, or one the
/// own path read whole with its head. `Err`: the body is still arriving
/// ([`read_rest`] reads it). The common request takes no future for its body.
pub fn read_now(body: Received, settings: &UploadSettings) -> Result<RequestBody, Rest> {
    match body {
        Received::Read(bytes) if bytes.is_empty() => Ok(RequestBody::Empty),
        Received::Read(bytes) => Ok(RequestBody::Client(Box::new(ClientBody::new(
            VecDeque::from([Frame::data(bytes)]),
            None,
            settings.stall,
        )))),
        Received::Hyper(body) if body.is_end_stream() => Ok(RequestBody::Empty),
        Received::Stream(body) if body.is_end_stream() => Ok(RequestBody::Empty),
        Received::Hyper(body) => Err(Rest::Hyper(body)),
        Received::Stream(body) => Err(Rest::Stream(body)),
    }
}

/// Reads the start of a body still arriving (see the module doc; one whole
/// already is [`read_now`]'s). Errors are the client's: a malformed or aborted
/// body ([`UpstreamError::ClientBody`], 400) or one too slow
/// ([`UpstreamError::ClientTimeout`], 408).
///
/// `limit`: the app's `max_request_body_bytes` (0: none): a body past it
/// within the part read here is [`UpstreamError::ClientBodyTooLarge`] (413),
/// before any member is involved; the rest is cut at it as it streams.
pub async fn read_rest(
    mut body: Rest,
    settings: &UploadSettings,
    limit: u64,
) -> Result<RequestBody, UpstreamError> {
    if body.is_end_stream() {
        return Ok(RequestBody::Empty);
    }
    let deadline = Instant::now() + settings.first;
    let mut read = VecDeque::new();
    let mut bytes = 0usize;
    let rest = loop {
        if body.is_end_stream() {
            break None;
        }
        if bytes >= settings.buffer {
            break Some(body);
        }
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(UpstreamError::ClientTimeout),
            Ok(None) => break None,
            Ok(Some(Err(e))) => {
                tracing::debug!(error = %e, "client request body failed");
                return Err(UpstreamError::ClientBody);
            }
            Ok(Some(Ok(frame))) => {
                bytes = bytes.saturating_add(frame.data_ref().map_or(0, |d| d.len()));
                if limit > 0 && bytes as u64 > limit {
                    return Err(UpstreamError::ClientBodyTooLarge);
                }
                read.push_back(frame);
            }
        }
    };
    // HTTP/3 says a request has no body only by ending its stream: a GET whose
    // stream ended before any data has none.
    if read.is_empty() && rest.is_none() {
        return Ok(RequestBody::Empty);
    }
    Ok(RequestBody::Client(Box::new(
        ClientBody::new(read, rest, settings.stall).limited(limit),
    )))
}
