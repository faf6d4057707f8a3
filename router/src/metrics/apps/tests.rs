use super::*;

fn limits(max_apps: usize) -> ExportLimits {
    ExportLimits {
        max_apps,
        idle: Duration::from_secs(600),
    }
}

/// The exported requests of each label value, and their sum.
fn requests(apps: &AppsTraffic) -> (HashMap<String, u64>, u64) {
    let rows: HashMap<String, u64> = apps
        .exported()
        .into_iter()
        .map(|(k, t)| (k.to_string(), t.requests()))
        .collect();
    let sum = rows.values().sum();
    (rows, sum)
}

fn ok(t: &AppTraffic, n: u64) {
    for _ in 0..n {
        t.record(200, Duration::from_millis(3), 10, 100);
    }
}

#[test]
fn a_placed_app_starts_at_zero_and_totals_always_add_up() {
    let apps = AppsTraffic::new().expect("descs");
    apps.set_limits(limits(2));
    let (a, b, c) = (apps.of("a-ns"), apps.of("b-ns"), apps.of("c-ns"));
    let t0 = Instant::now();
    ok(&a, 5);
    ok(&b, 3);
    ok(&c, 1);
    apps.unrouted().record(404, Duration::from_millis(1), 0, 10);
    let (before, sum) = requests(&apps);
    assert_eq!(sum, 10, "everything counted once");
    assert_eq!(before.len(), 1, "no place given yet: all in _other");
    apps.pass(t0);
    let (rows, sum) = requests(&apps);
    assert_eq!(sum, 10, "giving places moves nothing");
    assert_eq!(rows.get("a-ns"), Some(&0), "a starts at zero");
    assert_eq!(rows.get("b-ns"), Some(&0));
    assert_eq!(rows.get("c-ns"), None, "two places, the busiest two");
    assert_eq!(rows.get(OTHER), Some(&10));
    ok(&a, 2);
    ok(&c, 4);
    let (rows, sum) = requests(&apps);
    assert_eq!(sum, 16);
    assert_eq!(rows.get("a-ns"), Some(&2));
    assert_eq!(rows.get(OTHER), Some(&14), "c is still summed there");
}

#[test]
fn an_idle_or_removed_app_gives_its_place_back_and_other_only_grows() {
    let apps = AppsTraffic::new().expect("descs");
    apps.set_limits(ExportLimits {
        max_apps: 1,
        idle: Duration::from_secs(60),
    });
    let (a, b) = (apps.of("a-ns"), apps.of("b-ns"));
    let t0 = Instant::now();
    ok(&a, 1);
    apps.pass(t0);
    ok(&a, 3);
    ok(&b, 2);
    let other_before = requests(&apps).0[OTHER];
    // a idle for a minute: its place goes to b, its three move to _other.
    apps.pass(t0 + Duration::from_secs(30));
    ok(&b, 1);
    apps.pass(t0 + Duration::from_secs(91));
    let (rows, sum) = requests(&apps);
    assert_eq!(sum, 7);
    assert_eq!(rows.get("a-ns"), None, "idle: no series");
    assert_eq!(rows.get("b-ns"), Some(&0), "b placed, from zero");
    assert!(rows[OTHER] >= other_before, "_other never goes down");
    ok(&b, 2);
    let other_before = requests(&apps).0[OTHER];
    apps.remove("b-ns");
    let (rows, sum) = requests(&apps);
    assert_eq!(sum, 9, "a removed app's requests stay counted");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[OTHER], other_before + 2);
}

#[test]
fn the_export_is_bounded_whatever_the_number_of_apps() {
    let apps = AppsTraffic::new().expect("descs");
    apps.set_limits(limits(10));
    let all: Vec<_> = (0..3000).map(|i| apps.of(&format!("app{i}-ns"))).collect();
    for (i, t) in all.iter().enumerate() {
        ok(t, 1 + (i as u64 % 7));
    }
    apps.pass(Instant::now());
    let families = apps.families(Instant::now());
    let values: std::collections::HashSet<String> = families[0]
        .get_metric()
        .iter()
        .flat_map(|m| m.get_label().iter())
        .filter(|l| l.name() == "app")
        .map(|l| l.value().to_string())
        .collect();
    assert_eq!(values.len(), 11, "ten apps and _other");
    assert_eq!(apps.placed(), (10, 2990));
    let total: f64 = families[0]
        .get_metric()
        .iter()
        .map(|m| m.get_counter().get_value())
        .sum();
    let want: u64 = (0..3000u64).map(|i| 1 + i % 7).sum();
    assert_eq!(total as u64, want, "exactly every request");
}

#[test]
fn quantiles_are_read_off_the_buckets() {
    let t = AppTraffic::default();
    for _ in 0..98 {
        t.record(200, Duration::from_millis(2), 0, 0);
    }
    t.record(500, Duration::from_millis(300), 0, 0);
    t.record(500, Duration::from_secs(10), 0, 0);
    let totals = t.totals();
    let p50 = totals.quantile(0.5).expect("requests");
    assert!(p50 > 0.0 && p50 <= 0.005, "{p50}");
    let p99 = totals.quantile(0.99).expect("requests");
    assert!(p99 > 0.1 && p99 <= 0.5, "{p99}");
    assert_eq!(
        totals.quantile(1.0),
        Some(2.5),
        "past the last bound: that bound"
    );
    assert_eq!(Totals::default().quantile(0.5), None);
}

#[test]
fn the_admin_window_covers_one_to_two_minutes_and_idle_apps_keep_none() {
    let apps = AppsTraffic::new().expect("descs");
    let a = apps.of("a-ns");
    let t0 = Instant::now();
    ok(&a, 1);
    apps.pass(t0);
    let s = apps
        .stats("a-ns", t0 + Duration::from_secs(1))
        .expect("in the table");
    assert_eq!(
        s.error_ratio,
        Some(0.0),
        "an app's first requests are in its window"
    );
    for _ in 0..60 {
        a.record(503, Duration::from_millis(1), 0, 0);
    }
    apps.pass(t0 + Duration::from_secs(61));
    let s = apps
        .stats("a-ns", t0 + Duration::from_secs(61))
        .expect("in the table");
    assert_eq!(s.totals.requests(), 61);
    assert!(
        (s.requests_per_second - 60.0 / 61.0).abs() < 1e-9,
        "{}",
        s.requests_per_second
    );
    assert_eq!(s.error_ratio, Some(1.0));
    // Two windows without a request: no copies kept, rates zero.
    apps.pass(t0 + Duration::from_secs(200));
    let s = apps
        .stats("a-ns", t0 + Duration::from_secs(200))
        .expect("in the table");
    assert_eq!((s.requests_per_second, s.error_ratio), (0.0, None));
    assert!(apps.stats("nope-ns", t0).is_none());
}

#[test]
fn a_much_busier_app_takes_the_place_of_a_quiet_one_after_a_minute() {
    let apps = AppsTraffic::new().expect("descs");
    apps.set_limits(limits(1));
    let (quiet, busy) = (apps.of("quiet-ns"), apps.of("busy-ns"));
    let t0 = Instant::now();
    ok(&quiet, 1);
    apps.pass(t0);
    ok(&busy, 50);
    apps.pass(t0 + Duration::from_secs(10));
    let (rows, _) = requests(&apps);
    assert!(
        rows.contains_key("quiet-ns"),
        "held for less than a minute: kept"
    );
    ok(&quiet, 1);
    ok(&busy, 50);
    apps.pass(t0 + Duration::from_secs(70));
    let (rows, sum) = requests(&apps);
    assert_eq!(rows.get("busy-ns"), Some(&0), "busier: placed, from zero");
    assert!(!rows.contains_key("quiet-ns"), "its place given up");
    assert_eq!(sum, 102, "nothing lost in the swap");
    // Not twice as busy: no swap back.
    ok(&quiet, 30);
    ok(&busy, 20);
    apps.pass(t0 + Duration::from_secs(140));
    assert!(requests(&apps).0.contains_key("busy-ns"));
}
