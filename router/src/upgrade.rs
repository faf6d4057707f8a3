//! Binary upgrade without a dropped connection: the running router hands its
//! listening sockets to a new process over a Unix socket, `state_dir/upgrade.sock`
//! (haproxy's `-x` socket transfer, nginx's USR2). The kernel keeps one accept queue
//! per socket whichever process holds it, so no connection is refused at any moment.
//!
//! The exchange (`router upgrade` is the new side):
//! 1. new → old: `TAKEOVER 1\n`;
//! 2. the old router stops its event source, so the saved state is complete and
//!    nobody writes it (a broker keeps the events meanwhile), then
//!    old → new: one message, a JSON list of listener names, with their file
//!    descriptors attached (`SCM_RIGHTS`) in that order;
//! 3. the new router loads the saved state, starts its source and serves on the
//!    same sockets; new → old: `READY\n`;
//! 4. the old router stops accepting (its admin listener first, so that readiness
//!    checks reach the new one) and drains its connections within `shutdown_grace`.
//!
//! If the new process goes away before `READY` (a bad binary, a bad file), the old
//! one starts its event source again and carries on; nothing was lost.
//!
//! `SCM_RIGHTS` goes through `nix` (std's ancillary-data API is unstable).

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

/// The first line of the exchange.
const HELLO: &str = "TAKEOVER 1\n";
const READY: &str = "READY\n";
/// Listener names at most in one message (`http`, `https`, `admin`, `tcp.N`).
const MAX_FDS: usize = 64;
/// How long the new side waits for the old one to stop its source and answer.
const ANSWER_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("no running router answers at {path}: {source}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the running router at {path}: {source}")]
    Exchange {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the running router at {path} sent {what}")]
    Protocol { path: PathBuf, what: String },
}

/// Where the running router listens for a successor.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("upgrade.sock")
}

/// The new side: the sockets taken over, and the line back to the old process.
pub struct Inherited {
    listeners: HashMap<String, OwnedFd>,
    conn: std::os::unix::net::UnixStream,
}

impl Inherited {
    /// Asks the router running on `state_dir` for its listeners (blocking; before
    /// the runtime starts). It stops its event source before it answers.
    pub fn take_over(state_dir: &Path) -> Result<Inherited, UpgradeError> {
        let path = socket_path(state_dir);
        let conn = std::os::unix::net::UnixStream::connect(&path).map_err(|source| {
            UpgradeError::Connect {
                path: path.clone(),
                source,
            }
        })?;
        let exchange = |source| UpgradeError::Exchange {
            path: path.clone(),
            source,
        };
        conn.set_read_timeout(Some(ANSWER_WAIT)).map_err(exchange)?;
        (&conn).write_all(HELLO.as_bytes()).map_err(exchange)?;
        let mut buf = vec![0u8; 16 * 1024];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        let (bytes, fds) = {
            let msg = recvmsg::<()>(
                conn.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(|e| exchange(e.into()))?;
            let mut fds = Vec::new();
            for c in msg.cmsgs().map_err(|e| exchange(e.into()))? {
                if let ControlMessageOwned::ScmRights(got) = c {
                    // SAFETY: the kernel just installed these descriptors in this
                    // process for us; nothing else owns them.
                    fds.extend(
                        got.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
            (msg.bytes, fds)
        };
        let protocol = |what: String| UpgradeError::Protocol {
            path: path.clone(),
            what,
        };
        let names: Vec<String> = serde_json::from_slice(&buf[..bytes])
            .map_err(|e| protocol(format!("no listener list ({e})")))?;
        if names.len() != fds.len() {
            return Err(protocol(format!(
                "{} names for {} descriptors",
                names.len(),
                fds.len()
            )));
        }
        Ok(Inherited {
            listeners: names.into_iter().zip(fds).collect(),
            conn,
        })
    }

    /// The listener the old process had under `name`, ready for tokio.
    pub fn listener(&mut self, name: &str) -> Option<std::io::Result<tokio::net::TcpListener>> {
        let fd = self.listeners.remove(name)?;
        let std = std::net::TcpListener::from(fd);
        Some(
            std.set_nonblocking(true)
                .and_then(|()| tokio::net::TcpListener::from_std(std)),
        )
    }

    /// The HTTP/3 listener's UDP socket the old process had under `name`. Both
    /// processes read it until the old one has drained (see "HTTP/3" in
    /// `docs/routing.md`): a packet of an old connection that reaches the new process is
    /// answered with a stateless reset (the keys are the same), and the client
    /// reconnects to the new process.
    pub fn udp_socket(&mut self, name: &str) -> Option<std::net::UdpSocket> {
        self.listeners.remove(name).map(std::net::UdpSocket::from)
    }

    /// Names of listeners the old process had that this configuration has no use for.
    pub fn unused(&self) -> impl Iterator<Item = &str> {
        self.listeners.keys().map(String::as_str)
    }

    /// Tells the old process to stop accepting and drain.
    pub fn confirm(self) -> std::io::Result<()> {
        (&self.conn).write_all(READY.as_bytes())
    }
}

/// The old side: waits for a successor on `state_dir/upgrade.sock`.
pub struct Handover {
    listener: tokio::net::UnixListener,
    path: PathBuf,
    /// The socket file's inode: a successor binds its own file at the same path,
    /// which this one must not remove when it goes.
    inode: u64,
}

/// A successor asking for the listeners.
pub struct Request {
    stream: tokio::net::UnixStream,
}

impl Handover {
    /// Listens on `state_dir/upgrade.sock`, mode 0600. A socket file nobody answers
    /// on is a leftover and is replaced; one a process answers on means another
    /// router runs on this state directory, which is refused (`AddrInUse`) unless
    /// this router is its `successor`.
    pub async fn bind(state_dir: &Path, successor: bool) -> std::io::Result<Handover> {
        let path = socket_path(state_dir);
        if !successor && tokio::net::UnixStream::connect(&path).await.is_ok() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "{} answers: another router runs on this state_dir (to replace it, run `router upgrade`)",
                    path.display()
                ),
            ));
        }
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = tokio::net::UnixListener::bind(&path)?;
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        let inode = std::fs::metadata(&path)?.ino();
        Ok(Handover {
            listener,
            path,
            inode,
        })
    }

    /// The next successor that said hello (others are dropped).
    pub async fn next(&self) -> Request {
        loop {
            // One successor at a time, its hello read inline: no slot to cap
            // (see the `accept` crate's doc); a failed accept follows the rule
            // of every listener.
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    nofile::after_accept_error("upgrade", &e).await;
                    continue;
                }
            };
            let mut line = String::new();
            let mut reader = tokio::io::BufReader::new(stream);
            let hello = tokio::time::timeout(
                Duration::from_secs(5),
                (&mut reader).take(64).read_line(&mut line),
            )
            .await;
            if matches!(hello, Ok(Ok(_))) && line == HELLO {
                return Request {
                    stream: reader.into_inner(),
                };
            }
            tracing::warn!(line = %line.trim_end(), "upgrade socket: not a takeover request; ignored");
        }
    }
}

impl Drop for Handover {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::metadata(&self.path).is_ok_and(|m| m.ino() == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Request {
    /// Sends the listeners (name and descriptor), then waits up to `limit` for the
    /// successor's `READY`: true if it came.
    pub async fn hand_over(mut self, listeners: &[(String, RawFd)], limit: Duration) -> bool {
        let names: Vec<&str> = listeners.iter().map(|(n, _)| n.as_str()).collect();
        let fds: Vec<RawFd> = listeners.iter().map(|(_, fd)| *fd).collect();
        let Ok(header) = serde_json::to_vec(&names) else {
            return false;
        };
        let sent = self
            .stream
            .async_io(tokio::io::Interest::WRITABLE, || {
                sendmsg::<()>(
                    self.stream.as_raw_fd(),
                    &[IoSlice::new(&header)],
                    &[ControlMessage::ScmRights(&fds)],
                    MsgFlags::empty(),
                    None,
                )
                .map_err(std::io::Error::from)
            })
            .await;
        if let Err(e) = sent {
            tracing::error!(error = %e, "upgrade: cannot send the listeners");
            return false;
        }
        let mut line = String::new();
        let mut reader = tokio::io::BufReader::new(&mut self.stream);
        let ready = tokio::time::timeout(limit, (&mut reader).take(64).read_line(&mut line)).await;
        let _ = self.stream.shutdown().await;
        matches!(ready, Ok(Ok(_))) && line == READY
    }
}
