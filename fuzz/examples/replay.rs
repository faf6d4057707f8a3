//! Runs one target's check on the files named, saying which fail: for triage of
//! a crash file on stable (`FUZZ_SHOW=1` makes `client_stream` print each run).
//!
//! `cargo run -p fuzz --example replay -- client_stream fuzz/corpus/client_stream/*`

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let target = args.next().unwrap_or_default();
    let Some(check) = fuzz::check(&target) else {
        eprintln!(
            "usage: replay TARGET FILE...; targets: {}",
            fuzz::TARGETS.map(|(n, _)| n).join(" ")
        );
        return std::process::ExitCode::from(2);
    };
    let mut failed = false;
    for path in args {
        let data = match std::fs::read(&path) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{path}: {e}");
                failed = true;
                continue;
            }
        };
        let ok = std::panic::catch_unwind(|| check(&data)).is_ok();
        println!("{path}: {}", if ok { "ok" } else { "FAILED" });
        failed |= !ok;
    }
    if failed {
        std::process::ExitCode::FAILURE
    } else {
        std::process::ExitCode::SUCCESS
    }
}
