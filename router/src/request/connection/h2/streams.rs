//! A connection's streams as the router serves them: each request's answer
//! in flight (cancelled when the client resets its stream), its body
//! handed to the request path ([`super::inbox`]), its response head written
//! and its body pulled from the member only as fast as the client's
//! windows and the socket take it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_util::future::{AbortHandle, Abortable};
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use futures_util::task::AtomicWaker;
use h1_codec::encode::response::DateCache;
use h2_codec::Code;
use h2_codec::conn::{Conn, Event};
use http::{HeaderMap, Request, header};
use hyper::body::Body as _;

use super::inbox::{self, Inbox};
use crate::request::Answer;
use crate::request::phases::body::ProxyBody;
use crate::request::phases::upload::Received;

/// A request's answer on its way: the stream's ID and the response.
pub(super) type Answering = Pin<Box<dyn Future<Output = (u32, Answer)> + Send>>;

/// Output past this many bytes not written yet: no more body is pulled and
/// no more of the client read until the socket takes it.
pub(super) const HIGH_WATER: usize = 64 * 1024;

/// The connection's streams.
pub(super) struct Streams {
    answers: FuturesUnordered<Abortable<Answering>>,
    /// Few (at most `limits.h2_max_concurrent_streams`, usually one or
    /// two): a list searched in order beats a map.
    list: Vec<Stream>,
    /// The driver's waker, which request bodies wake.
    driver: Arc<AtomicWaker>,
    /// A response head's block, made here and copied into the output (kept:
    /// one allocation for the connection, not one a response).
    block: BytesMut,
}

/// One stream's parts still alive on the router's side.
struct Stream {
    id: u32,
    /// Its answer is in flight.
    answering: Option<AbortHandle>,
    upload: Option<Upload>,
    sending: Option<Sending>,
}

/// A request body being received.
struct Upload {
    inbox: Arc<Inbox>,
    /// `Content-Length`: the DATA must add up to it (RFC 9113 §8.1.1).
    declared: Option<u64>,
    seen: u64,
    /// The client ended it.
    ended: bool,
}

/// A response body on its way out.
struct Sending {
    body: ProxyBody,
    /// What the windows have not let out yet.
    pending: Bytes,
    /// The member's body ended (with `pending` its last bytes).
    ended: bool,
    trailers: Option<HeaderMap>,
}

impl Streams {
    pub(super) fn new(driver: Arc<AtomicWaker>) -> Streams {
        Streams {
            answers: FuturesUnordered::new(),
            list: Vec::new(),
            driver,
            block: BytesMut::new(),
        }
    }

    /// Nothing of any stream is left on the router's side.
    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn get(&mut self, id: u32) -> Option<&mut Stream> {
        self.list.iter_mut().find(|s| s.id == id)
    }

    /// What a client's frame meant; `answer` starts a request's answer.
    pub(super) fn on(
        &mut self,
        event: Event,
        h2: &mut Conn,
        answer: &mut impl FnMut(u32, Request<Received>) -> Answering,
    ) {
        match event {
            Event::Request { stream, head, end } => match head {
                Ok(head) => self.request(stream, head, end, h2, answer),
                Err(e) if e == h2_codec::head::TOO_LARGE => {
                    h2.respond(stream, Some(431), std::iter::empty(), true);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "h2 request head refused");
                    h2.reset(stream, e.code);
                }
            },
            Event::Data { stream, data, end } => self.data(stream, data, end, h2),
            Event::End { stream } => self.data(stream, Bytes::new(), true, h2),
            Event::Reset { stream, .. } => self.gone(stream, "the client reset the stream"),
            Event::Window | Event::GoAway { .. } | Event::Pong => {}
        }
    }

    fn request(
        &mut self,
        id: u32,
        head: Request<()>,
        end: bool,
        h2: &mut Conn,
        answer: &mut impl FnMut(u32, Request<Received>) -> Answering,
    ) {
        // The one `Content-Length` rule; a value it refuses, or a body
        // declared and none sent, is malformed (RFC 9113 §8.1.1).
        let lengths = head.headers().get_all(header::CONTENT_LENGTH);
        let declared = match h1_codec::length::content_length(lengths.iter().map(|v| v.as_bytes()))
        {
            Ok(d) if !(end && d.is_some_and(|d| d > 0)) => d,
            _ => {
                h2.reset(id, Code::PROTOCOL_ERROR);
                return;
            }
        };
        let (body, upload) = if end {
            (Received::Read(Bytes::new()), None)
        } else {
            if expects_continue(&head) {
                // The body is read at once (ahead of the member): go on.
                let mut block = BytesMut::with_capacity(8);
                h2_codec::hpack::put_status(100, &mut block);
                h2.respond_block(id, &block, false);
            }
            let inbox = Inbox::new(self.driver.clone());
            let body = Received::Stream(inbox::body(inbox.clone(), declared));
            let upload = Upload {
                inbox,
                declared,
                seen: 0,
                ended: false,
            };
            (body, Some(upload))
        };
        let (abort, registration) = AbortHandle::new_pair();
        self.answers.push(Abortable::new(
            answer(id, head.map(|()| body)),
            registration,
        ));
        self.list.push(Stream {
            id,
            answering: Some(abort),
            upload,
            sending: None,
        });
    }

    /// Body bytes (or, empty with `end`, trailers) for `id`.
    fn data(&mut self, id: u32, data: Bytes, end: bool, h2: &mut Conn) {
        let len = data.len() as u32;
        let Some(upload) = self.get(id).and_then(|s| s.upload.as_mut()) else {
            h2.consumed(id, len);
            return;
        };
        upload.seen += u64::from(len);
        upload.ended |= end;
        let wrong = upload
            .declared
            .is_some_and(|d| upload.seen > d || (end && upload.seen != d));
        if wrong {
            h2.consumed(id, len);
            h2.reset(id, Code::PROTOCOL_ERROR);
            self.gone(id, "body length differs from content-length");
            return;
        }
        if !upload.inbox.push(data, end) {
            h2.consumed(id, len);
        }
    }

    /// The stream ended early: its answer cancelled, its body failed.
    fn gone(&mut self, id: u32, why: &'static str) {
        let Some(at) = self.list.iter().position(|s| s.id == id) else {
            return;
        };
        let s = self.list.swap_remove(at);
        if let Some(abort) = s.answering {
            abort.abort();
        }
        if let Some(upload) = s.upload {
            upload.inbox.fail(why);
        }
    }

    /// Answers that are ready, response bodies as far as windows and
    /// `HIGH_WATER` let, request body bytes read given back as window;
    /// true when something moved.
    pub(super) fn poll(
        &mut self,
        cx: &mut Context<'_>,
        h2: &mut Conn,
        date: &mut DateCache,
    ) -> bool {
        let mut moved = false;
        while let Poll::Ready(Some(answered)) = self.answers.poll_next_unpin(cx) {
            moved = true;
            // Aborted: the stream was reset and is gone already.
            if let Ok((id, answer)) = answered {
                self.respond(id, answer, h2, date);
            }
        }
        let mut i = 0;
        while i < self.list.len() {
            let s = &mut self.list[i];
            moved |= send(s, cx, h2);
            give_back(s, h2);
            if s.answering.is_none() && s.sending.is_none() && s.upload.is_none() {
                self.list.swap_remove(i);
            } else {
                i += 1;
            }
        }
        moved
    }

    /// Writes the response head; its body, if any, is sent from here on.
    fn respond(&mut self, id: u32, answer: Answer, h2: &mut Conn, date: &mut DateCache) {
        let Some(at) = self.list.iter().position(|s| s.id == id) else {
            return;
        };
        let s = &mut self.list[at];
        s.answering = None;
        let Answer {
            response,
            fields,
            request_id,
            ..
        } = answer;
        let (parts, body) = response.into_parts();
        self.block.clear();
        super::head::block(&parts, fields.as_ref(), &request_id, date, &mut self.block);
        let end = body.is_end_stream();
        h2.respond_block(id, &self.block, end);
        if !end {
            s.sending = Some(Sending {
                body,
                pending: Bytes::new(),
                ended: false,
                trailers: None,
            });
        }
    }
}

/// Whether the client waits for `100 Continue` before its body.
fn expects_continue(head: &Request<()>) -> bool {
    head.headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Sends what of `s`'s response body the windows let, pulling the next
/// frame from the member only once the last one is out; true when a frame
/// came.
fn send(s: &mut Stream, cx: &mut Context<'_>, h2: &mut Conn) -> bool {
    let Some(out) = s.sending.as_mut() else {
        return false;
    };
    let mut moved = false;
    loop {
        if !out.pending.is_empty() || out.ended {
            let last = out.ended && out.trailers.is_none();
            if !h2.send_data(s.id, &mut out.pending, last) {
                return moved; // the client's windows are shut
            }
            if out.ended {
                if let Some(trailers) = out.trailers.take() {
                    let fields = trailers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
                    h2.respond(s.id, None, fields, true);
                }
                s.sending = None;
                return true;
            }
        }
        if h2.output().len() >= HIGH_WATER {
            return moved;
        }
        match Pin::new(&mut out.body).poll_frame(cx) {
            Poll::Pending => return moved,
            Poll::Ready(None) => out.ended = true,
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => out.pending = data,
                Err(frame) => {
                    out.trailers = frame.into_trailers().ok();
                    out.ended = true;
                }
            },
            Poll::Ready(Some(Err(e))) => {
                // The member's body broke off: the client must not take a
                // cut response for a whole one.
                tracing::debug!(error = %e, "response body broke off; stream reset");
                h2.reset(s.id, Code::INTERNAL_ERROR);
                s.sending = None;
                return true;
            }
        }
        moved = true;
    }
}

/// Opens the windows again for request body bytes the reader took; once
/// the reader is gone and the response is out, the stream is done (the
/// client told to stop sending, if it still was: RFC 9113 §8.1).
fn give_back(s: &mut Stream, h2: &mut Conn) {
    let Some(upload) = s.upload.as_ref() else {
        return;
    };
    let (taken, dropped) = upload.inbox.take_consumed();
    if taken > 0 {
        h2.consumed(s.id, taken);
    }
    if dropped && s.answering.is_none() && s.sending.is_none() {
        if !upload.ended {
            h2.reset(s.id, Code::NO_ERROR);
        }
        s.upload = None;
    }
}
