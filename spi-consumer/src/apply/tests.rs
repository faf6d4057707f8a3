use super::*;
use crate::decode::{Decoded, decode};
use crate::fixtures::fixture;

fn ev(name: &str) -> RoutingEvent {
    match decode(&fixture(name)) {
        Ok(Decoded::Event(e)) => e,
        other => panic!("{name}: {other:?}"),
    }
}

fn myapp() -> AppKey {
    AppKey {
        name: "myapp".into(),
        namespace: "demo".into(),
    }
}

fn endpoints(state: &RoutingState) -> Vec<String> {
    state
        .app(&myapp())
        .map(|a| a.endpoints.keys().cloned().collect())
        .unwrap_or_default()
}

#[test]
fn create_application_records_but_does_not_announce() {
    let mut s = RoutingState::new();
    assert_eq!(
        s.apply(&ev("01-create_application.yaml")),
        Applied::Changed(myapp())
    );
    let app = s.app(&myapp()).expect("app");
    assert_eq!(app.scalable, Some(true));
    assert!(!app.is_announced());
}

#[test]
fn add_endpoint_creates_the_app_lazily() {
    let mut s = RoutingState::new();
    s.apply(&ev("03-add_public_endpoint-load_balancer.yaml"));
    assert_eq!(endpoints(&s), ["10.0.0.11:38032"]);
    assert!(s.app(&myapp()).expect("app").is_announced());
}

#[test]
fn duplicates_change_nothing() {
    let mut s = RoutingState::new();
    for name in [
        "01-create_application.yaml",
        "03-add_public_endpoint-load_balancer.yaml",
        "07-add_alias.yaml",
        "08-add_ssl.yaml",
    ] {
        let e = ev(name);
        assert!(matches!(s.apply(&e), Applied::Changed(_)), "{name}");
        let before = s.clone();
        assert_eq!(
            s.apply(&e),
            Applied::Unchanged(NoChange::AlreadyPresent),
            "{name}"
        );
        assert_eq!(s, before, "{name}");
    }
}

#[test]
fn removes_of_unknown_things_are_no_ops() {
    let mut s = RoutingState::new();
    for name in [
        "13-remove_public_endpoint-web_framework-gear2.yaml",
        "12-remove_alias.yaml",
        "11-remove_ssl.yaml",
        "22-delete_application.yaml",
    ] {
        assert_eq!(
            s.apply(&ev(name)),
            Applied::Unchanged(NoChange::NotFound),
            "{name}"
        );
    }
    assert!(s.is_empty(), "a remove must not create the app");
}

#[test]
fn remove_matches_on_address_and_port_only() {
    let mut s = RoutingState::new();
    s.apply(&ev("05-add_public_endpoint-load_balancer-gear2.yaml"));
    let removed = RoutingEvent::RemovePublicEndpoint {
        app: AppId {
            name: "MyApp".into(),
            namespace: "demo".into(),
        },
        gear_id: None,
        address: "10.0.0.12".into(),
        port: 38037,
    };
    assert_eq!(s.apply(&removed), Applied::Changed(myapp()));
    assert!(endpoints(&s).is_empty());
}

#[test]
fn delete_application_drops_aliases_and_certificates() {
    let mut s = RoutingState::new();
    for name in [
        "07-add_alias.yaml",
        "08-add_ssl.yaml",
        "09-add_alias-secure.yaml",
    ] {
        s.apply(&ev(name));
    }
    assert_eq!(
        s.apply(&ev("22-delete_application.yaml")),
        Applied::Changed(myapp())
    );
    assert!(s.app(&myapp()).is_none());
}

#[test]
fn remove_alias_also_drops_its_certificate() {
    let mut s = RoutingState::new();
    s.apply(&ev("07-add_alias.yaml"));
    s.apply(&ev("08-add_ssl.yaml"));
    s.apply(&ev("12-remove_alias.yaml"));
    let app = s.app(&myapp()).expect("app");
    assert!(app.aliases.is_empty());
    assert!(app.certificates.is_empty());
}

#[test]
fn gear_move_add_then_remove_keeps_only_the_new_node() {
    let mut s = RoutingState::new();
    for name in [
        "02-add_public_endpoint-web_framework.yaml",
        "03-add_public_endpoint-load_balancer.yaml",
        "15-add_public_endpoint-gear_move-new_node-web_framework.yaml",
        "16-add_public_endpoint-gear_move-new_node-load_balancer.yaml",
    ] {
        s.apply(&ev(name));
    }
    assert_eq!(endpoints(&s).len(), 4, "both nodes during the move");
    s.apply(&ev(
        "17-remove_public_endpoint-gear_move-old_node-web_framework.yaml",
    ));
    s.apply(&ev(
        "18-remove_public_endpoint-gear_move-old_node-load_balancer.yaml",
    ));
    assert_eq!(endpoints(&s), ["10.0.0.14:38031", "10.0.0.14:38032"]);
}

#[test]
fn replay_01_to_22_matches_the_fixture_story() {
    let mut s = RoutingState::new();
    let mut names: Vec<String> = crate::fixtures::all()
        .into_iter()
        .filter(|n| n.as_str() < "23")
        .collect();
    names.sort();
    assert_eq!(names.len(), 22);
    for name in &names {
        s.apply(&ev(name));
        let app = s.app(&myapp());
        // Spot checks after the steps the README describes.
        match &name[..2] {
            "06" => assert_eq!(endpoints(&s).len(), 5),
            "10" => {
                let app = app.expect("app");
                assert_eq!(
                    app.aliases.iter().collect::<Vec<_>>(),
                    ["secure.example.net", "www.example.net"]
                );
                assert_eq!(app.certificates.len(), 2);
            }
            "12" => {
                let app = app.expect("app");
                assert_eq!(
                    app.aliases.iter().collect::<Vec<_>>(),
                    ["secure.example.net"]
                );
                assert_eq!(
                    app.certificates.keys().collect::<Vec<_>>(),
                    ["secure.example.net"]
                );
            }
            "18" => assert_eq!(
                endpoints(&s),
                ["10.0.0.13:38041", "10.0.0.14:38031", "10.0.0.14:38032"]
            ),
            "21" => assert!(endpoints(&s).is_empty()),
            "22" => assert!(app.is_none()),
            _ => {}
        }
    }
    assert!(s.is_empty(), "nothing remains after 22");
}

#[test]
fn replay_in_any_order_of_duplicates_converges() {
    // Every event delivered twice in a row (redelivery) gives the same final state.
    let mut once = RoutingState::new();
    let mut twice = RoutingState::new();
    let mut names: Vec<String> = crate::fixtures::all()
        .into_iter()
        .filter(|n| n.as_str() < "19")
        .collect();
    names.sort();
    for name in &names {
        let e = ev(name);
        once.apply(&e);
        twice.apply(&e);
        twice.apply(&e);
    }
    assert_eq!(once, twice);
}

#[test]
fn legacy_create_application_of_an_unknown_app_is_a_change() {
    // Fixture 29 (2013 broker) has no :scalable / :ha: the flags stay at their
    // defaults, yet the app is new and must be persisted and counted.
    let mut state = RoutingState::new();
    let e = ev("29-create_application-legacy-2013.yaml");
    assert!(
        matches!(state.apply(&e), Applied::Changed(_)),
        "a new app is a change"
    );
    assert!(
        matches!(
            state.apply(&e),
            Applied::Unchanged(NoChange::AlreadyPresent)
        ),
        "idempotent"
    );
}
