//! A kernel pipe and `splice(2)`, for moving bulk bytes socket → pipe → socket without
//! copying them through user space (what haproxy's `option splice-auto` and sozu's
//! `splice` feature do).
//!
//! Hand-written because no maintained crate wraps splice for tokio sockets; kept to
//! the three calls it needs. Both pipe ends are non-blocking; the sockets are tokio's
//! (non-blocking too), and callers wrap each call in `try_io` so readiness stays
//! right.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A pipe with the count of bytes in it.
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes spliced in and not yet spliced out.
    pub len: usize,
}

/// What one splice may move: the default pipe capacity (16 pages).
pub const CAPACITY: usize = 64 * 1024;

impl Pipe {
    pub fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into the array we pass.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors are fresh and owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Pipe {
            read,
            write,
            len: 0,
        })
    }

    /// Moves up to `CAPACITY` bytes from socket `from` into the pipe; 0 = EOF.
    pub fn fill_from(&mut self, from: RawFd) -> io::Result<usize> {
        let n = splice(from, self.write.as_raw_fd(), CAPACITY - self.len)?;
        self.len += n;
        Ok(n)
    }

    /// Moves what the pipe holds into socket `to`; returns how much went.
    pub fn drain_to(&mut self, to: RawFd) -> io::Result<usize> {
        let n = splice(self.read.as_raw_fd(), to, self.len)?;
        self.len -= n;
        Ok(n)
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: plain descriptors, no offsets; the kernel validates everything else.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}
