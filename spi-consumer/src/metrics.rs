//! Consumer metrics, registered in the caller's Prometheus registry.
//!
//! Label sets are bounded: actions are the eight SPI actions plus `add_gear`,
//! `delete_gear`, `other` and `undecodable`; outcomes are the [`Disposition`] labels.
//!
//! [`Disposition`]: crate::consumer::Disposition

use prometheus::{Gauge, IntCounter, IntCounterVec, Opts, Registry};

#[derive(Clone)]
pub struct Metrics {
    /// `spi_events_total{action, outcome}`.
    pub events: IntCounterVec,
    /// `spi_dead_letters_total`.
    pub dead_letters: IntCounter,
    /// `spi_persist_failures_total`: saves that failed (the batch was not acknowledged).
    pub persist_failures: IntCounter,
    /// `spi_last_event_timestamp_seconds`: when the last message arrived.
    pub last_event: Gauge,
}

impl Metrics {
    pub fn new(registry: &Registry) -> prometheus::Result<Metrics> {
        let m = Metrics {
            events: IntCounterVec::new(
                Opts::new("spi_events_total", "Routing events by action and outcome"),
                &["action", "outcome"],
            )?,
            dead_letters: IntCounter::new(
                "spi_dead_letters_total",
                "Events that could not be decoded and were parked",
            )?,
            persist_failures: IntCounter::new(
                "spi_persist_failures_total",
                "State saves that failed; the events were not acknowledged",
            )?,
            last_event: Gauge::new(
                "spi_last_event_timestamp_seconds",
                "Unix time the last routing event arrived",
            )?,
        };
        registry.register(Box::new(m.events.clone()))?;
        registry.register(Box::new(m.dead_letters.clone()))?;
        registry.register(Box::new(m.persist_failures.clone()))?;
        registry.register(Box::new(m.last_event.clone()))?;
        Ok(m)
    }
}
