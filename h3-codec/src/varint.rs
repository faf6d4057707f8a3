//! QUIC's variable-length integers (RFC 9000 §16): two bits of length, then
//! 6, 14, 30 or 62 bits of value, most significant byte first.

use bytes::BufMut;

/// The largest value a varint carries.
pub const MAX: u64 = (1 << 62) - 1;

/// The value at the start of `buf` and the bytes it took; `None` when `buf` ends
/// before the varint does.
pub fn decode(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let mut value = u64::from(first & 0x3f);
    for b in &bytes[1..] {
        value = (value << 8) | u64::from(*b);
    }
    Some((value, len))
}

/// How many bytes `value` takes (values above [`MAX`] are written as [`MAX`]).
pub fn len(value: u64) -> usize {
    match value {
        0..=63 => 1,
        64..=16_383 => 2,
        16_384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends `value` (at most [`MAX`]) in its shortest form.
pub fn encode(value: u64, out: &mut impl BufMut) {
    let value = value.min(MAX);
    match len(value) {
        1 => out.put_u8(value as u8),
        2 => out.put_u16(0x4000 | value as u16),
        4 => out.put_u32(0x8000_0000 | value as u32),
        _ => out.put_u64(0xc000_0000_0000_0000 | value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_examples_decode_and_every_length_round_trips() {
        // RFC 9000 §A.1.
        let examples: [(&[u8], u64); 4] = [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
        ];
        for (bytes, value) in examples {
            assert_eq!(decode(bytes), Some((value, bytes.len())));
            assert_eq!(decode(&bytes[..bytes.len() - 1]), None, "cut short");
        }
        for value in [0, 63, 64, 16_383, 16_384, 1_073_741_823, 1_073_741_824, MAX] {
            let mut out = Vec::new();
            encode(value, &mut out);
            assert_eq!(out.len(), len(value));
            assert_eq!(decode(&out), Some((value, out.len())));
        }
    }
}
