//! When an alias's certificate is renewed: at a moment the CA picks, when it
//! offers ACME Renewal Information (RFC 9773: Let's Encrypt does), else at two
//! thirds of its lifetime.
//!
//! The CA is asked for the window soon after a certificate is served here and
//! then again when it says (`Retry-After`, kept between a minute and a day).
//! The moment is drawn at random in the window, as RFC 9773 asks, so that a
//! CA's renewals spread out. A CA without renewal information costs nothing:
//! `instant-acme` sees it in the directory and sends no request.

use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use acme::ari::Window;

/// What the manager knows of one alias's certificate in service.
pub(super) struct Held {
    pub not_after: i64,
    pub issued_at: i64,
    /// The CA's pick in its renewal window (ARI), when it gave one.
    pub ari: Option<i64>,
    /// When to ask the CA for the window (again).
    pub ask_at: Instant,
}

/// The shortest and longest wait before the CA is asked again.
const ASK_AGAIN: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(24 * 3600));
/// The wait after a failed question (the CA down, say).
const ASK_AFTER_ERROR: Duration = Duration::from_secs(3600);

impl Held {
    pub fn new(not_after: i64, issued_at: i64) -> Held {
        Held {
            not_after,
            issued_at,
            ari: None,
            ask_at: Instant::now(),
        }
    }

    /// When renewal is due (seconds since the epoch).
    pub fn renew_at(&self) -> i64 {
        self.ari
            .unwrap_or(self.issued_at + (self.not_after - self.issued_at) * 2 / 3)
    }

    /// The CA's answer: its window (a moment in it taken), none (no renewal
    /// information for this certificate: not asked again for a day), or an error.
    pub fn answered(&mut self, answer: Result<Option<Window>, acme::AcmeError>) {
        let now = Instant::now();
        self.ask_at = match answer {
            Ok(Some(w)) => {
                self.ari = Some(pick(w.start, w.end));
                now + w.ask_again.clamp(ASK_AGAIN.0, ASK_AGAIN.1)
            }
            Ok(None) => now + ASK_AGAIN.1,
            Err(e) => {
                tracing::debug!(error = %e, "ACME renewal information not read");
                now + ASK_AFTER_ERROR
            }
        };
    }
}

/// A moment drawn at random in `[start, end]`.
pub(super) fn pick(start: i64, end: i64) -> i64 {
    if end <= start {
        return start;
    }
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let span = u64::try_from(end - start).unwrap_or(0);
    start + i64::try_from(random % (span + 1)).unwrap_or(0)
}

/// A question to the CA ended: the alias and the answer.
pub(super) type Asked = (String, Result<Option<Window>, acme::AcmeError>);

/// Asks the CA for `alias`'s certificate's renewal window.
pub(super) async fn ask(client: Arc<acme::Client>, alias: String, chain_pem: String) -> Asked {
    let answer = client.renewal_window(&chain_pem).await;
    (alias, answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cas_window_wins_over_two_thirds_and_a_pick_stays_in_it() {
        let mut held = Held::new(1_000 + 90, 1_000);
        assert_eq!(held.renew_at(), 1_060, "two thirds of the lifetime");
        held.answered(Ok(Some(Window {
            start: 1_010,
            end: 1_020,
            ask_again: Duration::from_secs(1),
        })));
        let at = held.renew_at();
        assert!((1_010..=1_020).contains(&at), "{at}");
        assert!(
            held.ask_at >= Instant::now() + Duration::from_secs(59),
            "asked again no sooner than a minute"
        );
        for _ in 0..100 {
            assert!((5..=9).contains(&pick(5, 9)));
        }
        assert_eq!(pick(7, 3), 7);
        // No information: the window kept, asked again in a day.
        held.answered(Ok(None));
        assert_eq!(held.renew_at(), at);
        assert!(held.ask_at > Instant::now() + Duration::from_secs(23 * 3600));
    }
}
