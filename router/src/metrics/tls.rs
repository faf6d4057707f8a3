//! TLS's metrics: handshakes by kind and group, failures by reason, the
//! certificates and their expiry, ACME's orders, OCSP stapling.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use prometheus::{
    register_int_counter_vec_with_registry as counters,
    register_int_counter_with_registry as counter, register_int_gauge_vec_with_registry as gauges,
    register_int_gauge_with_registry as gauge,
};

/// The `group` label values of `router_tls_handshakes_total`: the key-exchange
/// groups the router can agree on (`crate::tls::groups` names them the same),
/// then `none` (a resumption without one).
pub const TLS_GROUPS: [&str; 7] = [
    "x25519mlkem768",
    "secp256r1mlkem768",
    "mlkem768",
    "x25519",
    "secp256r1",
    "secp384r1",
    "none",
];

/// TLS: handshakes, failures by reason, certificates. The expiry gauge is labelled
/// by alias, so its series count is the number of alias certificates (plus one for
/// the default certificate, `alias="default"`); each is removed with its certificate.
#[derive(Clone)]
pub struct TlsMetrics {
    /// `router_tls_handshakes_total{kind,group}`: full, resumed, by the
    /// key-exchange group agreed ([`TLS_GROUPS`]; resolved once).
    handshakes: [[IntCounter; TLS_GROUPS.len()]; 2],
    failures: IntCounterVec,
    pub certificates: IntGauge,
    certificate_errors: IntCounterVec,
    expiry: IntGaugeVec,
    /// `router_acme_orders_total{result}`: issued, failed (see `crate::issuer`).
    acme_orders: [IntCounter; 2],
    /// `router_acme_challenges_answered_total`: HTTP-01 answers served.
    pub acme_challenges: IntCounter,
    /// `router_acme_certificates`: aliases served an ACME certificate.
    pub acme_certificates: IntGauge,
    /// `router_acme_order_failures{alias}`: failed orders in a row, for the
    /// aliases whose last order failed (a series only while it does).
    acme_failing: IntGaugeVec,
    /// `router_acme_peer_reachable{peer}`: 1 while the pair's other router
    /// answers the ACME calls (`acme.peer`), 0 once it has not for
    /// `acme.peer_timeout`; no series without a pair.
    acme_peer: IntGaugeVec,
    /// `router_tls_ocsp_fetches_total{result}`: `ok`, `peer`, or why nothing was
    /// stapled (see `crate::tls::ocsp::answer::OcspError::reason`, `fetch`).
    ocsp_fetches: IntCounterVec,
    /// `router_tls_ocsp_staple_timestamp_seconds{alias}`: the `thisUpdate` of
    /// the answer stapled for each alias (its age is `time()` minus this).
    ocsp_staple: IntGaugeVec,
    /// `router_tls_ocsp_staples`: certificates with an answer stapled.
    ocsp_staples: IntGauge,
}

impl TlsMetrics {
    pub(super) fn new(r: &Registry) -> prometheus::Result<TlsMetrics> {
        let (ocsp_fetches, ocsp_staple, ocsp_staples) = ocsp_metrics(r)?;
        let handshakes = counters!(
            "router_tls_handshakes_total",
            "Completed client handshakes, by kind (full, resumed) and key-exchange group",
            &["kind", "group"],
            r
        )?;
        Ok(TlsMetrics {
            handshakes: ["full", "resumed"]
                .map(|k| TLS_GROUPS.map(|g| handshakes.with_label_values(&[k, g]))),
            failures: counters!(
                "router_tls_handshake_failures_total",
                "Failed client handshakes, by reason",
                &["reason"],
                r
            )?,
            certificates: gauge!(
                "router_tls_certificates",
                "Alias certificates loaded (the default certificate not counted)",
                r
            )?,
            certificate_errors: counters!(
                "router_tls_certificate_errors_total",
                "Certificates or keys rejected, by reason (the previous one stays in service)",
                &["reason"],
                r
            )?,
            expiry: gauges!(
                "router_tls_certificate_expiry_timestamp_seconds",
                "notAfter of each loaded certificate, by alias (alert on this minus time())",
                &["alias"],
                r
            )?,
            acme_orders: {
                let orders = counters!(
                    "router_acme_orders_total",
                    "Certificate orders to the ACME CA, by result (issued, failed)",
                    &["result"],
                    r
                )?;
                ["issued", "failed"].map(|k| orders.with_label_values(&[k]))
            },
            acme_challenges: counter!(
                "router_acme_challenges_answered_total",
                "HTTP-01 challenges answered for the ACME CA",
                r
            )?,
            acme_certificates: gauge!(
                "router_acme_certificates",
                "Aliases served a certificate from the ACME CA",
                r
            )?,
            acme_failing: gauges!(
                "router_acme_order_failures",
                "Failed ACME orders in a row, by alias (only aliases whose last order failed)",
                &["alias"],
                r
            )?,
            acme_peer: gauges!(
                "router_acme_peer_reachable",
                "1 while the pair's other router answers ACME calls (acme.peer), 0 when it has not for acme.peer_timeout",
                &["peer"],
                r
            )?,
            ocsp_fetches,
            ocsp_staple,
            ocsp_staples,
        })
    }

    /// An OCSP fetch ended with `result` (`ok`, or a reason).
    pub fn ocsp_fetch(&self, result: &str) {
        self.ocsp_fetches.with_label_values(&[result]).inc();
    }

    /// The staple `alias` is served with: its `thisUpdate`, or none.
    pub fn ocsp_staple_shown(&self, alias: &str, this_update: Option<u64>) {
        match this_update {
            Some(t) => self
                .ocsp_staple
                .with_label_values(&[alias])
                .set(i64::try_from(t).unwrap_or(i64::MAX)),
            None => {
                let _ = self.ocsp_staple.remove_label_values(&[alias]);
            }
        }
    }

    pub fn ocsp_staples(&self, n: usize) {
        self.ocsp_staples.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// `alias`'s orders have failed `n` times in a row; 0: its last one did not.
    pub fn acme_failures(&self, alias: &str, n: u32) {
        if n == 0 {
            let _ = self.acme_failing.remove_label_values(&[alias]);
        } else {
            self.acme_failing
                .with_label_values(&[alias])
                .set(i64::from(n));
        }
    }

    /// Whether the pair's other router (`acme.peer`) answers.
    pub fn acme_peer(&self, peer: &str, up: bool) {
        self.acme_peer.with_label_values(&[peer]).set(i64::from(up));
    }

    /// An ACME order ended: issued (`true`) or failed.
    pub fn acme_order(&self, issued: bool) {
        self.acme_orders[usize::from(!issued)].inc();
    }

    #[cfg(test)]
    pub(crate) fn detached() -> TlsMetrics {
        TlsMetrics::new(&Registry::new()).unwrap_or_else(|_| unreachable!("fixed names"))
    }

    /// A completed handshake; `group` one of [`TLS_GROUPS`] (anything else is
    /// counted as the last, `none`).
    pub fn handshake(&self, resumed: bool, group: &str) {
        let g = TLS_GROUPS
            .iter()
            .position(|l| *l == group)
            .unwrap_or(TLS_GROUPS.len() - 1);
        self.handshakes[usize::from(resumed)][g].inc();
    }

    pub fn handshake_failed(&self, reason: &str) {
        self.failures.with_label_values(&[reason]).inc();
    }

    pub fn certificate_error(&self, reason: &str) {
        self.certificate_errors.with_label_values(&[reason]).inc();
    }

    pub fn set_expiry(&self, alias: &str, not_after: i64) {
        self.expiry.with_label_values(&[alias]).set(not_after);
    }

    pub fn forget_expiry(&self, alias: &str) {
        let _ = self.expiry.remove_label_values(&[alias]);
    }
}

/// OCSP stapling's (`crate::tls::ocsp`): fetches by result, each alias's
/// staple, how many certificates have one.
fn ocsp_metrics(r: &Registry) -> prometheus::Result<(IntCounterVec, IntGaugeVec, IntGauge)> {
    Ok((
        counters!(
            "router_tls_ocsp_fetches_total",
            "OCSP answers fetched for stapling, by result (ok, peer, or why none was stapled)",
            &["result"],
            r
        )?,
        gauges!(
            "router_tls_ocsp_staple_timestamp_seconds",
            "thisUpdate of the OCSP answer stapled for each alias (its age: time() minus this)",
            &["alias"],
            r
        )?,
        gauge!(
            "router_tls_ocsp_staples",
            "Certificates served with an OCSP answer stapled",
            r
        )?,
    ))
}
