//! A blind mutation loop on stable, for minutes between nightly builds: takes a
//! target's corpus, mutates inputs at random (flips, HTTP-shaped insertions,
//! deletions, splices) and runs the target's check on each until one fails or the
//! time is up; the failing input is written to `$TMPDIR/mutate-TARGET-N`. No
//! coverage guidance: it finds shallow disagreements fast (four of this crate's
//! findings), and libFuzzer finds the rest.
//!
//! `cargo run -p fuzz --example mutate -- client_stream 120`

use std::time::Instant;

/// Bytes worth inserting into HTTP/1 streams.
const DICTIONARY: [&[u8]; 12] = [
    b"\r\n",
    b"\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Content-Length: 5\r\n",
    b"HTTP/1.0",
    b"HTTP/1.1",
    b"0\r\n\r\n",
    b"Connection: close\r\n",
    b"Trailer: x\r\n",
    b";",
    b" ",
    b"\x80",
];

/// xorshift64: fixed seed, the same run for the same corpus.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 as usize
    }
}

fn mutate(rng: &mut Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut d = corpus[rng.next() % corpus.len()].clone();
    for _ in 0..1 + rng.next() % 4 {
        let at = if d.is_empty() {
            0
        } else {
            rng.next() % d.len()
        };
        match rng.next() % 4 {
            0 if !d.is_empty() => d[at] = rng.next() as u8,
            1 => {
                let w = DICTIONARY[rng.next() % DICTIONARY.len()];
                d.splice(at..at, w.iter().copied());
            }
            2 if !d.is_empty() => {
                let end = (at + 1 + rng.next() % 8).min(d.len());
                d.drain(at..end);
            }
            _ => {
                let other = &corpus[rng.next() % corpus.len()];
                if !other.is_empty() {
                    let s = rng.next() % other.len();
                    let e = (s + 1 + rng.next() % 64).min(other.len());
                    d.splice(at..at, other[s..e].iter().copied());
                }
            }
        }
    }
    d
}

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_default();
    let seconds: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(60);
    let Some(check) = fuzz::check(&target) else {
        eprintln!("usage: mutate TARGET [SECONDS]");
        return std::process::ExitCode::from(2);
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(&target);
    let corpus: Vec<Vec<u8>> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| std::fs::read(e.path()).ok())
            .collect(),
        Err(e) => {
            eprintln!("{}: {e}", dir.display());
            return std::process::ExitCode::from(2);
        }
    };
    if corpus.is_empty() {
        eprintln!("{}: empty", dir.display());
        return std::process::ExitCode::from(2);
    }
    std::panic::set_hook(Box::new(|_| {}));
    let (start, mut rng) = (Instant::now(), Rng(0x1234_5678));
    let mut n = 0u64;
    while start.elapsed().as_secs() < seconds {
        let input = mutate(&mut rng, &corpus);
        n += 1;
        if std::panic::catch_unwind(|| check(&input)).is_err() {
            let path = std::env::temp_dir().join(format!("mutate-{target}-{n}"));
            let _ = std::fs::write(&path, &input);
            println!("{n} inputs; failed: {}", path.display());
            return std::process::ExitCode::FAILURE;
        }
    }
    println!("{n} inputs, none failed");
    std::process::ExitCode::SUCCESS
}
