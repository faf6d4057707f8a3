//! HTTP/3 frames (RFC 9114 §7): a type and a length (both varints), then the
//! payload. Which frames a stream may carry is the caller's; this module reads
//! frame heads and SETTINGS and writes the frames the server sends.

use bytes::{BufMut, BytesMut};

use crate::error::{Code, Error};
use crate::varint;

pub const DATA: u64 = 0x0;
pub const HEADERS: u64 = 0x1;
pub const CANCEL_PUSH: u64 = 0x3;
pub const SETTINGS: u64 = 0x4;
pub const PUSH_PROMISE: u64 = 0x5;
pub const GOAWAY: u64 = 0x7;
pub const MAX_PUSH_ID: u64 = 0xd;

/// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
pub const CONTROL_STREAM: u64 = 0x0;
pub const PUSH_STREAM: u64 = 0x1;
pub const ENCODER_STREAM: u64 = 0x2;
pub const DECODER_STREAM: u64 = 0x3;

/// SETTINGS identifiers the server sends or checks.
const SETTINGS_QPACK_MAX_TABLE_CAPACITY: u64 = 0x1;
const SETTINGS_MAX_FIELD_SECTION_SIZE: u64 = 0x6;
const SETTINGS_QPACK_BLOCKED_STREAMS: u64 = 0x7;

/// The bytes of a frame's type and length, at most (two 8-byte varints).
pub const MAX_HEAD: usize = 16;

/// A frame's type and payload length, and how many bytes those two took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub ty: u64,
    pub len: u64,
    pub size: usize,
}

/// The frame head at the start of `buf`; `None` when `buf` ends inside it.
pub fn head(buf: &[u8]) -> Option<Head> {
    let (ty, a) = varint::decode(buf)?;
    let (len, b) = varint::decode(&buf[a..])?;
    Some(Head {
        ty,
        len,
        size: a + b,
    })
}

/// Frame types HTTP/2 had and HTTP/3 reserves: receiving one is a connection
/// error (RFC 9114 §7.2.8).
pub fn is_reserved_h2(ty: u64) -> bool {
    matches!(ty, 0x2 | 0x6 | 0x8 | 0x9)
}

/// Frames that belong on the control stream only (or not from a client at
/// all): on a request stream, a connection error (RFC 9114 §7.2).
pub fn is_control_only(ty: u64) -> bool {
    matches!(
        ty,
        CANCEL_PUSH | SETTINGS | PUSH_PROMISE | GOAWAY | MAX_PUSH_ID
    ) || is_reserved_h2(ty)
}

/// Checks a client's SETTINGS payload: each identifier at most once, none of
/// HTTP/2's (RFC 9114 §7.2.4). The values are not needed: this server keeps no
/// dynamic table, and its field sections are far below any client's limit.
pub fn check_settings(mut payload: &[u8]) -> Result<(), Error> {
    let bad = Error::connection(Code::SETTINGS_ERROR, "malformed SETTINGS");
    let mut seen: [u64; 16] = [0; 16];
    let mut count = 0;
    while !payload.is_empty() {
        let (id, a) = varint::decode(payload).ok_or(bad)?;
        let (_, b) = varint::decode(&payload[a..]).ok_or(bad)?;
        payload = &payload[a + b..];
        if matches!(id, 0x2..=0x5) {
            return Err(Error::connection(
                Code::SETTINGS_ERROR,
                "an HTTP/2 setting in SETTINGS",
            ));
        }
        if seen[..count.min(16)].contains(&id) {
            return Err(Error::connection(
                Code::SETTINGS_ERROR,
                "a setting sent twice",
            ));
        }
        if count < 16 {
            seen[count] = id;
        }
        count += 1;
    }
    Ok(())
}

/// The control stream's opening: its type, then SETTINGS with no dynamic table
/// and `max_field_section_size`.
pub fn control_opening(max_field_section_size: u64, out: &mut BytesMut) {
    let mut payload = BytesMut::with_capacity(16);
    for (id, value) in [
        (SETTINGS_QPACK_MAX_TABLE_CAPACITY, 0),
        (SETTINGS_QPACK_BLOCKED_STREAMS, 0),
        (SETTINGS_MAX_FIELD_SECTION_SIZE, max_field_section_size),
    ] {
        varint::encode(id, &mut payload);
        varint::encode(value, &mut payload);
    }
    varint::encode(CONTROL_STREAM, out);
    frame_head(SETTINGS, payload.len() as u64, out);
    out.put_slice(&payload);
}

/// GOAWAY naming the first request stream that will not be served.
pub fn goaway(stream_id: u64, out: &mut BytesMut) {
    frame_head(GOAWAY, varint::len(stream_id) as u64, out);
    varint::encode(stream_id, out);
}

/// A frame's type and length.
pub fn frame_head(ty: u64, len: u64, out: &mut impl BufMut) {
    varint::encode(ty, out);
    varint::encode(len, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_read_whole_or_not_at_all() {
        let mut out = BytesMut::new();
        frame_head(HEADERS, 300, &mut out);
        assert_eq!(
            head(&out),
            Some(Head {
                ty: HEADERS,
                len: 300,
                size: 3
            })
        );
        assert_eq!(head(&out[..2]), None);
        assert_eq!(head(&[]), None);
    }

    #[test]
    fn settings_are_checked_for_duplicates_and_http2_ids() {
        let mut out = BytesMut::new();
        control_opening(16_384, &mut out);
        let h = head(&out[1..]).expect("SETTINGS head");
        assert_eq!((out[0], h.ty), (0, SETTINGS));
        assert_eq!(check_settings(&out[1 + h.size..]), Ok(()));
        assert!(check_settings(&[0x06, 0x01, 0x06, 0x02]).is_err(), "twice");
        assert!(
            check_settings(&[0x04, 0x01]).is_err(),
            "HTTP/2's initial window"
        );
        assert!(check_settings(&[0x06]).is_err(), "cut short");
        // Unknown (grease) identifiers are ignored.
        assert_eq!(check_settings(&[0x40, 0x21, 0x00]), Ok(()));
    }
}
