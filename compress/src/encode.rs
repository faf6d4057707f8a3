//! A response body compressed as it streams: each frame from the member is
//! written into the compressor, whose output goes on as soon as there is enough
//! of it ([`OUT`]) or the member pauses (the compressor is flushed then, so a
//! stream of events reaches the client as it comes); nothing is buffered whole.
//! One poll compresses at most [`BUDGET`] bytes, and for at most
//! [`POLL_TIME`], before it yields, so neither a fast member nor a slow level
//! holds a worker thread on one connection: a member's frame, however large,
//! is written in [`SLICE`]s, the clock read after each (about 20 ns a slice).

use std::io::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::Coding;

/// Output handed on once this much has gathered.
const OUT: usize = 16 * 1024;
/// Input compressed in one poll at most.
const BUDGET: usize = 256 * 1024;
/// Time one poll compresses for at most: the other connections of the worker
/// wait no longer than this on one compressed response (measured, the
/// levels' cap: a 16 KiB slice takes 1.3 ms at brotli 9, 0.9 ms at zstd 12;
/// `bench/RESULTS.md`, "Compression levels and the poll's time").
const POLL_TIME: std::time::Duration = std::time::Duration::from_millis(2);
/// Input written to the compressor at once at most.
const SLICE: usize = 16 * 1024;

/// One stream's compressor, writing into a `Vec` the body takes from.
pub enum Compressor {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

/// The levels, and the window sizes that bound each stream's memory.
#[derive(Clone, Copy, Debug)]
pub struct Levels {
    pub gzip: u32,
    pub brotli: u32,
    pub zstd: i32,
}

/// Brotli's window: 2^18 = 256 KiB (its default of 4 MiB would be the
/// stream's memory for little gain on web responses).
const BROTLI_WINDOW_LOG: u32 = 18;
/// zstd's window: 2^19 = 512 KiB (level 3's own is 2 MiB).
const ZSTD_WINDOW_LOG: u32 = 19;

impl Compressor {
    pub fn new(coding: Coding, levels: Levels) -> std::io::Result<Compressor> {
        Ok(match coding {
            Coding::Gzip => Compressor::Gzip(flate2::write::GzEncoder::new(
                Vec::new(),
                flate2::Compression::new(levels.gzip),
            )),
            Coding::Brotli => Compressor::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                levels.brotli,
                BROTLI_WINDOW_LOG,
            ))),
            Coding::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(Vec::new(), levels.zstd)?;
                e.window_log(ZSTD_WINDOW_LOG)?;
                e.include_checksum(false)?;
                Compressor::Zstd(e)
            }
        })
    }

    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Compressor::Gzip(e) => e.write_all(data),
            Compressor::Brotli(e) => e.write_all(data),
            Compressor::Zstd(e) => e.write_all(data),
        }
    }

    /// Everything written so far, out (a sync flush: the stream goes on).
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Compressor::Gzip(e) => e.flush(),
            Compressor::Brotli(e) => e.flush(),
            Compressor::Zstd(e) => e.flush(),
        }
    }

    fn output(&mut self) -> &mut Vec<u8> {
        match self {
            Compressor::Gzip(e) => e.get_mut(),
            Compressor::Brotli(e) => e.get_mut(),
            Compressor::Zstd(e) => e.get_mut(),
        }
    }

    /// The stream's end: what is left, with the coding's trailer.
    fn finish(self) -> std::io::Result<Vec<u8>> {
        match self {
            Compressor::Gzip(e) => e.finish(),
            Compressor::Brotli(e) => Ok(e.into_inner()),
            Compressor::Zstd(e) => e.finish(),
        }
    }
}

/// A compressed stream's place among `compression.max_streams`, and its
/// client's share of them; freed with it.
pub struct StreamSlot {
    active: Arc<AtomicUsize>,
    _client: per_source::SourceSlot,
}

impl StreamSlot {
    /// A place if fewer than `max` streams are compressing now (`client`:
    /// the place within its client's share, given back if there is none).
    pub fn take(
        active: &Arc<AtomicUsize>,
        max: usize,
        client: per_source::SourceSlot,
    ) -> Option<StreamSlot> {
        active
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| StreamSlot {
                active: active.clone(),
                _client: client,
            })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a body's frames fail with (the response body's error, boxed).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// The member's body and its compressor (generic over the body, so that this file
/// and the response body that holds it do not name each other).
pub struct Compressing<B> {
    pub inner: B,
    /// `None` once finished.
    compressor: Option<Compressor>,
    /// Input written since the last flush.
    unflushed: bool,
    /// The member's trailers, sent after the compressed end.
    trailers: Option<http::HeaderMap>,
    /// What is left of the member's last frame, not compressed yet.
    pending: Bytes,
    _slot: StreamSlot,
}

impl<B> Compressing<B>
where
    B: Body<Data = Bytes, Error = BodyError> + Unpin,
{
    pub fn new(inner: B, compressor: Compressor, slot: StreamSlot) -> Compressing<B> {
        Compressing {
            inner,
            compressor: Some(compressor),
            unflushed: false,
            trailers: None,
            pending: Bytes::new(),
            _slot: slot,
        }
    }

    fn take_output(&mut self) -> Option<Bytes> {
        let out = self.compressor.as_mut()?.output();
        (!out.is_empty()).then(|| Bytes::from(std::mem::take(out)))
    }

    /// The end of the member's body: the compressor's last bytes.
    fn finish(&mut self) -> Result<Option<Bytes>, BodyError> {
        let Some(compressor) = self.compressor.take() else {
            return Ok(None);
        };
        let last = compressor.finish()?;
        Ok((!last.is_empty()).then(|| Bytes::from(last)))
    }

    pub fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let mut taken = 0;
        let started = std::time::Instant::now();
        loop {
            let Some(compressor) = self.compressor.as_mut() else {
                return Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))));
            };
            if compressor.output().len() >= OUT {
                return Poll::Ready(self.take_output().map(|b| Ok(Frame::data(b))));
            }
            if taken >= BUDGET || (taken > 0 && started.elapsed() >= POLL_TIME) {
                // Yield: the rest in the next poll, after other tasks ran.
                cx.waker().wake_by_ref();
                return self.flushed();
            }
            if !self.pending.is_empty() {
                let slice = self.pending.split_to(self.pending.len().min(SLICE));
                taken += slice.len();
                if let Err(e) = compressor.write(&slice) {
                    return Poll::Ready(Some(Err(e.into())));
                }
                self.unflushed = true;
                continue;
            }
            match Pin::new(&mut self.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => self.pending = data,
                    Err(frame) => {
                        self.trailers = frame.into_trailers().ok();
                        return Poll::Ready(self.finish().transpose().map(|r| r.map(Frame::data)));
                    }
                },
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => {
                    return Poll::Ready(self.finish().transpose().map(|r| r.map(Frame::data)));
                }
                Poll::Pending => return self.flushed(),
            }
        }
    }

    /// The member paused (or the budget is spent): what was written so far
    /// goes out now, if anything; else wait.
    fn flushed(&mut self) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if self.unflushed {
            self.unflushed = false;
            if let Some(e) = self.compressor.as_mut()
                && let Err(err) = e.flush()
            {
                return Poll::Ready(Some(Err(err.into())));
            }
        }
        match self.take_output() {
            Some(b) => Poll::Ready(Some(Ok(Frame::data(b)))),
            None => Poll::Pending,
        }
    }

    pub fn is_end_stream(&self) -> bool {
        self.compressor.is_none() && self.trailers.is_none()
    }

    pub fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
