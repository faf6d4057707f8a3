//! The STOMP session against a real ActiveMQ (Debian's package).

use std::time::Duration;

use e2e::activemq::ActiveMq;
use spi_consumer::source::stomp::{SessionConfig, StompError, StompSession};

fn config(amq: &ActiveMq, destination: &str) -> SessionConfig {
    amq.session_config(destination)
}

async fn publish(amq: &ActiveMq, destination: &str, bodies: &[&str]) {
    // Publishing needs a session too; subscribe it somewhere harmless.
    let mut s = StompSession::connect(&config(amq, "/queue/publisher.unused"), 0)
        .await
        .expect("publisher connects");
    for b in bodies {
        s.publish(destination, b.to_string(), Duration::from_secs(10))
            .await
            .expect("publish with receipt");
    }
    s.disconnect(Duration::from_secs(10))
        .await
        .expect("disconnect");
}

async fn next(s: &mut StompSession) -> spi_consumer::source::stomp::Message {
    tokio::time::timeout(Duration::from_secs(20), s.next_message())
        .await
        .expect("a message in time")
        .expect("session alive")
}

#[tokio::test]
async fn unacked_messages_are_redelivered_after_reconnect() {
    let amq = ActiveMq::start();
    let q = "/queue/routinginfo.router-a";
    publish(&amq, q, &["one", "two", "three"]).await;
    let mut s = StompSession::connect(&config(&amq, q), 0)
        .await
        .expect("connect");
    let m1 = next(&mut s).await;
    assert_eq!(&m1.body[..], b"one");
    s.ack(&m1).await.expect("ack");
    let m2 = next(&mut s).await;
    assert_eq!(&m2.body[..], b"two");
    // Crash before acknowledging: drop the connection without DISCONNECT.
    drop(s);
    let mut s = StompSession::connect(&config(&amq, q), 0)
        .await
        .expect("reconnect");
    // The broker requeues "two" when it notices the dead connection, asynchronously:
    // a fast reconnect may get "three" first. Redelivery is guaranteed, order is not.
    let mut got = Vec::new();
    for _ in 0..2 {
        let m = next(&mut s).await;
        got.push((String::from_utf8_lossy(&m.body).into_owned(), m.redelivered));
        s.ack(&m).await.expect("ack");
    }
    got.sort();
    assert_eq!(
        got,
        [("three".to_string(), false), ("two".to_string(), true)],
        "the unacked message comes back, marked redelivered"
    );
    s.disconnect(Duration::from_secs(10))
        .await
        .expect("disconnect");
}

#[tokio::test]
async fn durable_topic_subscription_keeps_messages_while_away() {
    let amq = ActiveMq::start();
    let topic = "/topic/routinginfo";
    let mut cfg = config(&amq, topic);
    cfg.client_id = Some("router-a".into());
    cfg.subscription_name = Some("router-a".into());
    let s = StompSession::connect(&cfg, 0)
        .await
        .expect("durable subscribe");
    s.disconnect(Duration::from_secs(10))
        .await
        .expect("disconnect");
    // Published while the router is away.
    publish(&amq, topic, &["while-away"]).await;
    let mut s = StompSession::connect(&cfg, 0).await.expect("resubscribe");
    let m = next(&mut s).await;
    assert_eq!(&m.body[..], b"while-away");
    s.ack(&m).await.expect("ack");
}

#[tokio::test]
async fn persistent_messages_survive_a_broker_restart_and_failover_skips_dead_hosts() {
    let mut amq = ActiveMq::start();
    let q = "/queue/routinginfo.restart";
    publish(&amq, q, &["survivor"]).await;
    amq.restart();
    let refusing = e2e::Refusing::new();
    let dead = refusing.addr.to_string();
    let mut cfg = config(&amq, q);
    cfg.hosts = vec![dead, amq.stomp.to_string()];
    let mut s = StompSession::connect(&cfg, 0)
        .await
        .expect("second host answers");
    assert_eq!(s.host, amq.stomp.to_string());
    let m = next(&mut s).await;
    assert_eq!(&m.body[..], b"survivor");
    s.ack(&m).await.expect("ack");
}

#[tokio::test]
async fn heart_beats_keep_an_idle_session_alive_and_a_dead_broker_is_noticed() {
    let mut amq = ActiveMq::start();
    let q = "/queue/routinginfo.idle";
    let mut cfg = config(&amq, q);
    cfg.heartbeat = Duration::from_millis(300);
    let mut s = StompSession::connect(&cfg, 0).await.expect("connect");
    // Idle for many heart-beat periods: no message, and no error either.
    let idle = tokio::time::timeout(Duration::from_secs(3), s.next_message()).await;
    assert!(idle.is_err(), "still waiting, not failed: {idle:?}");
    publish(&amq, q, &["after-idle"]).await;
    let m = next(&mut s).await;
    assert_eq!(&m.body[..], b"after-idle");
    s.ack(&m).await.expect("ack");
    // The broker goes away: the session ends with an error instead of hanging.
    amq.stop();
    let end = tokio::time::timeout(Duration::from_secs(20), s.next_message())
        .await
        .expect("noticed in time");
    assert!(
        matches!(
            end,
            Err(StompError::Closed | StompError::HeartBeatLost(_) | StompError::Frame(_))
        ),
        "{end:?}"
    );
}

#[tokio::test]
async fn stomp_over_tls_with_a_private_ca_and_a_client_certificate() {
    use e2e::pki;
    use spi_consumer::source::stomp::tls::{TlsClient, TlsFiles};
    let dir = e2e::tempdir("stomp-tls");
    let ca = pki::Ca::new("Routing test CA");
    let broker_leaf = ca.leaf(&["127.0.0.1", "localhost"]);
    let amq = ActiveMq::start_tls(e2e::activemq::BrokerTls {
        keystore: pki::pkcs12_keystore(&dir, &broker_leaf, &ca.pem),
        truststore: pki::pkcs12_truststore(&dir, &ca.pem),
    });
    let tls_addr = amq.stomp_tls.expect("tls port").to_string();
    std::fs::write(dir.join("ca.crt"), &ca.pem).expect("ca");
    let (cert, key) = pki::write_leaf(&dir, "router-a", &ca.leaf(&["router-a"]));
    let files = TlsFiles {
        ca_file: dir.join("ca.crt"),
        cert_file: Some(cert),
        key_file: Some(key),
        server_name: None,
    };
    let q = "/queue/routinginfo.tls";
    publish(&amq, q, &["over-tls"]).await;

    let mut cfg = config(&amq, q);
    cfg.hosts = vec![tls_addr.clone()];
    cfg.tls = Some(TlsClient::load(&files).expect("tls files"));
    let mut s = StompSession::connect(&cfg, 0)
        .await
        .expect("TLS session with client cert");
    let m = next(&mut s).await;
    assert_eq!(&m.body[..], b"over-tls");
    s.ack(&m).await.expect("ack");
    s.disconnect(Duration::from_secs(10))
        .await
        .expect("disconnect");

    // A broker certificate from another CA is refused.
    let other = pki::Ca::new("Somebody else");
    std::fs::write(dir.join("other.crt"), &other.pem).expect("other ca");
    let mut wrong = cfg.clone();
    wrong.tls = Some(
        TlsClient::load(&TlsFiles {
            ca_file: dir.join("other.crt"),
            ..files.clone()
        })
        .expect("load"),
    );
    let err = StompSession::connect(&wrong, 0)
        .await
        .err()
        .expect("untrusted broker refused");
    assert!(matches!(err, StompError::Tls { .. }), "{err}");

    // Without a client certificate the broker refuses us.
    let mut anonymous = cfg.clone();
    anonymous.tls = Some(
        TlsClient::load(&TlsFiles {
            cert_file: None,
            key_file: None,
            ..files
        })
        .expect("load"),
    );
    assert!(
        StompSession::connect(&anonymous, 0).await.is_err(),
        "client certificate required"
    );
}
