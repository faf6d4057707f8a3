//! The unidirectional streams of a connection (RFC 9114 §6.2): the client's
//! control stream (SETTINGS first, then GOAWAY and the push frames a server
//! that never pushes ignores), its QPACK encoder and decoder streams (with no
//! dynamic table there is nothing on them to act on: read and dropped), and
//! stream types this server does not know (stopped). Each client may open one
//! of each critical stream; closing one is a connection error.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use h3_codec::{Code, Error, frame};

use super::incoming::{Fault, Incoming, varint};

/// A SETTINGS payload larger than this is refused (a handful of settings
/// take a few dozen bytes).
const MAX_SETTINGS: u64 = 4096;

/// Which critical streams the client has opened (a bit each).
#[derive(Default)]
pub(super) struct Opened(AtomicU8);

/// Reads one unidirectional stream to its end; closes the connection when the
/// client breaks the streams' rules.
pub(super) async fn serve(recv: quinn::RecvStream, quic: quinn::Connection, opened: Arc<Opened>) {
    let mut incoming = Incoming::new(recv);
    let result = async {
        let Some(ty) = incoming.varint().await? else {
            return Ok(());
        };
        match ty {
            frame::CONTROL_STREAM | frame::ENCODER_STREAM | frame::DECODER_STREAM => {
                let bit = 1u8 << ty;
                if opened.0.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
                    return Err(Error::connection(
                        Code::STREAM_CREATION_ERROR,
                        "a critical stream twice",
                    )
                    .into());
                }
                if ty == frame::CONTROL_STREAM {
                    control(&mut incoming).await
                } else {
                    discard(&mut incoming).await
                }
            }
            frame::PUSH_STREAM => Err(Error::connection(
                Code::STREAM_CREATION_ERROR,
                "a push stream from a client",
            )
            .into()),
            _ => {
                incoming.stop(Code::STREAM_CREATION_ERROR);
                Ok(())
            }
        }
    }
    .await;
    match result {
        Ok(()) => {}
        Err(Fault::Protocol(e)) => {
            tracing::debug!(error = %e, "HTTP/3 connection closed");
            quic.close(varint(e.code), e.what.as_bytes());
        }
        // Reset: a critical stream closed. Connection lost: nothing to say.
        Err(Fault::Gone(quinn::ReadError::Reset(_))) => {
            quic.close(
                varint(Code::CLOSED_CRITICAL_STREAM),
                b"a critical stream reset",
            );
        }
        Err(Fault::Gone(_)) => {}
    }
}

const CLOSED: Error = Error::connection(Code::CLOSED_CRITICAL_STREAM, "a critical stream ended");

/// The client's control stream: SETTINGS, then whatever follows until the
/// connection ends.
async fn control(incoming: &mut Incoming) -> Result<(), Fault> {
    let first = incoming.frame().await?.ok_or(CLOSED)?;
    if first.ty != frame::SETTINGS {
        return Err(Error::connection(
            Code::MISSING_SETTINGS,
            "the control stream began without SETTINGS",
        )
        .into());
    }
    if first.len > MAX_SETTINGS {
        return Err(Error::connection(Code::EXCESSIVE_LOAD, "SETTINGS too large").into());
    }
    frame::check_settings(&incoming.take(first.len as usize).await?)?;
    loop {
        let head = incoming.frame().await?.ok_or(CLOSED)?;
        match head.ty {
            frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH if head.len <= 8 => {
                incoming.skip(head.len).await?;
            }
            frame::GOAWAY | frame::MAX_PUSH_ID | frame::CANCEL_PUSH => {
                return Err(Error::connection(
                    Code::FRAME_ERROR,
                    "a control frame longer than its varint",
                )
                .into());
            }
            ty if ty == frame::DATA || ty == frame::HEADERS || frame::is_control_only(ty) => {
                return Err(Error::connection(
                    Code::FRAME_UNEXPECTED,
                    "a frame the control stream cannot carry",
                )
                .into());
            }
            _ => incoming.skip(head.len).await?,
        }
    }
}

/// A QPACK stream: nothing to act on without a dynamic table, but it must stay
/// open as long as the connection.
async fn discard(incoming: &mut Incoming) -> Result<(), Fault> {
    loop {
        match incoming.some(u64::MAX).await {
            Ok(_) => {}
            Err(Fault::Protocol(_)) => return Err(CLOSED.into()),
            Err(gone) => return Err(gone),
        }
    }
}
