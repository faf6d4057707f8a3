//! Every committed corpus file of every target, through the target's check, on
//! stable: what the fuzzers found once stays found (CI runs this).

use std::path::Path;

type Check = fn(&[u8]);

const TARGETS: [(&str, Check); 8] = [
    ("client_framing", fuzz::client_framing),
    ("client_head", fuzz::client_head),
    ("member_response", fuzz::member_response),
    ("proxy_header", fuzz::proxy_header),
    ("stomp_frames", fuzz::stomp_frames),
    ("routing_event", fuzz::routing_event),
    ("router_config", fuzz::router_config),
    ("cluster_files", fuzz::cluster_files),
];

#[test]
fn every_corpus_file_passes_its_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, check) in TARGETS {
        let dir = root.join(target);
        let mut files = 0;
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("entry").path();
            let data = std::fs::read(&path).expect("read");
            let outcome = std::panic::catch_unwind(|| check(&data));
            assert!(
                outcome.is_ok(),
                "{target}: {} fails its check",
                path.display()
            );
            files += 1;
        }
        assert!(files > 0, "{target}: the corpus is empty");
    }
}
