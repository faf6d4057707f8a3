//! The byte stream to a member: plain TCP or TLS over it.

use super::*;

/// The byte stream to a member: plain TCP or TLS over it.
pub enum MemberIo {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl tokio::io::AsyncRead for MemberIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for MemberIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MemberIo::Plain(s) => s.is_write_vectored(),
            MemberIo::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_flush(cx),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MemberIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MemberIo::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

/// TLS towards a member: the connector and the name to ask for and verify.
pub struct MemberTls<'a> {
    pub connector: &'a tokio_rustls::TlsConnector,
    pub host: &'a str,
}
