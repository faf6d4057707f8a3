//! Session tickets that both routers of a pair can decrypt, so clients resume after
//! the virtual IP moves.
//!
//! Both routers read the same secret file (`tls.session_ticket_key_file`, e.g.
//! `openssl rand 48 > ticket.key`, copied to both hosts, mode 0600). Ticket keys
//! are derived from it per period (`tls.session_ticket_rotation`, default 1 h):
//! `key(e) = HKDF-SHA256(salt = "router session ticket v2", ikm = secret,
//! info = e as 8 big-endian bytes)`, 32 bytes, for period number `e` (RFC 5869).
//! Tickets are sealed with AES-256-GCM under the current period's key and opened
//! under the previous, current or next one (one period of lifetime, and tolerance
//! for clocks that disagree a little between the two hosts). So keys rotate by
//! themselves, in step on both routers, and a stolen ticket key is useless after
//! two periods. Replacing the file rotates the secret itself: it is re-read when
//! its modification time changes (checked by [`SharedTicketer::reload`]).
//!
//! A ticket is `"RT2" ‖ e (8 bytes) ‖ nonce (12 bytes) ‖ sealed state ‖ tag`; the
//! first 11 bytes are authenticated as associated data. The sealing is aws-lc-rs's
//! AEAD (the same library rustls uses here); nothing cryptographic is ours.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hkdf::{HKDF_SHA256, Salt};
use rustls::server::ProducesTickets;

/// Version 2: keys by HKDF (version 1 hashed the secret with SHA-256; its tickets
/// are refused and those clients make a full handshake once).
const MAGIC: &[u8; 3] = b"RT2";
const SALT: &[u8] = b"router session ticket v2";
const HEADER: usize = 3 + 8;

#[derive(Debug, thiserror::Error)]
pub enum TicketKeyError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path}: holds {len} bytes; at least 32 random bytes are needed (openssl rand 48 > FILE)"
    )]
    TooShort { path: PathBuf, len: usize },
}

/// Tickets from a shared secret file, with keys rotating every period.
pub struct SharedTicketer {
    path: PathBuf,
    secret: ArcSwap<Vec<u8>>,
    modified: Mutex<Option<SystemTime>>,
    period: Duration,
}

impl std::fmt::Debug for SharedTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTicketer")
            .field("path", &self.path)
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

impl SharedTicketer {
    pub fn open(path: &Path, period: Duration) -> Result<SharedTicketer, TicketKeyError> {
        let (secret, modified) = read_secret(path)?;
        Ok(SharedTicketer {
            path: path.to_path_buf(),
            secret: ArcSwap::from_pointee(secret),
            modified: Mutex::new(modified),
            period: period.max(Duration::from_secs(1)),
        })
    }

    /// The secret as last read: other keys the pair must share derive from it
    /// (the HTTP/3 stateless-reset and address-validation keys, see
    /// [`crate::quic`]).
    pub fn secret(&self) -> Arc<Vec<u8>> {
        self.secret.load_full()
    }

    /// Re-reads the file if it changed. A broken new file is logged and the old
    /// secret stays.
    pub fn reload(&self) {
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        let mut seen = self.modified.lock().unwrap_or_else(|p| p.into_inner());
        if modified.is_none() || modified == *seen {
            return;
        }
        match read_secret(&self.path) {
            Ok((secret, m)) => {
                self.secret.store(std::sync::Arc::new(secret));
                *seen = m;
                tracing::info!(file = %self.path.display(), "session ticket secret reloaded");
            }
            Err(e) => {
                // Logged once per change of the file, not on every check.
                *seen = modified;
                tracing::error!(error = %e, "session ticket secret not reloaded; the previous one stays");
            }
        }
    }

    fn epoch_at(&self, t: SystemTime) -> u64 {
        let secs = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        secs / self.period.as_secs().max(1)
    }

    fn key(&self, epoch: u64) -> Option<LessSafeKey> {
        let secret = self.secret.load();
        derive_key(&secret, epoch).map(LessSafeKey::new)
    }

    fn seal(&self, plain: &[u8], now: SystemTime) -> Option<Vec<u8>> {
        let epoch = self.epoch_at(now);
        let key = self.key(epoch)?;
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(HEADER + NONCE_LEN + plain.len() + 16);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&epoch.to_be_bytes());
        let aad: [u8; HEADER] = out.as_slice().try_into().ok()?;
        out.extend_from_slice(&nonce);
        let mut body = plain.to_vec();
        key.seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut body,
        )
        .ok()?;
        out.extend_from_slice(&body);
        Some(out)
    }

    fn unseal(&self, ticket: &[u8], now: SystemTime) -> Option<Vec<u8>> {
        let header: [u8; HEADER] = ticket.get(..HEADER)?.try_into().ok()?;
        if &header[..3] != MAGIC {
            return None;
        }
        let epoch = u64::from_be_bytes(header[3..].try_into().ok()?);
        let current = self.epoch_at(now);
        if epoch + 1 < current || epoch > current + 1 {
            return None;
        }
        let nonce: [u8; NONCE_LEN] = ticket.get(HEADER..HEADER + NONCE_LEN)?.try_into().ok()?;
        let mut body = ticket.get(HEADER + NONCE_LEN..)?.to_vec();
        let key = self.key(epoch)?;
        let plain = key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(header),
                &mut body,
            )
            .ok()?;
        Some(plain.to_vec())
    }
}

impl ProducesTickets for SharedTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.period.as_secs()).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal(plain, SystemTime::now())
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.unseal(cipher, SystemTime::now())
    }
}

fn read_secret(path: &Path) -> Result<(Vec<u8>, Option<SystemTime>), TicketKeyError> {
    let io = |source| TicketKeyError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bytes = std::fs::read(path).map_err(io)?;
    if bytes.len() < 32 {
        return Err(TicketKeyError::TooShort {
            path: path.to_path_buf(),
            len: bytes.len(),
        });
    }
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    Ok((bytes, modified))
}

/// The ticket key of period `epoch` (see the module doc).
fn derive_key(secret: &[u8], epoch: u64) -> Option<UnboundKey> {
    let prk = Salt::new(HKDF_SHA256, SALT).extract(secret);
    let epoch = epoch.to_be_bytes();
    let info: [&[u8]; 1] = [&epoch];
    let okm = prk.expand(&info, &AES_256_GCM).ok()?;
    Some(UnboundKey::from(okm))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticketer(secret: &[u8], tag: &str) -> (SharedTicketer, PathBuf) {
        let dir = std::env::temp_dir().join(format!("tickets-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("ticket.key");
        std::fs::write(&path, secret).expect("write");
        (
            SharedTicketer::open(&path, Duration::from_secs(3600)).expect("open"),
            dir,
        )
    }

    /// The key of period 482 for a known secret equals what an independent HKDF
    /// gives: `openssl kdf -keylen 32 -kdfopt digest:SHA256
    /// -kdfopt key:secret-secret-secret-secret-secret-32
    /// -kdfopt salt:"router session ticket v2" -kdfopt hexinfo:00000000000001e2 HKDF`.
    #[test]
    fn ticket_keys_are_hkdf_sha256() {
        const OPENSSL: [u8; 32] = [
            0x93, 0xE7, 0xDD, 0x40, 0xC8, 0x43, 0xEE, 0x98, 0x30, 0x5D, 0xF2, 0xE4, 0x28, 0x6A,
            0x54, 0xD4, 0x19, 0x57, 0xA7, 0x93, 0x9D, 0x14, 0xC9, 0xDE, 0xC3, 0x1E, 0x81, 0x19,
            0x1A, 0x2D, 0x94, 0xE5,
        ];
        let seal = |key: UnboundKey| {
            let mut data = b"same plaintext, same nonce".to_vec();
            LessSafeKey::new(key)
                .seal_in_place_append_tag(
                    Nonce::assume_unique_for_key([0u8; NONCE_LEN]),
                    Aad::empty(),
                    &mut data,
                )
                .expect("seal");
            data
        };
        let ours = derive_key(b"secret-secret-secret-secret-secret-32", 482).expect("derive");
        let theirs = UnboundKey::new(&AES_256_GCM, &OPENSSL).expect("key");
        assert_eq!(seal(ours), seal(theirs));
        let next = derive_key(b"secret-secret-secret-secret-secret-32", 483).expect("derive");
        let theirs = UnboundKey::new(&AES_256_GCM, &OPENSSL).expect("key");
        assert_ne!(seal(next), seal(theirs), "each period has its own key");
    }

    #[test]
    fn two_routers_with_one_secret_open_each_others_tickets() {
        let (a, da) = ticketer(&[7u8; 48], "a");
        let (b, db) = ticketer(&[7u8; 48], "b");
        let (other, dc) = ticketer(&[8u8; 48], "c");
        let now = SystemTime::now();
        let t = a.seal(b"session state", now).expect("seal");
        assert_eq!(b.unseal(&t, now).as_deref(), Some(&b"session state"[..]));
        assert_eq!(other.unseal(&t, now), None, "another secret cannot open it");
        // One period later still fine (rotation), two periods later not.
        let hour = Duration::from_secs(3600);
        assert!(b.unseal(&t, now + hour).is_some());
        assert!(
            b.unseal(&t, now + 2 * hour + Duration::from_secs(1))
                .is_none()
        );
        // Tampering is detected; garbage is refused, never a panic.
        let mut bad = t.clone();
        if let Some(last) = bad.last_mut() {
            *last ^= 1;
        }
        assert_eq!(b.unseal(&bad, now), None);
        for junk in [&b""[..], b"RT1", b"RT1\0\0\0\0\0\0\0\0", &[0u8; 100]] {
            assert_eq!(b.unseal(junk, now), None);
        }
        for d in [da, db, dc] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn a_replaced_secret_file_is_picked_up_and_a_broken_one_ignored() {
        let (t, dir) = ticketer(&[1u8; 48], "reload");
        let now = SystemTime::now();
        let old = t.seal(b"state", now).expect("seal");
        let path = dir.join("ticket.key");
        // A broken file (too short) keeps the old secret.
        std::fs::write(&path, b"short").expect("write");
        set_mtime_later(&path);
        t.reload();
        assert!(t.unseal(&old, now).is_some(), "old secret still in use");
        // A new secret: old tickets no longer open, new ones do.
        std::fs::write(&path, [2u8; 48]).expect("write");
        set_mtime_later(&path);
        t.reload();
        assert!(t.unseal(&old, now).is_none());
        let new = t.seal(b"state", now).expect("seal");
        assert!(t.unseal(&new, now).is_some());
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Moves the file's mtime forward, so a rewrite within the clock's granularity
    /// still counts as a change.
    fn set_mtime_later(path: &Path) {
        static BUMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let n = BUMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let f = std::fs::File::options()
            .write(true)
            .open(path)
            .expect("open");
        f.set_modified(SystemTime::now() + Duration::from_secs(10 * n))
            .expect("mtime");
    }

    #[test]
    fn short_secret_is_refused() {
        let dir = std::env::temp_dir().join(format!("tickets-short-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("k");
        std::fs::write(&path, b"too short").expect("write");
        let e = SharedTicketer::open(&path, Duration::from_secs(60)).expect_err("short");
        assert!(e.to_string().contains("at least 32"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
