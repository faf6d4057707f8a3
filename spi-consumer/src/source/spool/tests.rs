use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::*;
use crate::apply::{AppKey, RoutingState};
use crate::metrics::Metrics;
use crate::persist::Store;

/// Records what was published, so tests can see what a router would have served.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<BTreeSet<AppKey>>>>);

impl Publish for Recorder {
    fn publish(&mut self, _state: &RoutingState, changed: &BTreeSet<AppKey>) {
        self.0.lock().expect("lock").push(changed.clone());
    }
}

fn setup(
    tag: &str,
) -> (
    PathBuf,
    Spool,
    Consumer<Recorder>,
    Recorder,
    prometheus::Registry,
) {
    let root = std::env::temp_dir().join(format!("spi-spool-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let spool = Spool::open(root.join("spool")).expect("spool");
    let store = Store::open(root.join("state")).expect("store");
    let registry = prometheus::Registry::new();
    let rec = Recorder::default();
    let consumer = Consumer::start(
        store,
        rec.clone(),
        Metrics::new(&registry).expect("metrics"),
    )
    .expect("start");
    (root, spool, consumer, rec, registry)
}

fn drop_fixture(spool: &Spool, name: &str) {
    fs::write(spool.dir().join(name), crate::fixtures::fixture(name)).expect("write");
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn assert_dead_letters(registry: &prometheus::Registry, n: u64) {
    let text = prometheus::TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encode");
    assert!(
        text.contains(&format!("spi_dead_letters_total {n}")),
        "{text}"
    );
}

#[test]
fn files_are_applied_in_order_then_moved() {
    let (root, spool, mut consumer, rec, _reg) = setup("order");
    // Written in reverse: the name order must still win (add before remove).
    drop_fixture(&spool, "13-remove_public_endpoint-web_framework-gear2.yaml");
    drop_fixture(&spool, "04-add_public_endpoint-web_framework-gear2.yaml");
    assert_eq!(spool.process(&mut consumer).expect("process"), 2);
    let key = AppKey {
        name: "myapp".into(),
        namespace: "demo".into(),
    };
    assert!(
        consumer
            .state()
            .app(&key)
            .expect("app")
            .endpoints
            .is_empty()
    );
    assert_eq!(
        names(&spool.dir().join(DONE)),
        [
            "04-add_public_endpoint-web_framework-gear2.yaml",
            "13-remove_public_endpoint-web_framework-gear2.yaml"
        ]
    );
    assert_eq!(names(spool.dir()), ["done", "failed"]);
    // One initial publish (empty) plus one for the batch.
    assert_eq!(rec.0.lock().expect("lock").len(), 2);
    let _ = fs::remove_dir_all(root);
}

#[test]
fn bad_files_go_to_failed_with_a_reason_and_good_ones_still_apply() {
    let (root, spool, mut consumer, _rec, registry) = setup("failed");
    drop_fixture(&spool, "03-add_public_endpoint-load_balancer.yaml");
    drop_fixture(&spool, "92-synthetic-malformed-truncated.yaml");
    drop_fixture(&spool, "93-synthetic-missing-public_port.yaml");
    drop_fixture(&spool, "07-add_alias.yaml");
    spool.process(&mut consumer).expect("process");
    assert_eq!(
        names(&spool.dir().join(FAILED)),
        [
            "92-synthetic-malformed-truncated.yaml",
            "92-synthetic-malformed-truncated.yaml.reason",
            "93-synthetic-missing-public_port.yaml",
            "93-synthetic-missing-public_port.yaml.reason"
        ]
    );
    let reason = fs::read_to_string(
        spool
            .dir()
            .join(FAILED)
            .join("93-synthetic-missing-public_port.yaml.reason"),
    )
    .expect("reason");
    assert!(reason.contains(":public_port"), "{reason}");
    // Written like every dead letter (durable_file): owner only, since the parked
    // body beside it may hold a private key.
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(
        spool
            .dir()
            .join(FAILED)
            .join("93-synthetic-missing-public_port.yaml.reason"),
    )
    .expect("meta")
    .permissions()
    .mode();
    assert_eq!(mode & 0o777, 0o600, "reason file mode {mode:o}");
    assert_eq!(names(&spool.dir().join(DONE)).len(), 2);
    assert_dead_letters(&registry, 2);
    let _ = fs::remove_dir_all(root);
}

#[test]
fn state_survives_a_restart() {
    let (root, spool, mut consumer, _rec, _reg) = setup("restart");
    drop_fixture(&spool, "03-add_public_endpoint-load_balancer.yaml");
    spool.process(&mut consumer).expect("process");
    let saved = consumer.state().clone();
    drop(consumer);
    let rec = Recorder::default();
    let reg = prometheus::Registry::new();
    let again = Consumer::start(
        Store::open(root.join("state")).expect("store"),
        rec.clone(),
        Metrics::new(&reg).expect("metrics"),
    )
    .expect("start");
    assert_eq!(again.state(), &saved);
    assert_eq!(
        rec.0.lock().expect("lock")[0].len(),
        1,
        "restored app published at start"
    );
    let _ = fs::remove_dir_all(root);
}

#[test]
fn hidden_and_tmp_files_wait() {
    let (root, spool, mut consumer, _rec, _reg) = setup("hidden");
    fs::write(spool.dir().join(".incoming"), b"x").expect("write");
    fs::write(spool.dir().join("01.yaml.tmp"), b"x").expect("write");
    assert_eq!(spool.process(&mut consumer).expect("process"), 0);
    let _ = fs::remove_dir_all(root);
}

#[test]
fn a_long_name_an_oversized_file_and_odd_entries_never_stall_the_spool() {
    let (root, _open, mut consumer, _rec, registry) = setup("bounded");
    let spool = Spool::open_with(
        root.join("spool"),
        SpoolLimits {
            max_file_bytes: 4096,
            ..SpoolLimits::default()
        },
    )
    .expect("spool");
    // A malformed file whose name is 253 bytes: NAME.reason would not fit.
    let long = format!("{}.yaml", "9".repeat(248));
    assert_eq!(long.len(), 253);
    fs::write(spool.dir().join(&long), b"---\n:action: [").expect("write");
    // Over the size cap: parked unread.
    fs::write(spool.dir().join("50-big.yaml"), vec![b'#'; 5000]).expect("write");
    drop_fixture(&spool, "03-add_public_endpoint-load_balancer.yaml");
    // Not regular files: skipped, left alone, never an error.
    std::os::unix::fs::symlink("/etc/hostname", spool.dir().join("60-link.yaml")).expect("symlink");
    fs::create_dir(spool.dir().join("70-dir.yaml")).expect("dir");
    assert_eq!(spool.process(&mut consumer).expect("process"), 3);
    assert_eq!(
        spool.process(&mut consumer).expect("again"),
        0,
        "nothing left to retry"
    );

    let failed = names(&spool.dir().join(FAILED));
    assert!(failed.contains(&long), "{failed:?}");
    let reason = failed
        .iter()
        .find(|n| n.starts_with(&"9".repeat(200)) && n.ends_with(".reason"))
        .expect("a shortened reason file");
    assert!(reason.len() <= 255, "{}", reason.len());
    assert!(
        failed.contains(&"50-big.yaml.reason".to_string()),
        "{failed:?}"
    );
    let why =
        fs::read_to_string(spool.dir().join(FAILED).join("50-big.yaml.reason")).expect("reason");
    assert!(why.contains("larger than 4096 bytes"), "{why}");
    assert_eq!(
        names(&spool.dir().join(DONE)),
        ["03-add_public_endpoint-load_balancer.yaml"]
    );
    assert!(spool.dir().join("60-link.yaml").exists());
    assert!(spool.dir().join("70-dir.yaml").is_dir());
    assert_dead_letters(&registry, 2);
    let _ = fs::remove_dir_all(root);
}

#[test]
fn done_files_are_owner_only_and_pruned_after_their_retention() {
    use std::os::unix::fs::PermissionsExt;
    let (root, _open, mut consumer, _rec, _registry) = setup("retention");
    let spool = Spool::open_with(
        root.join("spool"),
        SpoolLimits {
            done_retention: Duration::from_secs(3600),
            ..SpoolLimits::default()
        },
    )
    .expect("spool");
    drop_fixture(&spool, "03-add_public_endpoint-load_balancer.yaml");
    let path = spool
        .dir()
        .join("03-add_public_endpoint-load_balancer.yaml");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
    spool.process(&mut consumer).expect("process");
    let done = spool
        .dir()
        .join(DONE)
        .join("03-add_public_endpoint-load_balancer.yaml");
    let mode = fs::metadata(&done).expect("meta").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "done files may hold keys");
    // Younger than the retention: kept. A spool with no retention prunes it.
    let none = Spool::open_with(
        root.join("spool"),
        SpoolLimits {
            done_retention: Duration::ZERO,
            ..SpoolLimits::default()
        },
    )
    .expect("spool");
    assert!(done.exists());
    drop_fixture(&none, "07-add_alias.yaml");
    none.process(&mut consumer).expect("process");
    assert!(!done.exists(), "pruned after its retention");
    let _ = fs::remove_dir_all(root);
}

#[test]
fn applied_and_failed_files_keep_no_private_key_and_failed_ones_are_pruned() {
    let (root, spool, mut consumer, _rec, _registry) = setup("redact");
    drop_fixture(&spool, "01-create_application.yaml");
    drop_fixture(&spool, "10-add_ssl-pass_phrase.yaml");
    // Undecodable, with a key in it: parked, redacted too.
    fs::write(
        spool.dir().join("99-broken.yaml"),
        "--- [\n:private_key: '-----BEGIN PRIVATE KEY-----\nMIIsecret\n-----END PRIVATE KEY-----'\n",
    )
    .expect("write");
    spool.process(&mut consumer).expect("process");
    let done = fs::read_to_string(spool.dir().join(DONE).join("10-add_ssl-pass_phrase.yaml"))
        .expect("kept in done/");
    assert!(done.contains(":action: :add_ssl"), "still readable: {done}");
    assert!(!done.contains("correct-horse-battery"), "{done}");
    assert!(
        done.contains("-----BEGIN RSA PRIVATE KEY-----[redacted]-----END RSA PRIVATE KEY-----"),
        "{done}"
    );
    let failed = spool.dir().join(FAILED).join("99-broken.yaml");
    let kept = fs::read_to_string(&failed).expect("kept in failed/");
    assert!(!kept.contains("MIIsecret"), "{kept}");
    assert!(!spool.dir().join("10-add_ssl-pass_phrase.yaml").exists());
    // The next pass prunes failed/ (retention zero), reasons included.
    let again = Spool::open_with(
        root.join("spool"),
        SpoolLimits {
            failed_retention: Duration::ZERO,
            ..SpoolLimits::default()
        },
    )
    .expect("spool");
    drop_fixture(&again, "07-add_alias.yaml");
    again.process(&mut consumer).expect("process");
    let left = fs::read_dir(spool.dir().join(FAILED))
        .expect("failed/")
        .count();
    assert_eq!(left, 0, "failed/ pruned after its retention");
    let _ = fs::remove_dir_all(root);
}
