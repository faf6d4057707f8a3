//! `GET /audit`: the last admin actions (who, what, result), the ACME ring, and the
//! refused attempts in a ring of their own.

use super::*;

/// The last admin actions, newest last, for `/audit` and the status page; the
/// refused attempts in a ring of their own, so that they never evict an action.
pub struct Audit {
    entries: Ring<AuditEntry>,
    refused: Ring<AuditEntry>,
    /// ACME's actions (orders, certificates taken from the pair's peer, the
    /// peer's calls): a ring of their own, so that renewals at scale never
    /// evict an operator's action.
    acme: Ring<AuditEntry>,
}

impl Default for Audit {
    fn default() -> Audit {
        Audit {
            entries: Ring::new(AUDIT_LEN),
            refused: Ring::new(AUDIT_LEN),
            acme: Ring::new(AUDIT_LEN),
        }
    }
}

/// How many actions [`Audit`] keeps.
pub(super) const AUDIT_LEN: usize = 200;

#[derive(Clone, Debug, Serialize)]
pub struct AuditEntry {
    /// Seconds since the Unix epoch.
    pub at: u64,
    pub client: String,
    pub action: String,
    pub target: String,
    pub result: String,
}

impl AuditEntry {
    fn now(client: &str, action: &str, target: &str, result: &str) -> AuditEntry {
        AuditEntry {
            at: unix_now(),
            client: client.into(),
            action: action.into(),
            target: target.into(),
            result: result.into(),
        }
    }
}

impl Audit {
    pub fn record(&self, client: &str, action: &str, target: &str, result: &str) {
        tracing::info!(client, action, target, result, "admin action");
        self.entries
            .push(AuditEntry::now(client, action, target, result));
    }

    pub fn entries(&self) -> Vec<AuditEntry> {
        self.entries.list()
    }

    /// An ACME action (`client`: the peer's address, or `issuer`).
    pub fn acme(&self, client: &str, action: &str, target: &str, result: &str) {
        tracing::info!(client, action, target, result, "ACME action");
        self.acme
            .push(AuditEntry::now(client, action, target, result));
    }

    pub fn acme_entries(&self) -> Vec<AuditEntry> {
        self.acme.list()
    }

    /// A refused attempt: logged, and kept in the refused ring only.
    pub fn refuse(&self, client: &str, target: &str, result: &str) {
        tracing::warn!(client, target, result, "admin call refused");
        self.refused
            .push(AuditEntry::now(client, "refused", target, result));
    }

    pub fn refused(&self) -> Vec<AuditEntry> {
        self.refused.list()
    }
}
