//! The persistent map of the operator's per-name and per-app tables (splits,
//! paths, policies), hashed with `foldhash` rather than imbl's default SipHash:
//! each is probed on every request once it has an entry, and with SipHash the
//! probe of a 20-prefix path table's name cost about 290 instructions of a
//! request's 24 700 (`bench/RESULTS.md`, "Route and edge features when off…").
//! foldhash is seeded per process, so names an app owner chooses cannot be made
//! to collide; the route table's own maps use it for the same reason
//! (`table::maps`).

/// A persistent (structurally shared) hash map keyed by a name or an app.
pub type Keyed<K, V> =
    imbl::GenericHashMap<K, V, foldhash::fast::RandomState, imbl::shared_ptr::DefaultSharedPtr>;
