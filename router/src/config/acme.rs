//! The checks of `acme:` (its settings type is the issuer's own,
//! `crate::issuer::settings`, as each module owns its settings).

use super::*;

impl Config {
    /// `acme`: a directory over HTTPS, served where the CA will look.
    pub(super) fn validate_acme(&self) -> Result<(), Invalid> {
        let a = &self.acme;
        let Some(directory) = &a.directory else {
            return Ok(());
        };
        if !directory.starts_with("https://") || directory.len() <= "https://".len() {
            return Err((
                "acme.directory",
                "the CA's directory URL, https://...".into(),
            ));
        }
        match a.challenge {
            AcmeChallenge::Http01 if self.listen.http.is_none() => {
                return Err((
                    "acme.challenge",
                    "http-01 answers are served on listen.http: it is needed".into(),
                ));
            }
            AcmeChallenge::TlsAlpn01 if self.listen.https.is_none() => {
                return Err((
                    "acme.challenge",
                    "tls-alpn-01 answers are served on listen.https: it is needed".into(),
                ));
            }
            _ => {}
        }
        if let Some(c) = a.contact.iter().find(|c| !c.starts_with("mailto:")) {
            return Err(("acme.contact", format!("{c:?}: contacts are mailto: URLs")));
        }
        for (field, d) in [
            ("acme.check_interval", a.check_interval),
            ("acme.request_timeout", a.request_timeout),
            ("acme.order_timeout", a.order_timeout),
            ("acme.retry_after", a.retry_after),
            ("acme.peer_timeout", a.peer_timeout),
        ] {
            if d < Duration::from_secs(1) {
                return Err((field, "must be at least 1s".into()));
            }
        }
        self.validate_acme_pair()
    }

    /// `acme.peer`: an admin address, this router's name, and a token the
    /// peer's `/acme/*` calls (which carry private keys) are guarded by.
    pub(super) fn validate_acme_pair(&self) -> Result<(), Invalid> {
        let a = &self.acme;
        let Some(peer) = &a.peer else {
            return Ok(());
        };
        self.check_peer(("acme.peer", peer), ("acme.node", a.node))?;
        Ok(())
    }
}
