//! The routing-SPI sample events shipped in `fixtures/spi-events/` at the workspace
//! root, for tests.

use std::path::PathBuf;

/// The fixtures folder.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/spi-events")
}

/// The bytes of one fixture; panics with the path if it is missing (tests only).
pub fn fixture(name: &str) -> Vec<u8> {
    let path = dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of every `.yaml` fixture, sorted.
pub fn all() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .unwrap_or_else(|e| panic!("{}: {e}", dir().display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    names
}
