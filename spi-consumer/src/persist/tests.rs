use super::*;
use crate::apply::Applied;
use crate::decode::{Decoded, decode};

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spi-store-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

/// Applies fixtures in order, saving after each like the consumer does.
fn apply_and_save(store: &mut Store, state: &mut RoutingState, names: &[String]) {
    for name in names {
        if let Ok(Decoded::Event(e)) = decode(&crate::fixtures::fixture(name))
            && let Applied::Changed(key) = state.apply(&e)
        {
            store.save(state, &BTreeSet::from([key])).expect("save");
        }
    }
}

fn fixtures_below(limit: &str) -> Vec<String> {
    crate::fixtures::all()
        .into_iter()
        .filter(|n| n.as_str() < limit)
        .collect()
}

#[test]
fn journal_replays_to_the_same_state() {
    let dir = tempdir("journal");
    let mut store = Store::open(&dir).expect("open");
    assert!(store.load().expect("empty").is_empty());
    let mut state = RoutingState::new();
    apply_and_save(&mut store, &mut state, &fixtures_below("19"));
    assert!(!dir.join(SNAPSHOT).exists(), "no compaction yet");
    let lines = fs::read_to_string(dir.join(JOURNAL))
        .expect("journal")
        .lines()
        .count();
    assert!(lines >= 18, "one line per change: {lines}");
    assert_eq!(
        Store::open(&dir).expect("open").load().expect("load"),
        state
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dir.join(JOURNAL))
        .expect("meta")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "holds private keys");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn deletions_replay_too() {
    let dir = tempdir("delete");
    let mut store = Store::open(&dir).expect("open");
    let mut state = RoutingState::new();
    apply_and_save(&mut store, &mut state, &fixtures_below("23"));
    assert!(state.is_empty());
    assert!(
        Store::open(&dir)
            .expect("open")
            .load()
            .expect("load")
            .is_empty()
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn compaction_writes_a_snapshot_and_empties_the_journal() {
    let dir = tempdir("compact");
    let mut store = Store::open(&dir).expect("open").with_compaction(5);
    let mut state = RoutingState::new();
    apply_and_save(&mut store, &mut state, &fixtures_below("19"));
    assert!(dir.join(SNAPSHOT).exists());
    let lines = fs::read_to_string(dir.join(JOURNAL))
        .expect("journal")
        .lines()
        .count();
    assert!(lines <= 5, "{lines}");
    assert_eq!(
        Store::open(&dir).expect("open").load().expect("load"),
        state
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_larger_state_waits_for_as_many_journal_lines_as_it_has_apps() {
    let dir = tempdir("compact-scaled");
    let mut store = Store::open(&dir).expect("open").with_compaction(5);
    let mut state = RoutingState::new();
    let mut save = |state: &mut RoutingState, yaml: String| {
        let Ok(Decoded::Event(e)) = decode(yaml.as_bytes()) else {
            panic!("bad event {yaml}");
        };
        let Applied::Changed(key) = state.apply(&e) else {
            panic!("unchanged: {yaml}");
        };
        store.save(state, &BTreeSet::from([key])).expect("save");
    };
    let create =
        |i: usize| format!(":action: :create_application\n:app_name: app{i}\n:namespace: demo\n");
    for i in 0..20 {
        save(&mut state, create(i));
    }
    let lines = |dir: &Path| {
        fs::read_to_string(dir.join(JOURNAL))
            .expect("journal")
            .lines()
            .count()
    };
    // 20 apps: no snapshot yet after 20 lines (5 is only the least).
    assert!(!dir.join(SNAPSHOT).exists());
    assert_eq!(lines(&dir), 20);
    save(
        &mut state,
        ":action: :add_alias\n:app_name: app0\n:namespace: demo\n:alias: a.example.com\n".into(),
    );
    assert!(dir.join(SNAPSHOT).exists(), "the 21st line compacts");
    assert_eq!(lines(&dir), 0);
    assert_eq!(
        Store::open(&dir).expect("open").load().expect("load"),
        state
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_last_line_is_ignored_but_a_corrupt_middle_is_an_error() {
    let dir = tempdir("torn");
    let mut store = Store::open(&dir).expect("open");
    let mut state = RoutingState::new();
    apply_and_save(&mut store, &mut state, &fixtures_below("04"));
    let good = fs::read(dir.join(JOURNAL)).expect("journal");
    // A crash mid-append: half a line at the end.
    let mut torn = good.clone();
    torn.extend_from_slice(b"{\"op\":\"put\",\"app\":{\"name\":\"x");
    fs::write(dir.join(JOURNAL), &torn).expect("write");
    assert_eq!(
        Store::open(&dir).expect("open").load().expect("load"),
        state
    );
    // Damage before the end is not a crash artefact: refuse to guess.
    let mut bad = b"not json\n".to_vec();
    bad.extend_from_slice(&good);
    fs::write(dir.join(JOURNAL), &bad).expect("write");
    let err = Store::open(&dir)
        .expect("open")
        .load()
        .expect_err("corrupt");
    assert!(
        matches!(err, StoreError::CorruptLine { line: 1, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("journal.jsonl: not a routing-state file: line 1"),
        "{err}"
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_or_future_snapshot_is_a_clear_error() {
    let dir = tempdir("bad");
    let mut store = Store::open(&dir).expect("open");
    fs::write(dir.join(SNAPSHOT), b"{\"format\": 1, \"apps\": [").expect("write");
    let err = store.load().expect_err("corrupt");
    assert!(err.to_string().contains("state.json"), "{err}");
    fs::write(dir.join(SNAPSHOT), b"{\"format\": 99, \"apps\": []}").expect("write");
    assert!(
        store
            .load()
            .expect_err("future")
            .to_string()
            .contains("format 99")
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn a_state_dir_written_by_format_1_still_loads() {
    // Frozen file: if this breaks, write a migration, do not edit the fixture.
    let dir = tempdir("v1");
    fs::create_dir_all(&dir).expect("dir");
    fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/state-v1/state.json"),
        dir.join(SNAPSHOT),
    )
    .expect("copy");
    let state = Store::open(&dir).expect("open").load().expect("load");
    let app = state
        .app(&AppKey {
            name: "myapp".into(),
            namespace: "demo".into(),
        })
        .expect("app");
    assert_eq!(app.name, "MyApp");
    assert_eq!(app.endpoints["10.0.0.11:38032"].types, ["load_balancer"]);
    assert!(app.aliases.contains("www.example.net"));
    let _ = fs::remove_dir_all(&dir);
}

/// A snapshot large enough to be decoded in two halves loads back whole (its
/// apps in key order); an app that does not decode is named by its position, in either half.
#[test]
fn a_large_snapshot_decodes_in_two_halves() {
    let dir = tempdir("halves");
    let mut store = Store::open(&dir).expect("open");
    let n = PARALLEL_FROM * 2 + 1;
    let apps = (0..n).map(|i| App {
        name: format!("App{i}"),
        namespace: "demo".into(),
        scalable: Some(i % 2 == 0),
        ha: None,
        endpoints: Default::default(),
        aliases: [format!("www{i}.example.net")].into_iter().collect(),
        certificates: Default::default(),
    });
    let state = RoutingState::from_apps(apps);
    store.compact(&state).expect("snapshot");
    let loaded = Store::open(&dir).expect("open").load().expect("load");
    assert_eq!(loaded.len(), n);
    assert!(loaded == state, "the same apps");

    let text = fs::read_to_string(dir.join(SNAPSHOT)).expect("read");
    for bad in [3, n - 2] {
        let broken = text.replacen(
            &format!("\"name\":\"App{bad}\""),
            &format!("\"name\":{bad}"),
            1,
        );
        assert_ne!(broken, text, "the snapshot names App{bad}");
        fs::write(dir.join(SNAPSHOT), broken).expect("write");
        let err = Store::open(&dir)
            .expect("open")
            .load()
            .expect_err("corrupt");
        // The snapshot lists apps in key order.
        let mut keys: Vec<_> = state.apps().map(|(k, _)| k).collect();
        keys.sort();
        let index = keys
            .iter()
            .position(|k| *k.name == *format!("app{bad}"))
            .expect("in the state");
        assert!(
            err.to_string().contains(&format!(
                "state.json: not a routing-state file: app {index}:"
            )),
            "{err}"
        );
    }
    let _ = fs::remove_dir_all(&dir);
}
