//! The routing state: every application the broker told us about, with its
//! endpoints, aliases and certificates, and the rules that apply one event to it.
//!
//! [`RoutingState::apply`] is a pure function of the state and the event. It is
//! idempotent (delivery is at-least-once) and reports whether anything changed, so
//! callers only persist and republish real changes. The rules (what the broker's
//! routing plugin means by each action, as OpenShift's own routing daemons read it):
//! - apps are created lazily by any add event; `create_application` only records them;
//! - members are keyed by `address:port` (removes carry nothing else); adding a known
//!   member again replaces its details, removing an unknown one is a no-op;
//! - aliases are case-insensitive (stored lower-case);
//! - `delete_application` implies removing its aliases and certificates.
//!
//! Which endpoints are routed (the endpoint-type filter) and which host names an app
//! answers to are the router's business, not this state's: every endpoint is kept.
//!
//! Apps are held in `Arc`s so that a snapshot of the state (for persistence or for
//! building a route table) copies pointers, not applications.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::decode::{AppId, CertBundle, Endpoint, RoutingEvent, endpoint_key};

/// The identity of an app in the state: name and namespace, lower-cased. App names
/// are case-preserving but unique regardless of case, like the DNS names made of them.
///
/// Shared text, so a clone is two reference counts: the persistent maps keyed by it
/// (the state, the route table) copy a node's keys whenever a change touches a node
/// the published table still shares, and with owned strings those copies (two
/// allocations a key, 64 keys a node) were most of an event's cost at 100 000 apps.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AppKey {
    pub name: Arc<str>,
    pub namespace: Arc<str>,
}

impl AppKey {
    pub fn of(app: &AppId) -> AppKey {
        AppKey {
            name: app.name.to_ascii_lowercase().into(),
            namespace: app.namespace.to_ascii_lowercase().into(),
        }
    }

    /// The inverse of `Display`: `name-namespace`. App names and namespaces are
    /// alphanumeric (the broker refuses others), so the first `-` separates them.
    pub fn parse(s: &str) -> Option<AppKey> {
        let (name, namespace) = s.split_once('-')?;
        let ok = |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_alphanumeric());
        (ok(name) && ok(namespace)).then(|| AppKey {
            name: name.to_ascii_lowercase().into(),
            namespace: namespace.to_ascii_lowercase().into(),
        })
    }
}

/// An app key as two borrowed strings, to look an app up without building an
/// [`AppKey`] (the request path resolves an app from the name a client sent: see
/// the router's `table::generated`). Ordered and compared as `AppKey` is, so
/// `AppKey` borrows as it in ordered maps; a hashed map must be keyed by a type
/// that hashes through this trait too.
pub trait AppKeyRef {
    fn parts(&self) -> (&str, &str);
}

impl AppKeyRef for AppKey {
    fn parts(&self) -> (&str, &str) {
        (&self.name, &self.namespace)
    }
}

impl AppKeyRef for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn AppKeyRef + 'a> for AppKey {
    fn borrow(&self) -> &(dyn AppKeyRef + 'a) {
        self
    }
}

impl PartialEq for dyn AppKeyRef + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn AppKeyRef + '_ {}

impl PartialOrd for dyn AppKeyRef + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn AppKeyRef + '_ {
    /// As `AppKey`'s derived order: name, then namespace.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

impl std::hash::Hash for dyn AppKeyRef + '_ {
    /// The name's bytes, then the namespace's (two writes, not `str`'s four: the
    /// request path hashes a key on every generated name it resolves). Not
    /// `AppKey`'s own hash: a map keyed by `AppKey` is looked up by it, not by this.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let (name, namespace) = self.parts();
        state.write(name.as_bytes());
        state.write(namespace.as_bytes());
    }
}

impl std::fmt::Display for AppKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.name, self.namespace)
    }
}

/// One application as the broker described it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct App {
    /// As sent (case preserved), for display.
    pub name: String,
    pub namespace: String,
    /// From `create_application`, if one was seen; older brokers omit them.
    pub scalable: Option<bool>,
    pub ha: Option<bool>,
    /// Every endpoint of every gear, keyed by `address:port`. Boxed: a B-tree node
    /// holds room for 11 values, and most apps have one or two endpoints (unboxed,
    /// each app's first node took 1.9 KiB; 100k apps, 190 MiB).
    pub endpoints: BTreeMap<String, Box<Endpoint>>,
    /// Lower-case host names.
    pub aliases: BTreeSet<String>,
    /// Per alias (lower-case), its certificate and key; shared with the router's
    /// certificate index, which keeps restored ones as PEM until first used.
    pub certificates: BTreeMap<String, Arc<CertBundle>>,
}

impl App {
    fn new(id: &AppId) -> App {
        App {
            name: id.name.clone(),
            namespace: id.namespace.clone(),
            scalable: None,
            ha: None,
            endpoints: BTreeMap::new(),
            aliases: BTreeSet::new(),
            certificates: BTreeMap::new(),
        }
    }

    /// Whether the broker told us more than that the app exists: only such apps get
    /// host names (a bare `create_application` must not produce an empty route).
    pub fn is_announced(&self) -> bool {
        !self.endpoints.is_empty() || !self.aliases.is_empty() || !self.certificates.is_empty()
    }
}

/// What applying an event did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The app changed (or was removed); the route table must be rebuilt for it.
    Changed(AppKey),
    /// Nothing to do: a duplicate, or a remove of something unknown.
    Unchanged(NoChange),
}

/// Why an event changed nothing. Not an error: at-least-once delivery makes these normal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoChange {
    AlreadyPresent,
    NotFound,
}

impl NoChange {
    pub fn as_str(self) -> &'static str {
        match self {
            NoChange::AlreadyPresent => "already_present",
            NoChange::NotFound => "not_found",
        }
    }
}

/// All applications, keyed by [`AppKey`].
///
/// Hashed, not ordered: an event looks its app up four times (apply, journal,
/// certificates, table), and a B-tree's search at 100 000 apps is 17 string
/// comparisons through cold nodes, 5 % of the router's CPU per event
/// (`bench-events --perf`, 2026-11-28). `foldhash`, seeded per process: app names
/// come from the broker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoutingState {
    apps: HashMap<AppKey, Arc<App>, foldhash::fast::RandomState>,
}

impl RoutingState {
    pub fn new() -> RoutingState {
        RoutingState::default()
    }

    pub fn app(&self, key: &AppKey) -> Option<&Arc<App>> {
        self.apps.get(key)
    }

    /// Every app, in no particular order.
    pub fn apps(&self) -> impl Iterator<Item = (&AppKey, &Arc<App>)> {
        self.apps.iter()
    }

    pub fn len(&self) -> usize {
        self.apps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.apps.is_empty()
    }

    /// Builds a state from apps (e.g. loaded from disk); later duplicates win.
    pub fn from_apps(apps: impl IntoIterator<Item = App>) -> RoutingState {
        let apps = apps
            .into_iter()
            .map(|app| {
                let key = AppKey {
                    name: app.name.to_ascii_lowercase().into(),
                    namespace: app.namespace.to_ascii_lowercase().into(),
                };
                (key, Arc::new(app))
            })
            .collect();
        RoutingState { apps }
    }

    /// Sets an app's whole state (journal replay).
    pub(crate) fn put(&mut self, app: App) {
        let key = AppKey {
            name: app.name.to_ascii_lowercase().into(),
            namespace: app.namespace.to_ascii_lowercase().into(),
        };
        self.apps.insert(key, Arc::new(app));
    }

    /// Forgets an app (journal replay).
    pub(crate) fn remove(&mut self, key: &AppKey) {
        self.apps.remove(key);
    }

    /// Applies one event. Idempotent: applying the same event twice changes nothing
    /// the second time.
    pub fn apply(&mut self, event: &RoutingEvent) -> Applied {
        let key = AppKey::of(event.app());
        match event {
            RoutingEvent::CreateApplication { app, scalable, ha } => {
                // A new app is a change even when its flags are the defaults (the
                // legacy form carries none): it must be persisted and counted.
                let existed = self.apps.contains_key(&key);
                let entry = self.entry(&key, app);
                if existed && entry.scalable == *scalable && entry.ha == *ha {
                    return Applied::Unchanged(NoChange::AlreadyPresent);
                }
                let app = Arc::make_mut(entry);
                app.scalable = *scalable;
                app.ha = *ha;
                Applied::Changed(key)
            }
            RoutingEvent::DeleteApplication { .. } => match self.apps.remove(&key) {
                Some(_) => Applied::Changed(key),
                None => Applied::Unchanged(NoChange::NotFound),
            },
            RoutingEvent::AddPublicEndpoint { app, endpoint } => {
                let entry = self.entry(&key, app);
                let id = endpoint.key();
                if entry.endpoints.get(&id).map(|e| &**e) == Some(endpoint) {
                    return Applied::Unchanged(NoChange::AlreadyPresent);
                }
                Arc::make_mut(entry)
                    .endpoints
                    .insert(id, Box::new(endpoint.clone()));
                Applied::Changed(key)
            }
            RoutingEvent::RemovePublicEndpoint { address, port, .. } => {
                let id = endpoint_key(address, *port);
                self.modify(&key, |app| app.endpoints.remove(&id).is_some())
            }
            RoutingEvent::AddAlias { app, alias } => {
                let entry = self.entry(&key, app);
                if entry.aliases.contains(alias) {
                    return Applied::Unchanged(NoChange::AlreadyPresent);
                }
                Arc::make_mut(entry).aliases.insert(alias.clone());
                Applied::Changed(key)
            }
            RoutingEvent::RemoveAlias { alias, .. } => self.modify(&key, |app| {
                // An alias without its name has no use for its certificate either.
                let cert = app.certificates.remove(alias).is_some();
                app.aliases.remove(alias) || cert
            }),
            RoutingEvent::AddSsl { app, alias, bundle } => {
                let entry = self.entry(&key, app);
                if entry.certificates.get(alias).map(|b| &**b) == Some(bundle) {
                    return Applied::Unchanged(NoChange::AlreadyPresent);
                }
                Arc::make_mut(entry)
                    .certificates
                    .insert(alias.clone(), Arc::new(bundle.clone()));
                Applied::Changed(key)
            }
            RoutingEvent::RemoveSsl { alias, .. } => {
                self.modify(&key, |app| app.certificates.remove(alias).is_some())
            }
        }
    }

    /// The app for `key`, created from `id` if unknown (lazy creation).
    fn entry(&mut self, key: &AppKey, id: &AppId) -> &mut Arc<App> {
        self.apps
            .entry(key.clone())
            .or_insert_with(|| Arc::new(App::new(id)))
    }

    /// Runs `change` on an existing app; it returns whether it changed anything.
    /// The app is only copied (copy-on-write) when it is about to change.
    fn modify(&mut self, key: &AppKey, change: impl FnOnce(&mut App) -> bool) -> Applied {
        let Some(entry) = self.apps.get_mut(key) else {
            return Applied::Unchanged(NoChange::NotFound);
        };
        let mut copy = (**entry).clone();
        if change(&mut copy) {
            *entry = Arc::new(copy);
            Applied::Changed(key.clone())
        } else {
            Applied::Unchanged(NoChange::NotFound)
        }
    }
}

#[cfg(test)]
mod tests;
