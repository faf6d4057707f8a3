//! The gear table on disk: `state_dir/gear-mappings`, one `PORT IP:PORT` line per
//! mapping (what `showproxy` printed), written atomically (temp file, fsync, rename,
//! fsync of the directory) before the operator gets an answer.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use config_file::ConfigError;

use super::table::{Rules, Table};

const FILE: &str = "gear-mappings";
const HEADER: &str = "# portproxy gear mappings: PORT IP:PORT. Written by portproxy; change it with `portproxy add|remove`.\n";

/// The table's file.
#[derive(Debug, Clone)]
pub struct Store {
    path: PathBuf,
}

impl Store {
    /// The store in `dir`, which is created (mode 0700) if missing.
    pub fn open(dir: &Path) -> io::Result<Store> {
        std::fs::create_dir_all(dir)?;
        Ok(Store {
            path: dir.join(FILE),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved table (empty when there is no file yet). A line that does not pass
    /// today's rules is an error naming file and line: refuse to start rather than
    /// drop a mapping silently.
    pub fn load(&self, rules: &Rules) -> Result<Table, ConfigError> {
        let file = self.path.display().to_string();
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Table::default()),
            Err(e) => return Err(ConfigError::whole_file(file, e.to_string())),
        };
        let mut map = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let err = |field: &str, m: String| ConfigError::at_line(&file, i + 1, field, m);
            let mut words = line.split_whitespace();
            let (Some(p), Some(t), None) = (words.next(), words.next(), words.next()) else {
                return Err(err("", "expected `PORT IP:PORT`".into()));
            };
            let port = rules.port(p).map_err(|e| err("port", e.to_string()))?;
            let target = rules.target(t).map_err(|e| err("target", e.to_string()))?;
            if map.insert(port, target).is_some() {
                return Err(err("port", format!("port {port} appears twice")));
            }
        }
        Ok(Table::from_map(map))
    }

    /// Replaces the file with `table`, durably.
    pub fn save(&self, table: &Table) -> io::Result<()> {
        let mut text = String::from(HEADER);
        for (p, a) in table.iter() {
            text.push_str(&format!("{p} {a}\n"));
        }
        durable_file::write(&self.path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gear::table::default_rules as rules;

    #[test]
    fn a_saved_table_loads_back_and_a_bad_line_is_named() {
        let dir = std::env::temp_dir().join(format!("pp-store-{}", std::process::id()));
        let store = Store::open(&dir).expect("open");
        assert!(store.load(&rules()).expect("empty").is_empty());
        let t = Table::default().with_added(&[
            (35531, "127.0.250.1:8080".parse().expect("a")),
            (35532, "127.0.250.2:22".parse().expect("a")),
        ]);
        store.save(&t).expect("save");
        assert_eq!(store.load(&rules()).expect("load"), t);
        std::fs::write(
            store.path(),
            "# c\n35531 127.0.250.1:8080\n35532 127.0.250.300:1\n",
        )
        .expect("write");
        let e = store.load(&rules()).expect_err("bad line");
        assert_eq!(e.line, Some(3));
        assert_eq!(e.field, "target");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
