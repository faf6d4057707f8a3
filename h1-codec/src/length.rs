//! The one `Content-Length` rule, for requests and responses alike.
//!
//! RFC 9110 §8.6 and RFC 9112 §6.3: a list of identical decimal values (a field
//! repeated, or values joined by commas, as some intermediaries send) may be
//! read as that one value; anything else is an unrecoverable framing error.
//! Optional whitespace around each element is allowed (RFC 9110 §5.6.1), and an
//! element has 1 to 19 digits, so that every accepted value fits a `u64` (hyper
//! reads the same list the same way). Signs, hex, empty elements and differing
//! values are refused: two readers that disagree on where a body ends is how a
//! request is smuggled.

/// Why a `Content-Length` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadLength {
    #[error("invalid content-length")]
    Invalid,
    #[error("differing content-lengths")]
    Differing,
}

/// The most digits an element may have: 19 always fit a `u64`.
pub const MAX_DIGITS: usize = 19;

/// The length that every `Content-Length` field value in `values` says: `None`
/// when there is none.
pub fn content_length<'a>(
    values: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Option<u64>, BadLength> {
    let mut found = None;
    for value in values {
        for element in value.split(|b| *b == b',') {
            let n = decimal(element.trim_ascii()).ok_or(BadLength::Invalid)?;
            match found {
                Some(m) if m != n => return Err(BadLength::Differing),
                _ => found = Some(n),
            }
        }
    }
    Ok(found)
}

/// 1 to [`MAX_DIGITS`] ASCII digits as a number.
fn decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > MAX_DIGITS {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cl(values: &[&str]) -> Result<Option<u64>, BadLength> {
        content_length(values.iter().map(|v| v.as_bytes()))
    }

    #[test]
    fn one_value_a_list_of_equal_ones_or_none() {
        assert_eq!(cl(&[]), Ok(None));
        assert_eq!(cl(&["0"]), Ok(Some(0)));
        assert_eq!(cl(&["42"]), Ok(Some(42)));
        assert_eq!(cl(&[" 42 "]), Ok(Some(42)));
        assert_eq!(cl(&["42, 42", "42"]), Ok(Some(42)));
        assert_eq!(
            cl(&["9999999999999999999"]),
            Ok(Some(9_999_999_999_999_999_999))
        );
    }

    #[test]
    fn anything_else_is_refused() {
        for bad in ["", " ", "+1", "-1", "0x10", "1 2", "4,", ",4", "1.0", "１"] {
            assert_eq!(cl(&[bad]), Err(BadLength::Invalid), "{bad:?}");
        }
        assert_eq!(
            cl(&["10000000000000000000"]),
            Err(BadLength::Invalid),
            "20 digits"
        );
        assert_eq!(cl(&["1", "2"]), Err(BadLength::Differing));
        assert_eq!(cl(&["1, 2"]), Err(BadLength::Differing));
    }
}
