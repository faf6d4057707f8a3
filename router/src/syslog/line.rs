//! A syslog line as it is written: a cursor over the thread's own fixed
//! buffer, and the line's time.
//!
//! Why a position in a fixed-size buffer and not a `Vec<u8>`: a line is some
//! thirty pieces (the head, the template's texts and variables), and a
//! vector's append checks its capacity, may call out to grow, and stores its
//! length back through the vector a piece; with a `memcpy` call for each
//! copy of a length known only then, that was 1,000 of a line's 2,250
//! instructions. A cursor that was a slice of the room left still stored two
//! words back a piece and checked the room twice (about 17 instructions a
//! literal). Here the buffer's size is a constant with [`SLACK`] bytes past
//! the line's longest, so a piece checks only that the line is not yet full
//! (the compiler then knows the piece's room is there) and moves its bytes:
//! a literal text is one 32-byte store cut back ([`Literal`]), a value of at
//! most 16 bytes two overlapping 8-byte (or 4-byte) moves, a number its
//! digits from a table of pairs; the position stays in a register (see
//! `bench/RESULTS.md`, "A syslog line by position").
//!
//! A line holds at most [`LINE_MAX`] bytes (the largest UDP datagram over
//! IPv4: a longer line could not be sent on the default transport); what is
//! past it is cut, as haproxy cuts a line at its `len`. Pieces written once
//! the line is full land in the slack or nowhere and are never sent.
//!
//! The line's time is read from the request's own end (an `Instant`, which
//! the request reads anyway) against the thread's anchor, a wall clock read
//! at most once a second: the line costs no clock read, and a step of the
//! wall clock shows within a second.

use std::time::{Duration, Instant, SystemTime};

use crate::log_format::Literal;

/// The longest line, in bytes; the rest is cut.
pub const LINE_MAX: usize = 65_507;

/// Room past a line's longest for one whole short piece (a literal's block,
/// a value of up to 16 bytes, a number's 20 digits, a time's texts).
pub const SLACK: usize = 64;

/// The buffer a line is written in.
const BUF: usize = LINE_MAX + SLACK;

/// A line being written in a buffer of `SIZE` bytes (the line at most
/// `SIZE - SLACK` of them): where the next piece goes, and the line's time.
pub struct Line<'a, const SIZE: usize = BUF> {
    buf: &'a mut [u8; SIZE],
    /// What is written; past the line's longest once it is full.
    pos: usize,
    second: &'a Second,
    now: LineTime,
}

impl<'a, const SIZE: usize> Line<'a, SIZE> {
    /// The line's longest (a buffer smaller than [`SLACK`] does not build).
    const END: usize = SIZE - SLACK;

    fn new(buf: &'a mut [u8; SIZE], second: &'a Second, now: LineTime) -> Line<'a, SIZE> {
        Line {
            buf,
            pos: 0,
            second,
            now,
        }
    }

    /// The line is written: its length, cut at its longest.
    pub fn finish(self) -> usize {
        self.pos.min(Self::END)
    }

    /// `N` bytes of room at the position (`N` ≤ [`SLACK`]), or none when
    /// the line is full: one comparison, the slice's own check folded away.
    #[inline(always)]
    fn room<const N: usize>(&mut self) -> Option<&mut [u8; N]> {
        if self.pos > Self::END {
            return None;
        }
        self.buf.get_mut(self.pos..)?.first_chunk_mut::<N>()
    }

    /// Appends `bytes`.
    #[inline(always)]
    pub fn put(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        if n <= 16 {
            if let Some(to) = self.room::<16>() {
                copy_short(bytes, to);
                self.pos += n;
            }
        } else {
            self.pos = put_long(&mut self.buf[..], self.pos, Self::END, bytes);
        }
    }

    /// Appends one byte.
    #[inline(always)]
    pub fn byte(&mut self, b: u8) {
        if let Some([slot]) = self.room::<1>() {
            *slot = b;
            self.pos += 1;
        }
    }

    /// Appends `text`, a constant: its stores are of immediates.
    #[inline(always)]
    pub fn text<const N: usize>(&mut self, text: &[u8; N]) {
        const { assert!(N <= SLACK, "a constant text fits the slack") };
        if let Some(to) = self.room::<N>() {
            *to = *text;
            self.pos += N;
        }
    }

    /// Appends `text`: a short one as its whole block, then cut back.
    #[inline(always)]
    pub fn literal(&mut self, text: &Literal) {
        match text {
            Literal::Short(block, n) => {
                if let Some(to) = self.room::<{ Literal::SHORT }>() {
                    *to = *block;
                    self.pos += usize::from(*n);
                }
            }
            Literal::Long(t) => self.pos = put_long(&mut self.buf[..], self.pos, Self::END, t),
        }
    }

    /// Appends `n` in decimal: up to four digits from the table of pairs,
    /// more through `itoa`.
    #[inline(always)]
    pub fn number(&mut self, n: u64) {
        let Some(to) = self.room::<20>() else {
            return;
        };
        let len = match n {
            0..10 => {
                to[0] = b'0' + n as u8;
                1
            }
            10..100 => {
                to[..2].copy_from_slice(&PAIRS[n as usize]);
                2
            }
            100..1000 => {
                to[0] = b'0' + (n / 100) as u8;
                to[1..3].copy_from_slice(&PAIRS[(n % 100) as usize]);
                3
            }
            1000..10_000 => {
                to[..2].copy_from_slice(&PAIRS[(n / 100) as usize]);
                to[2..4].copy_from_slice(&PAIRS[(n % 100) as usize]);
                4
            }
            _ => long_number(n, to),
        };
        self.pos += len;
    }

    /// Appends the line's time as `text` says: the second's text, then the
    /// millisecond (and RFC 3339's `Z`) in the same block's room.
    #[inline(always)]
    pub fn time(&mut self, text: TimeText) {
        let s = self.second;
        let (written, millis, zone) = match text {
            TimeText::Rfc3339 => (&s.rfc3339, true, true),
            TimeText::Haproxy => (&s.haproxy, true, false),
            TimeText::Rfc3164 => (&s.rfc3164, false, false),
        };
        let m = usize::from(self.now.millis).min(999);
        match written {
            Literal::Short(block, n) if millis && usize::from(*n) <= TIME_TEXT => {
                let Some(to) = self.room::<{ Literal::SHORT }>() else {
                    return;
                };
                let n = usize::from(*n).min(TIME_TEXT);
                *to = *block;
                let tail = &mut to[n..n + 5];
                tail[..4].copy_from_slice(&MILLIS[m]);
                tail[4] = b'Z';
                self.pos += n + 4 + usize::from(zone);
            }
            _ => {
                self.literal(written);
                if millis {
                    self.put(&MILLIS[m]);
                }
                if zone {
                    self.byte(b'Z');
                }
            }
        }
    }
}

/// The longest second's text that takes its millisecond and zone (five
/// bytes) in its own block.
const TIME_TEXT: usize = Literal::SHORT - 5;

/// `bytes` (a long piece) at `pos` in `buf`, cut at `end`; the position
/// after it. Out of line: a long piece is a `memcpy` anyway.
#[inline(never)]
fn put_long(buf: &mut [u8], pos: usize, end: usize, bytes: &[u8]) -> usize {
    let n = bytes.len().min(end.saturating_sub(pos));
    if let Some(to) = buf.get_mut(pos..pos + n) {
        to.copy_from_slice(&bytes[..n]);
        return pos + n;
    }
    pos
}

/// `n` (10 000 or more) through `itoa` into `to`; its length.
#[inline(never)]
fn long_number(n: u64, to: &mut [u8; 20]) -> usize {
    let mut digits = itoa::Buffer::new();
    let text = digits.format(n).as_bytes();
    let len = text.len().min(20);
    to[..len].copy_from_slice(&text[..len]);
    len
}

/// `from` (at most 16 bytes) to the front of `to`: two overlapping moves of
/// 8 or of 4 bytes, or three of one byte; no call.
#[inline]
fn copy_short(from: &[u8], to: &mut [u8; 16]) {
    let n = from.len();
    if let (Some(head), Some(tail)) = (from.first_chunk::<8>(), from.last_chunk::<8>()) {
        let tail = *tail;
        to[..8].copy_from_slice(head);
        to[n - 8..n].copy_from_slice(&tail);
    } else if let (Some(head), Some(tail)) = (from.first_chunk::<4>(), from.last_chunk::<4>()) {
        let tail = *tail;
        to[..4].copy_from_slice(head);
        to[n - 4..n].copy_from_slice(&tail);
    } else if let (Some(&first), Some(&last)) = (from.first(), from.last()) {
        to[0] = first;
        to[n / 2] = from[n / 2];
        to[n - 1] = last;
    }
}

/// `.000` to `.999`, looked up (three digits worked out a line cost about
/// 45 instructions).
static MILLIS: [[u8; 4]; 1000] = {
    let mut table = [[b'.', b'0', b'0', b'0']; 1000];
    let mut i = 0;
    while i < 1000 {
        table[i] = [
            b'.',
            b'0' + (i / 100) as u8,
            b'0' + (i / 10 % 10) as u8,
            b'0' + (i % 10) as u8,
        ];
        i += 1;
    }
    table
};

/// `00` to `99`, for numbers of up to four digits.
static PAIRS: [[u8; 2]; 100] = {
    let mut table = [[b'0'; 2]; 100];
    let mut i = 0;
    while i < 100 {
        table[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    table
};

/// A log line's time: seconds since the epoch and the millisecond.
#[derive(Clone, Copy, Debug)]
pub struct LineTime {
    secs: u64,
    millis: u16,
}

/// The ways a time is written.
#[derive(Clone, Copy, Debug)]
pub enum TimeText {
    /// `2026-11-29T02:13:49.123Z` (RFC 5424's TIMESTAMP, `%{time}`).
    Rfc3339,
    /// `29/Nov/2026:02:13:49.123` (haproxy's date, `%{time_haproxy}`).
    Haproxy,
    /// `Nov 29 02:13:49` (RFC 3164's TIMESTAMP, in UTC).
    Rfc3164,
}

/// One second's texts, made once a second on each thread that writes lines.
#[derive(Default)]
pub(super) struct Second {
    secs: u64,
    rfc3339: Literal,
    haproxy: Literal,
    rfc3164: Literal,
}

/// What each thread that writes lines keeps: the wall clock's anchor, the
/// second's texts, and the line's buffer (allocated by its first line;
/// pages a line never reaches are never touched).
#[derive(Default)]
pub(super) struct Scratch {
    anchor: Option<Anchor>,
    second: Option<Second>,
    buf: Option<Box<[u8; BUF]>>,
}

/// The wall clock read at `at`: a line's time is the anchor's plus the
/// monotonic time since, for a second at most.
#[derive(Clone, Copy)]
struct Anchor {
    at: Instant,
    /// Nanoseconds since the epoch (a `u64` holds them to the year 2554).
    wall: u64,
}

impl Scratch {
    /// Nothing yet (a thread's first line fills it).
    pub(super) const EMPTY: Scratch = Scratch {
        anchor: None,
        second: None,
        buf: None,
    };

    /// A line for a request that ended at `end`, written by `fill`; the
    /// finished line goes to `send`.
    pub(super) fn write(
        &mut self,
        end: Instant,
        fill: impl FnOnce(Line<'_>) -> usize,
        send: impl FnOnce(&[u8]),
    ) {
        let now = self.time_at(end);
        let buf = self.buf.get_or_insert_with(zeroed);
        let second = Second::at(&mut self.second, now.secs);
        let len = fill(Line::new(buf, second, now));
        if let Some(line) = buf.get(..len) {
            send(line);
        }
    }

    /// The wall time at `end`, from the anchor while it is under a second
    /// old (read again otherwise, or when `end` is before it).
    fn time_at(&mut self, end: Instant) -> LineTime {
        if let Some(a) = &self.anchor
            && let Some(since) = end.checked_duration_since(a.at)
            && since.as_secs() == 0
        {
            return LineTime::of_nanos(a.wall + u64::from(since.subsec_nanos()));
        }
        let wall = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.anchor = Some(Anchor { at: end, wall });
        LineTime::of_nanos(wall)
    }
}

impl LineTime {
    fn of_nanos(nanos: u64) -> LineTime {
        LineTime {
            secs: nanos / 1_000_000_000,
            millis: (nanos % 1_000_000_000 / 1_000_000) as u16,
        }
    }

    fn of(since_epoch: Duration) -> LineTime {
        LineTime::of_nanos(u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl Second {
    /// The texts of `secs`, made now if `kept` holds another second's (no
    /// call while it is the same second).
    #[inline]
    fn at(kept: &mut Option<Second>, secs: u64) -> &Second {
        if kept.as_ref().is_some_and(|s| s.secs != secs) {
            *kept = None;
        }
        kept.get_or_insert_with(|| Second::of(secs))
    }

    #[cold]
    fn of(secs: u64) -> Second {
        let ((year, month, day), (h, m, s)) = civil(secs);
        let mon = MONTHS[usize::from(month - 1)];
        Second {
            secs,
            rfc3339: text(format!(
                "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}"
            )),
            haproxy: text(format!("{day:02}/{mon}/{year}:{h:02}:{m:02}:{s:02}")),
            rfc3164: text(format!("{mon} {day:2} {h:02}:{m:02}:{s:02}")),
        }
    }
}

fn text(s: String) -> Literal {
    Literal::of(s.as_bytes())
}

/// A line's buffer, on the heap (64 KiB; pages a line never reaches are
/// never touched).
fn zeroed<const SIZE: usize>() -> Box<[u8; SIZE]> {
    let bytes = vec![0xAA; SIZE].into_boxed_slice();
    match bytes.try_into() {
        Ok(buf) => buf,
        Err(_) => unreachable!("a vector of SIZE bytes is SIZE bytes"),
    }
}

/// What `write` appends to a line in a buffer of `SIZE` bytes, cut at
/// `SIZE - SLACK` (tests and the `log_template` fuzz target, which checks
/// the cursor against a plain concatenation).
pub fn written<const SIZE: usize>(write: impl FnOnce(&mut Line<'_, SIZE>)) -> Vec<u8> {
    let second = Second::of(0);
    let mut buf = zeroed::<SIZE>();
    let mut line = Line::new(&mut buf, &second, LineTime::of(Duration::ZERO));
    write(&mut line);
    let len = line.finish();
    buf[..len].to_vec()
}

/// `t` as `text` says (tests).
pub fn time_text(t: SystemTime, text: TimeText) -> String {
    let now = LineTime::of(t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default());
    let second = Second::of(now.secs);
    let mut buf = [0; 128];
    let mut line = Line::<128>::new(&mut buf, &second, now);
    line.time(text);
    let len = line.finish();
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The UTC date and time of `secs` since the epoch (Howard Hinnant's
/// days-from-civil, inverted).
fn civil(secs: u64) -> ((i64, u8, u8), (u64, u64, u64)) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u8;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
    let year = yoe + era * 400 + i64::from(month <= 2);
    ((year, month, day), (rem / 3600, rem % 3600 / 60, rem % 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_each_format_wants() {
        // 2026-11-29T02:13:49.123Z
        let t = std::time::UNIX_EPOCH + Duration::from_millis(1_795_918_429_123);
        assert_eq!(time_text(t, TimeText::Rfc3339), "2026-11-29T02:13:49.123Z");
        assert_eq!(time_text(t, TimeText::Rfc3164), "Nov 29 02:13:49");
        assert_eq!(time_text(t, TimeText::Haproxy), "29/Nov/2026:02:13:49.123");
        let leap = std::time::UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(&time_text(leap, TimeText::Rfc3339)[..10], "2000-02-29");
        let next = t + Duration::from_millis(1_005);
        assert_eq!(
            time_text(next, TimeText::Rfc3339),
            "2026-11-29T02:13:50.128Z"
        );
    }

    #[test]
    fn a_threads_second_texts_are_made_once_a_second() {
        let mut kept = None;
        let first = Second::at(&mut kept, 1_795_918_429).rfc3164.clone();
        assert_eq!(first.as_bytes(), b"Nov 29 02:13:49");
        kept.as_mut().expect("kept").rfc3164 = Literal::of(b"marked");
        assert_eq!(
            Second::at(&mut kept, 1_795_918_429).rfc3164.as_bytes(),
            b"marked",
            "kept within its second"
        );
        assert_eq!(
            Second::at(&mut kept, 1_795_918_430).rfc3164.as_bytes(),
            b"Nov 29 02:13:50"
        );
    }

    /// Every length from 0 to 40 by `put`, literals short and long, bytes
    /// and numbers: the line is exactly what was appended, in order.
    #[test]
    fn pieces_append_exactly_their_bytes() {
        let mut want = Vec::new();
        let source: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        let got = written::<4096>(|line| {
            for n in 0..=40 {
                line.put(&source[..n]);
                want.extend_from_slice(&source[..n]);
                line.byte(b'|');
                want.push(b'|');
            }
            for text in [&b""[..], b" 0/0/0/", &[b'x'; 32], &[b'y'; 33]] {
                line.literal(&Literal::of(text));
                want.extend_from_slice(text);
            }
            for n in [0, 7, 9, 10, 99, 100, 999, 1000, 9999, 10_000, u64::MAX] {
                line.number(n);
                want.extend_from_slice(n.to_string().as_bytes());
            }
        });
        assert_eq!(got, want);
    }

    /// A line past its buffer keeps what fits and takes nothing more: a
    /// value, a literal, a byte at the end are cut, never out of bounds.
    #[test]
    fn a_full_line_is_cut_not_overrun() {
        let got = written::<{ 40 + SLACK }>(|line| {
            line.put(&[b'a'; 30]);
            line.literal(&Literal::of(b"0123456789"));
        });
        assert_eq!(got, [&[b'a'; 30][..], b"0123456789"].concat());
        let got = written::<{ 40 + SLACK }>(|line| {
            line.put(&[b'a'; 30]);
            line.literal(&Literal::of(b"0123456789"));
            line.put(b"more");
            line.literal(&Literal::of(b"x"));
            line.byte(b'!');
            line.number(12);
        });
        assert_eq!(got.len(), 40);
        let got = written::<{ 32 + SLACK }>(|line| {
            line.put(&[b'b'; 30]);
            line.put(b"0123456789");
        });
        assert_eq!(got, [&[b'b'; 30][..], b"01"].concat());
        let got = written::<BUF>(|line| {
            line.put(&vec![b'c'; LINE_MAX + 100]);
        });
        assert_eq!(got.len(), LINE_MAX, "cut at LINE_MAX");
    }

    /// A line's time comes from the anchor for a second, then from the wall
    /// clock again; an end before the anchor reads the wall clock too.
    #[test]
    fn a_lines_time_follows_the_anchor_for_a_second() {
        let mut scratch = Scratch::default();
        let start = Instant::now();
        let first = scratch.time_at(start);
        let anchor = scratch.anchor.expect("anchored");
        assert_eq!(anchor.at, start);
        let later = scratch.time_at(start + Duration::from_millis(500));
        let want = LineTime::of_nanos(anchor.wall + 500_000_000);
        assert_eq!((later.secs, later.millis), (want.secs, want.millis));
        assert_eq!(scratch.anchor.expect("kept").at, start, "not read again");
        scratch.time_at(start + Duration::from_secs(2));
        assert_eq!(
            scratch.anchor.expect("read again").at,
            start + Duration::from_secs(2)
        );
        assert!(first.secs > 1_700_000_000, "the wall clock's time");
    }
}
