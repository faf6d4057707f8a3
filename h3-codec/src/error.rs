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
/// HTTP/3's with its codes ([`Error`]); `h2-codec`'s is the same with
/// HTTP/2's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} ({} error {:#x}, {})", C::PROTOCOL, code.value(), if *connection { "connection" } else { "stream" })]
pub struct Failure<C: Named> {
    pub code: C,
    pub what: &'static str,
    /// The peer broke the connection's rules: close the connection, not just
    /// the stream (RFC 9114 §8, RFC 9113 §5.4).
    pub connection: bool,
}

/// An HTTP/3 error.
pub type Error = Failure<Code>;

impl<C: Named> Failure<C> {
    /// An error that ends only its stream.
    pub const fn stream(code: C, what: &'static str) -> Failure<C> {
        Failure {
            code,
            what,
            connection: false,
        }
    }

    /// An error that ends the connection.
    pub const fn connection(code: C, what: &'static str) -> Failure<C> {
        Failure {
            code,
            what,
            connection: true,
        }
    }
}

/// A protocol's error code as messages name it.
pub trait Named: Copy + std::fmt::Debug {
    const PROTOCOL: &'static str;
    fn value(self) -> u64;
}

impl Named for Code {
    const PROTOCOL: &'static str = "HTTP/3";
    fn value(self) -> u64 {
        self.0
    }
}
