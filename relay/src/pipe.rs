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
use std::sync::atomic::{AtomicUsize, Ordering};

/// A pipe with the count of bytes in it.
pub struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes spliced in and not yet spliced out.
    pub len: usize,
    /// What the pipe holds at most: what one splice may move.
    capacity: usize,
    /// One of the process's [`LARGE_MAX`] pipes of [`ASKED`].
    large: bool,
}

/// The capacity a pipe is asked for: one splice then moves up to 256 KiB
/// where the default pipe (16 pages) moved 64, so a bulk megabyte takes 8
/// system calls each way instead of 32, and 12 % less CPU a gigabyte
/// (`bench/RESULTS.md`, "Bulk through larger pipes"; 1 MiB did no better).
/// The kernel gives the pages only as bytes wait in the pipe. Where it
/// refuses the size (an unprivileged user past `fs.pipe-user-pages-soft`)
/// the pipe keeps what it has; a pipe of less than the default (the kernel
/// gives one or two pages past that limit) is refused, and the direction
/// copies through its chunk.
pub const ASKED: usize = 256 * 1024;

/// Pipes of [`ASKED`] a process holds at most; past them a pipe keeps the
/// default. Pipe pages count against the service user's
/// `fs.pipe-user-pages-soft` (16 384 pages by default; both binaries run as
/// their own unprivileged users): 64 large pipes are a quarter of it, which
/// leaves room for 768 of the default size, so a node with many bulk relays
/// at once still splices 832 directions, not the 256 that large pipes alone
/// would reach (1 024 with default pipes only).
const LARGE_MAX: usize = 64;

/// The process's large pipes.
static LARGE: AtomicUsize = AtomicUsize::new(0);

/// The default pipe capacity (16 pages).
const DEFAULT: usize = 64 * 1024;

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
        let fd = write.as_raw_fd();
        let mut large = LARGE
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < LARGE_MAX).then_some(n + 1)
            })
            .is_ok();
        // SAFETY: F_SETPIPE_SZ and F_GETPIPE_SZ on a pipe we own; each
        // returns the pipe's size, or -1.
        let set = if large {
            unsafe { libc::fcntl(fd, libc::F_SETPIPE_SZ, ASKED as libc::c_int) }
        } else {
            -1
        };
        if large && set <= 0 {
            LARGE.fetch_sub(1, Ordering::AcqRel);
            large = false;
        }
        let size = if set > 0 {
            set
        } else {
            unsafe { libc::fcntl(fd, libc::F_GETPIPE_SZ) }
        };
        let capacity = usize::try_from(size).unwrap_or(0);
        // From here the pipe's drop gives a large slot back.
        let pipe = Pipe {
            read,
            write,
            len: 0,
            capacity,
            large,
        };
        if capacity < DEFAULT {
            return Err(io::Error::other(
                "a pipe of less than 16 pages (the user's pipe pages are spent)",
            ));
        }
        Ok(pipe)
    }

    /// Moves up to the pipe's room from socket `from` into it; 0 = EOF.
    pub fn fill_from(&mut self, from: RawFd) -> io::Result<usize> {
        let n = splice(from, self.write.as_raw_fd(), self.capacity - self.len)?;
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

impl Drop for Pipe {
    fn drop(&mut self) {
        if self.large {
            LARGE.fetch_sub(1, Ordering::AcqRel);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The two tests that count large pipes, one at a time (the relay's
    /// own tests hold a pipe or two at most meanwhile).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_pipe_holds_what_it_was_asked_for_and_never_less_than_the_default() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let pipe = Pipe::new().expect("a pipe");
        assert!(pipe.capacity >= DEFAULT, "{}", pipe.capacity);
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 && pipe.large {
            // Root is past every pipe-pages limit: the size asked is the size.
            assert_eq!(pipe.capacity, ASKED);
        }
        // The pipe takes more than the default would have: all of what a
        // socket holds, up to its size.
        let (mut a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
        a.set_nonblocking(true).expect("nonblocking");
        let chunk = vec![7u8; 32 * 1024];
        let mut sent = 0;
        while sent < 2 * DEFAULT {
            match std::io::Write::write(&mut a, &chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert!(
            sent > DEFAULT,
            "the socket pair took {sent} bytes (net.core.wmem_default too small for this test)"
        );
        let mut pipe = pipe;
        assert!(pipe.large, "a pipe while the budget has room is large");
        while pipe.len < sent {
            match pipe.fill_from(b.as_raw_fd()) {
                Ok(n) if n > 0 => {}
                _ => break,
            }
        }
        assert!(pipe.len <= pipe.capacity);
        if pipe.capacity == ASKED {
            assert_eq!(pipe.len, sent, "a pipe of {} bytes", pipe.capacity);
        }
    }

    #[test]
    fn past_the_budget_a_pipe_keeps_the_default_size() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let pipes: Vec<Pipe> = (0..=LARGE_MAX)
            .map(|_| Pipe::new().expect("a pipe"))
            .collect();
        let large = pipes.iter().filter(|p| p.large).count();
        assert!(large <= LARGE_MAX, "{large} large pipes");
        let default = pipes
            .iter()
            .find(|p| !p.large)
            .expect("one past the budget");
        assert_eq!(default.capacity, DEFAULT);
        assert!(LARGE.load(Ordering::Acquire) <= LARGE_MAX);
    }
}
