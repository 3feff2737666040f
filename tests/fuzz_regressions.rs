//! The fuzz targets' checks (`fuzz/src/lib.rs`, run by `scripts/fuzz.sh`) on fixed inputs,
//! so `cargo test` keeps checking them without the fuzzer: every input a fuzzer once
//! failed on (`tests/fuzz_inputs/<target>/`, one file each, named for what went wrong)
//! and the seeds the fuzzers start from.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[path = "../fuzz/src/lib.rs"]
mod checks;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// As long as libFuzzer lets one input run (`-timeout` in scripts/fuzz.sh) before it
/// reports a hang.
const HANG: Duration = Duration::from_secs(10);

/// Runs `check` on every file under `dirs` (relative to the package) and fails naming
/// each input whose check panicked (the panic messages are printed above) or hung.
fn check_all(check: fn(&[u8]), dirs: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut inputs = Vec::new();
    for d in dirs {
        files(&root.join(d), &mut inputs);
    }
    inputs.sort();
    assert!(!inputs.is_empty(), "no inputs under {dirs:?}");
    let failed: Vec<String> = inputs
        .iter()
        .filter(|p| {
            let data = std::fs::read(p).unwrap();
            let start = Instant::now();
            catch_unwind(AssertUnwindSafe(|| check(&data))).is_err() || start.elapsed() > HANG
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(failed.is_empty(), "failed on {failed:#?}");
}

#[test]
fn mapping() {
    check_all(
        checks::mapping,
        &["tests/fuzz_inputs/mapping", "tests/mapping"],
    );
}

#[test]
fn config() {
    check_all(checks::config, &["tests/fuzz_inputs/config", "pipelines"]);
}

#[test]
fn json() {
    check_all(checks::json, &["tests/fuzz_inputs/json", "fuzz/seeds/json"]);
}

#[test]
fn upstream_response() {
    check_all(
        checks::upstream_response,
        &[
            "tests/fuzz_inputs/upstream_response",
            "fuzz/seeds/upstream_response",
        ],
    );
}

#[test]
fn requests() {
    check_all(
        checks::requests,
        &["tests/fuzz_inputs/requests", "fuzz/seeds/requests"],
    );
}
