//! What a member connection's failures mean: for the request (retry or not), for
//! the member's health, and for the client's answer.

use super::*;

/// What went wrong in one request and response with a member.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The member closed the connection before a whole response head.
    #[error("connection closed before a response")]
    Closed,
    #[error("{source}")]
    Io {
        source: io::Error,
        /// No byte of a response had arrived.
        before_response: bool,
    },
    #[error("{0}")]
    Parse(#[from] ParseError),
    /// The client's request body, on its way to the member, failed.
    #[error("{0}")]
    Body(#[from] RequestBodyError),
}

/// Why a member's response body broke off (the client's connection is then
/// aborted: HTTP/1 cannot say it otherwise).
#[derive(Debug, thiserror::Error)]
pub enum ResponseBodyError {
    #[error("member response body: {0}")]
    Io(#[from] io::Error),
    #[error("member closed the connection before the end of the response body")]
    Incomplete,
    #[error("member response body: {0}")]
    Parse(#[from] ParseError),
}

/// The error is this process running out of something (file descriptors, memory),
/// not the peer refusing: it must never count against a member.
pub fn local_shortage(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Why a connection to a member could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: Arc<str>,
        #[source]
        source: io::Error,
    },
    #[error("connect to {addr}: timed out")]
    ConnectTimeout { addr: Arc<str> },
    #[error("TLS to {addr}: {source}")]
    Tls {
        addr: Arc<str>,
        #[source]
        source: io::Error,
    },
    /// An upgrade request (hyper's client drives those).
    #[error("member {addr}: {source}")]
    Http {
        addr: Arc<str>,
        /// The connection had served a request before (a pooled one).
        reused: bool,
        #[source]
        source: hyper::Error,
    },
    #[error("member {addr}: {source}")]
    Exchange {
        addr: Arc<str>,
        /// The connection had served a request before (a pooled one).
        reused: bool,
        #[source]
        source: ExchangeError,
    },
}

impl SendError {
    /// The kind, for the status code and the metric.
    pub fn kind(&self) -> UpstreamError {
        match self {
            SendError::Connect { source, .. } if local_shortage(source) => {
                UpstreamError::LocalResources
            }
            SendError::Connect { .. } => UpstreamError::Connect,
            SendError::ConnectTimeout { .. } => UpstreamError::ConnectTimeout,
            SendError::Tls { .. } => UpstreamError::Tls,
            // hyper's "user" errors here come from the request body we stream: the
            // client's side failed, not the member.
            SendError::Http { source, .. } if source.is_user() => {
                match std::error::Error::source(source).and_then(|e| e.downcast_ref()) {
                    Some(RequestBodyError::Stalled(_)) => UpstreamError::ClientTimeout,
                    Some(RequestBodyError::TooLarge(_)) => UpstreamError::ClientBodyTooLarge,
                    _ => UpstreamError::ClientBody,
                }
            }
            SendError::Http { source, .. } if source.is_parse() => UpstreamError::Protocol,
            SendError::Http { .. } => UpstreamError::Reset,
            SendError::Exchange { source, .. } => match source {
                // The client's side failed, not the member.
                ExchangeError::Body(RequestBodyError::Stalled(_)) => UpstreamError::ClientTimeout,
                ExchangeError::Body(RequestBodyError::TooLarge(_)) => {
                    UpstreamError::ClientBodyTooLarge
                }
                ExchangeError::Body(_) => UpstreamError::ClientBody,
                ExchangeError::Parse(_) => UpstreamError::Protocol,
                ExchangeError::Closed | ExchangeError::Io { .. } => UpstreamError::Reset,
            },
        }
    }

    /// The member closed or reset the connection before sending any response byte:
    /// the one failure after which an idempotent request may be sent again (as
    /// nginx's default `proxy_next_upstream error` does). A garbled response or a
    /// timeout is not one of them.
    pub fn closed_before_response(&self) -> bool {
        let source = match self {
            SendError::Exchange { source, .. } => {
                return match source {
                    ExchangeError::Closed => true,
                    ExchangeError::Io {
                        source,
                        before_response: true,
                    } => closed_kind(source),
                    _ => false,
                };
            }
            SendError::Http { source, .. } => source,
            _ => return false,
        };
        if source.is_user() {
            return false;
        }
        if source.is_incomplete_message() || source.is_canceled() || source.is_closed() {
            return true;
        }
        // A reset while writing the request or waiting for the head.
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            std::error::Error::source(source);
        while let Some(e) = cause {
            if let Some(io) = e.downcast_ref::<io::Error>() {
                return closed_kind(io);
            }
            cause = e.source();
        }
        false
    }

    /// The connection had served a request before: its close was likely the
    /// member's keep-alive timeout, not the member dying.
    pub fn on_reused(&self) -> bool {
        matches!(
            self,
            SendError::Http { reused: true, .. } | SendError::Exchange { reused: true, .. }
        )
    }
}

/// The peer closed or reset the connection (not some other I/O failure).
pub(super) fn closed_kind(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}
