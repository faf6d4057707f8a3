//! Every app's own settings, in `state_dir/app-settings.json` (a
//! [`durable_file::Document`], as the splits are): saved before the admin API
//! answers, loaded and checked at start. Settings stay when their app leaves the
//! table (it may come back; `DELETE /apps/{app}/settings` removes them).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use durable_file::{Document, DocumentError};
use serde::{Deserialize, Serialize};

use super::settings::{AppSettings, SettingsError};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    File(#[from] DocumentError),
    #[error("{path}: {app}: {source}")]
    Entry {
        path: PathBuf,
        app: String,
        #[source]
        source: SettingsError,
    },
}

/// The file's fields (beside its format number).
#[derive(Serialize, Deserialize, Default, Clone, Debug)]
struct Saved {
    apps: BTreeMap<String, AppSettings>,
}

/// The saved settings, by `name-namespace`.
#[derive(Debug)]
pub struct SettingsStore {
    doc: Document<Saved>,
}

impl SettingsStore {
    /// In memory only (tests).
    pub fn in_memory() -> SettingsStore {
        SettingsStore {
            doc: Document::in_memory(),
        }
    }

    /// Loads `state_dir/app-settings.json` (absent: none); every entry is checked.
    pub fn open(state_dir: &Path) -> Result<SettingsStore, StoreError> {
        let path = state_dir.join("app-settings.json");
        let doc: Document<Saved> = Document::open(&path, "app settings")?;
        for (app, s) in &doc.get().apps {
            s.check().map_err(|source| StoreError::Entry {
                path: path.clone(),
                app: app.clone(),
                source,
            })?;
        }
        Ok(SettingsStore { doc })
    }

    pub fn all(&self) -> BTreeMap<String, AppSettings> {
        self.doc.get().apps.clone()
    }

    pub fn get(&self, app: &str) -> Option<AppSettings> {
        self.doc.get().apps.get(app).cloned()
    }

    /// Saves `settings` for `app` (`None` or empty: removes them), durably.
    pub fn set(&self, app: &str, settings: Option<AppSettings>) -> Result<(), StoreError> {
        self.doc.update(|s| {
            match settings.filter(|s| !s.is_empty()) {
                Some(v) => s.apps.insert(app.to_string(), v),
                None => s.apps.remove(app),
            };
            true
        })?;
        Ok(())
    }
}
