//! Routing events through a real RabbitMQ (AMQP 0-9-1) into the live router.

use std::time::Duration;

use e2e::rabbitmq::RabbitMq;
use e2e::{Backend, TestRouter, events};
use lapin::options::{BasicPublishOptions, ExchangeDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};

async fn connect(rmq: &RabbitMq) -> Connection {
    // The port opens a moment before the node accepts logins: retry briefly.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match Connection::connect(&rmq.uri(), ConnectionProperties::default()).await {
            Ok(c) => return c,
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot connect to RabbitMQ: {e}"),
        }
    }
}

async fn publish(conn: &Connection, exchange: &str, key: &str, bodies: &[String]) {
    let ch = conn.create_channel().await.expect("channel");
    for b in bodies {
        ch.basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            b.as_bytes(),
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish");
    }
}

#[tokio::test]
async fn events_from_rabbitmq_reach_the_router_via_an_exchange() {
    let rmq = RabbitMq::start();
    let conn = connect(&rmq).await;
    // The broker side publishes to a topic exchange; the router's queue is bound to it.
    conn.create_channel()
        .await
        .expect("channel")
        .exchange_declare(
            "routinginfo".into(),
            ExchangeKind::Topic,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("exchange");
    let b = Backend::start().await;
    let spi = format!(
        "spi:\n  source: amqp\n  amqp:\n    uris: [\"{}\"]\n    queue: routinginfo.router-a\n    exchange: routinginfo\n",
        rmq.uri()
    );
    let root = e2e::tempdir("rmq");
    let r = TestRouter::start_with_spi(root.clone(), &spi, "").await;
    e2e::eventually("subscribed", Duration::from_secs(60), async || {
        r.metric("spi_broker_connected").await == Some(1.0)
    })
    .await;
    let poison =
        std::fs::read_to_string(e2e::fixtures().join("93-synthetic-missing-public_port.yaml"))
            .expect("fixture");
    publish(
        &conn,
        "routinginfo",
        "routing.app",
        &[
            events::add_lb("first", "demo", b.addr),
            poison,
            events::add_lb("second", "demo", b.addr),
        ],
    )
    .await;
    r.wait_route("ha-second-demo.example.com").await;
    assert_eq!(r.get("ha-first-demo.example.com", "/").await.0, 200);
    assert_eq!(r.metric("spi_dead_letters_total").await, Some(1.0));
    assert!(
        std::fs::read_dir(root.join("state/dead-letters"))
            .expect("dead letters")
            .count()
            >= 2,
        "body and reason parked"
    );
    // A duplicate changes nothing.
    publish(
        &conn,
        "routinginfo",
        "routing.app",
        &[events::add_lb("first", "demo", b.addr)],
    )
    .await;
    e2e::eventually("duplicate counted", Duration::from_secs(10), async || {
        r.metric("spi_events_total{action=\"add_public_endpoint\",outcome=\"unchanged\"}")
            .await
            == Some(1.0)
    })
    .await;
    let _ = conn.close(0, "done".into()).await;
}
