//! What went wrong, as HTTP/2 names it (RFC 9113 §7): the error code, and
//! whether it ends one stream (RST_STREAM) or the connection (GOAWAY).

/// An HTTP/2 error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code(pub u32);

impl Code {
    pub const NO_ERROR: Code = Code(0x0);
    pub const PROTOCOL_ERROR: Code = Code(0x1);
    pub const INTERNAL_ERROR: Code = Code(0x2);
    pub const FLOW_CONTROL_ERROR: Code = Code(0x3);
    pub const SETTINGS_TIMEOUT: Code = Code(0x4);
    pub const STREAM_CLOSED: Code = Code(0x5);
    pub const FRAME_SIZE_ERROR: Code = Code(0x6);
    pub const REFUSED_STREAM: Code = Code(0x7);
    pub const CANCEL: Code = Code(0x8);
    pub const COMPRESSION_ERROR: Code = Code(0x9);
    pub const CONNECT_ERROR: Code = Code(0xa);
    pub const ENHANCE_YOUR_CALM: Code = Code(0xb);
    pub const INADEQUATE_SECURITY: Code = Code(0xc);
    pub const HTTP_1_1_REQUIRED: Code = Code(0xd);
}

/// An HTTP/2 error: its code, what it was, and whether it ends the
/// connection (the shape `h3-codec`'s errors have, with HTTP/2's codes).
pub type Error = h3_codec::error::Failure<Code>;

impl h3_codec::error::Named for Code {
    const PROTOCOL: &'static str = "HTTP/2";
    fn value(self) -> u64 {
        u64::from(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_says_its_code_and_reach() {
        let e = Error::connection(Code::COMPRESSION_ERROR, "malformed header block");
        assert_eq!(
            e.to_string(),
            "malformed header block (HTTP/2 error 0x9, connection)"
        );
        let e = Error::stream(Code::PROTOCOL_ERROR, "x");
        assert_eq!(e.to_string(), "x (HTTP/2 error 0x1, stream)");
    }
}
