//! Every committed corpus file of every target, through the target's check, on
//! stable: what the fuzzers found once stays found (CI runs this).

use std::path::Path;

#[test]
fn every_corpus_file_passes_its_check() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, check) in fuzz::TARGETS {
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
