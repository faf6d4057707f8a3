//! The allocator of both binaries, and giving memory back after a connection storm.
//!
//! The router and the port proxy allocate with mimalloc ([`Allocator`], each
//! binary's `main.rs`), which keeps a heap per thread
//! and gives a thread's freed pages back when that thread next allocates, after a
//! short delay: a worker left idle after a storm kept them (23 MB against 14 MB
//! 35 s after a storm, `bench/memory.py`). [`trim`] makes the calling thread's heap
//! give back what it can (`mi_collect`), and the trimmer runs it on every worker
//! thread and the main one. glibc's own heap (what C libraries allocate) is
//! trimmed too. What follows is how glibc's heap behaved when the router used it:
//!
//! Thousands of connections that open and close leave glibc's heap fragmented by the
//! few long-lived allocations among them: the freed pages stay in the process (RSS
//! measured here: 9 MB idle, 118 MB with 5 000 connections, still 180–194 MB after
//! they all closed, round after round). `malloc_trim` returns them. It walks the free
//! lists (milliseconds for hundreds of MB) holding the allocator's locks, so it runs
//! only once [`STORM`] client connections have closed since the last trim, and at
//! most every [`MIN_INTERVAL`]: memory comes back within about half a minute of a
//! storm, and steady churn costs one trim per half minute.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;
use std::time::{Duration, Instant};

use libmimalloc_sys as mi;

/// The router's global allocator: mimalloc, asked for plain blocks.
///
/// The `mimalloc` crate's allocator asks for every block through
/// `mi_malloc_aligned`, whose fast path checks the alignment and the free
/// block's address before the plain one's, and whose miss goes through a
/// second, generic aligned path. Every block mimalloc hands out is aligned to
/// a word, so a layout asking no more than that takes `mi_malloc` (nearly all
/// of the router's: bytes, words, pointers); only a larger alignment takes the
/// aligned call. Measured with `bench/instructions.py` (`bench/RESULTS.md`,
/// "the allocator asked for plain blocks").
pub struct Allocator;

/// What every mimalloc block is aligned to (`MI_INTPTR_SIZE`).
const WORD: usize = std::mem::size_of::<usize>();

// SAFETY: each call is mimalloc's own for the layout (aligned only where a word
// does not suffice); every block is freed by `mi_free`, whichever call made it.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: mimalloc's allocation calls take any size and alignment.
        unsafe { by_alignment(layout, mi::mi_malloc, mi::mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        unsafe { by_alignment(layout, mi::mi_zalloc, mi::mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from one of mimalloc's calls above.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = ptr.cast::<c_void>();
        // SAFETY: `ptr` came from the call of the same alignment above.
        unsafe {
            if layout.align() <= WORD {
                mi::mi_realloc(p, new_size).cast()
            } else {
                mi::mi_realloc_aligned(p, new_size, layout.align()).cast()
            }
        }
    }
}

/// `plain(size)` where a word's alignment suffices, else `aligned(size, align)`.
///
/// # Safety
/// Both must be mimalloc allocation calls.
#[inline(always)]
unsafe fn by_alignment(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    // SAFETY: the caller's.
    unsafe {
        if layout.align() <= WORD {
            plain(layout.size()).cast()
        } else {
            aligned(layout.size(), layout.align()).cast()
        }
    }
}

/// Connections closed since the last trim that make one worth it.
pub const STORM: u64 = 1000;
/// Trims at most this often: `malloc_trim` holds the allocator's locks while it runs.
pub const MIN_INTERVAL: Duration = Duration::from_secs(30);

/// Decides when to trim from the count of client connections closed so far,
/// sampled periodically.
#[derive(Debug, Default)]
pub struct Trimmer {
    closed_at_trim: u64,
    last: Option<Instant>,
}

impl Trimmer {
    /// `closed` connections so far (accepted minus open), at `now`; true when a trim
    /// is due.
    pub fn observe(&mut self, closed: u64, now: Instant) -> bool {
        let storm = closed.saturating_sub(self.closed_at_trim) >= STORM;
        let rested = self
            .last
            .is_none_or(|t| now.duration_since(t) >= MIN_INTERVAL);
        if storm && rested {
            self.closed_at_trim = closed;
            self.last = Some(now);
            return true;
        }
        false
    }
}

/// Returns the calling thread's free heap memory to the system: mimalloc's
/// (the router's allocator) and glibc's.
pub fn trim() {
    // SAFETY: mi_collect takes a flag and touches only the allocator's state of
    // the calling thread (and segments no thread owns).
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a plain size and touches only the allocator's state.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_after_a_storm_at_most_every_interval() {
        let mut t = Trimmer::default();
        let t0 = Instant::now();
        assert!(!t.observe(999, t0), "not a storm yet");
        assert!(t.observe(1000, t0), "a storm closed");
        assert!(!t.observe(5000, t0 + Duration::from_secs(10)), "too soon");
        assert!(t.observe(5000, t0 + MIN_INTERVAL), "then due");
        assert!(!t.observe(5500, t0 + 3 * MIN_INTERVAL), "no new storm");
        trim();
    }
}
