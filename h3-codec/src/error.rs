//! What went wrong, as HTTP/3 names it: the error code (RFC 9114 §8.1,
//! RFC 9204 §6) and whether it ends the stream or the whole connection.

/// An HTTP/3 application error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code(pub u64);

impl Code {
    pub const NO_ERROR: Code = Code(0x100);
    pub const GENERAL_PROTOCOL_ERROR: Code = Code(0x101);
    pub const INTERNAL_ERROR: Code = Code(0x102);
    pub const STREAM_CREATION_ERROR: Code = Code(0x103);
    pub const CLOSED_CRITICAL_STREAM: Code = Code(0x104);
    pub const FRAME_UNEXPECTED: Code = Code(0x105);
    pub const FRAME_ERROR: Code = Code(0x106);
    pub const EXCESSIVE_LOAD: Code = Code(0x107);
    pub const ID_ERROR: Code = Code(0x108);
    pub const SETTINGS_ERROR: Code = Code(0x109);
    pub const MISSING_SETTINGS: Code = Code(0x10a);
    pub const REQUEST_REJECTED: Code = Code(0x10b);
    pub const REQUEST_CANCELLED: Code = Code(0x10c);
    pub const REQUEST_INCOMPLETE: Code = Code(0x10d);
    pub const MESSAGE_ERROR: Code = Code(0x10e);
    pub const QPACK_DECOMPRESSION_FAILED: Code = Code(0x200);
}

/// A protocol error: its code, what it was, and how far it reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} (HTTP/3 error {:#x}, {})", code.0, if *connection { "connection" } else { "stream" })]
pub struct Error {
    pub code: Code,
    pub what: &'static str,
    /// The peer broke the connection's rules: close the connection, not just
    /// the stream (RFC 9114 §8).
    pub connection: bool,
}

impl Error {
    /// An error that ends only its stream.
    pub const fn stream(code: Code, what: &'static str) -> Error {
        Error {
            code,
            what,
            connection: false,
        }
    }

    /// An error that ends the connection.
    pub const fn connection(code: Code, what: &'static str) -> Error {
        Error {
            code,
            what,
            connection: true,
        }
    }
}
