//! Blue/green: one alias shared between two apps by weight through the admin API,
//! behind the admin token, persisted across a restart, while events keep applying.

use e2e::{Backend, TestRouter, events};

const ALIAS: &str = "www.example.net";

/// Requests for the alias that each backend received (health checks excluded).
async fn share(r: &TestRouter, blue: &Backend, green: &Backend, n: usize) -> (usize, usize) {
    let (b0, g0) = (blue.proxied(), green.proxied());
    let statuses = r.get_n(ALIAS, n).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    (blue.proxied() - b0, green.proxied() - g0)
}

#[tokio::test]
async fn an_alias_split_by_weight_survives_a_restart_and_needs_the_token() {
    let root = e2e::tempdir("bluegreen");
    let token_file = root.join("admin.token");
    std::fs::create_dir_all(&root).expect("root");
    std::fs::write(&token_file, "s3cret-token\n").expect("token");
    let extra = format!("admin:\n  token_file: {}\n", token_file.display());
    let blue = Backend::start().await;
    let green = Backend::start().await;
    let r = TestRouter::start_in(root.clone(), &extra).await;
    r.drop_event("01.yaml", &events::add_lb("blue", "shop", blue.addr));
    r.drop_event("02.yaml", &events::add_lb("green", "shop", green.addr));
    r.drop_event("03.yaml", &events::add_alias("blue", "shop", ALIAS));
    r.wait_route(ALIAS).await;
    r.wait_route("ha-green-shop.example.com").await;
    r.wait_health(blue.addr, "up").await;
    r.wait_health(green.addr, "up").await;
    assert_eq!(
        share(&r, &blue, &green, 20).await,
        (20, 0),
        "alias: its own app"
    );

    let weights = r#"{"blue-shop": 90, "green-shop": 10}"#;
    let path = format!("/aliases/{ALIAS}/split");
    // No token, a wrong token: refused, nothing changed.
    assert_eq!(r.admin_call("POST", &path, weights, None).await.0, 401);
    assert_eq!(
        r.admin_call("POST", &path, weights, Some("s3cret-tokem"))
            .await
            .0,
        401
    );
    assert_eq!(share(&r, &blue, &green, 10).await, (10, 0));
    // Bad requests: an unknown app, an unknown name, a bad body.
    let tok = Some("s3cret-token");
    let (s, body) = r
        .admin_call("POST", &path, r#"{"blue-shop": 90, "gren-shop": 10}"#, tok)
        .await;
    assert_eq!(s, 404, "{body}");
    assert!(body.contains("gren-shop"), "{body}");
    let (s, _) = r
        .admin_call("POST", "/aliases/nope.example.net/split", weights, tok)
        .await;
    assert_eq!(s, 404);
    for bad in [r#"{"blue-shop": -1}"#, r#"{"blue-shop": 0}"#, "[1,2]", "{"] {
        assert_eq!(r.admin_call("POST", &path, bad, tok).await.0, 400, "{bad}");
    }
    // Reads stay open without the token.
    assert_eq!(r.admin_get("/routes").await.0, 200);

    // 90/10 over 1000 requests: within ±5 % of the weights.
    let (s, body) = r.admin_call("POST", &path, weights, tok).await;
    assert_eq!(s, 200, "{body}");
    let (b, g) = share(&r, &blue, &green, 1000).await;
    assert!(
        (850..=950).contains(&b) && (50..=150).contains(&g),
        "{b}/{g}"
    );
    let routes: serde_json::Value =
        serde_json::from_str(&r.admin_get("/routes").await.1).expect("json");
    assert_eq!(routes["splits"][ALIAS]["green-shop"], 10);
    let audit = r.admin_get("/audit").await.1;
    assert!(
        audit.contains("\"split\"") && audit.contains("401"),
        "{audit}"
    );

    // Events for either app keep applying: a second green member takes its share.
    let green2 = Backend::start().await;
    r.drop_event(
        "04.yaml",
        &events::add_lb("green", "shop", green2.addr).replace("000001", "000002"),
    );
    r.wait_member(green2.addr).await;
    // A new member takes requests once its first check passed.
    r.wait_health(green2.addr, "up").await;
    let g2 = green2.proxied();
    let (b, g) = share(&r, &blue, &green, 400).await;
    let g2 = green2.proxied() - g2;
    assert!((340..=380).contains(&b), "{b}");
    assert_eq!(g + g2 + b, 400);
    assert!(g2 > 0, "the new member serves green's share");

    // The split survives a restart.
    r.stop().await;
    let r = TestRouter::start_in(root.clone(), &extra).await;
    r.wait_route(ALIAS).await;
    for m in [blue.addr, green.addr, green2.addr] {
        r.wait_health(m, "up").await;
    }
    let (b, _) = share(&r, &blue, &green, 100).await;
    assert!((85..=95).contains(&b), "after restart: {b}");

    // 0/100 moves everything at once; DELETE gives the alias back to its app.
    let (s, _) = r
        .admin_call("POST", &path, r#"{"blue-shop": 0, "green-shop": 100}"#, tok)
        .await;
    assert_eq!(s, 200);
    assert_eq!(share(&r, &blue, &green, 50).await.0, 0);
    assert_eq!(r.admin_call("DELETE", &path, "", tok).await.0, 200);
    assert_eq!(share(&r, &blue, &green, 20).await, (20, 0));
    r.stop().await;
    let _ = std::fs::remove_dir_all(&root);
}
