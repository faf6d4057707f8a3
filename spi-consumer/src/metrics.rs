//! Consumer metrics, registered in the caller's Prometheus registry.
//!
//! Label sets are bounded: actions are the eight SPI actions plus `add_gear`,
//! `delete_gear`, `other` and `undecodable`; outcomes are the [`Disposition`] labels.
//!
//! [`Disposition`]: crate::consumer::Disposition

use prometheus::{
    Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

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
    /// Broker sources: connection state, reconnects, propagation time.
    pub source: SourceMetrics,
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
            source: SourceMetrics {
                connected: IntGauge::new(
                    "spi_broker_connected",
                    "1 while subscribed to the broker",
                )?,
                reconnects: IntCounter::new(
                    "spi_broker_reconnects_total",
                    "Broker sessions lost or refused (each is followed by a reconnect)",
                )?,
                propagation: Histogram::with_opts(
                    HistogramOpts::new(
                        "spi_route_propagation_seconds",
                        "From message received to change durable and live in the route table",
                    )
                    .buckets(vec![
                        0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0,
                    ]),
                )?,
            },
        };
        registry.register(Box::new(m.source.connected.clone()))?;
        registry.register(Box::new(m.source.reconnects.clone()))?;
        registry.register(Box::new(m.source.propagation.clone()))?;
        registry.register(Box::new(m.events.clone()))?;
        registry.register(Box::new(m.dead_letters.clone()))?;
        registry.register(Box::new(m.persist_failures.clone()))?;
        registry.register(Box::new(m.last_event.clone()))?;
        Ok(m)
    }
}

/// Broker-side metrics of a source.
#[derive(Clone)]
pub struct SourceMetrics {
    /// `spi_broker_connected`: 1 while subscribed.
    pub connected: IntGauge,
    /// `spi_broker_reconnects_total`.
    pub reconnects: IntCounter,
    /// `spi_route_propagation_seconds`: message received → change durable and live.
    pub propagation: Histogram,
}
