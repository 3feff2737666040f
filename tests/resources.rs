//! Resources through `sluice run` and `sluice lint`: a cache shared by two streams of a
//! file, component resources used by name, and the errors for names that do not resolve.

use std::path::Path;

fn sluice() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_file_level_cache_deduplicates_across_its_streams() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    std::fs::write(dir.path().join("a.txt"), "1\n2\n3\n").unwrap();
    std::fs::write(dir.path().join("b.txt"), "2\n3\n4\n").unwrap();
    let config = format!(
        r#"
cache_resources:
  - label: seen
    memory: {{default_ttl: 1h}}
processor_resources:
  - label: once
    dedupe: {{cache: seen, key: '${{! content() }}'}}
input_resources:
  - label: b_lines
    file: {{paths: ["{d}/b.txt"], codec: lines}}
output_resources:
  - label: b_out
    file: {{path: "{d}/b.out", codec: lines}}
streams:
  a:
    input: {{file: {{paths: ["{d}/a.txt"], codec: lines}}}}
    pipeline: {{processors: [{{resource: once}}]}}
    output: {{file: {{path: "{d}/a.out", codec: lines}}}}
  b:
    input: {{resource: b_lines}}
    pipeline: {{processors: [{{resource: once}}]}}
    output: {{resource: b_out}}
"#
    );
    let file = dir.path().join("shared.yaml");
    std::fs::write(&file, config).unwrap();
    let out = sluice()
        .args(["run"])
        .arg(&file)
        .env("SLUICE_LOG", "error")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut all = lines(&dir.path().join("a.out"));
    all.extend(lines(&dir.path().join("b.out")));
    all.sort();
    // One cache for both streams: each value once, whichever stream saw it first.
    assert_eq!(all, ["1", "2", "3", "4"]);
}

fn lint(config: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.yaml");
    std::fs::write(&file, config).unwrap();
    let out = sluice().arg("lint").arg(&file).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn names_that_do_not_resolve_are_lint_errors_with_their_place() {
    let (ok, text) = lint(
        "cache_resources:\n  - label: seen\n    memory: {}\ninput:\n  stdin: {}\npipeline:\n  processors:\n    - dedupe: {cache: sen, key: x}\noutput:\n  stdout: {}\n",
    );
    assert!(!ok);
    assert!(text.contains("pipeline.processors[0].dedupe"), "{text}");
    assert!(text.contains(":8:"), "line 8: {text}");
    assert!(
        text.contains("no cache resource `sen` (`cache_resources` has `seen`)"),
        "{text}"
    );
}

#[test]
fn resources_that_refer_to_each_other_in_a_loop_are_refused() {
    let (ok, text) = lint(
        "output_resources:\n  - label: a\n    fallback: [{resource: b}, {drop: {}}]\n  - label: b\n    resource: a\ninput:\n  stdin: {}\noutput:\n  resource: a\n",
    );
    assert!(!ok);
    assert!(
        text.contains("output resource `a` -> output resource `b` -> output resource `a`"),
        "{text}"
    );
}

#[test]
fn a_resource_without_a_label_or_with_a_bad_setting_is_placed() {
    let (ok, text) = lint("rate_limit_resources:\n  - local: {count: 5}\ninput:\n  stdin: {}\noutput:\n  stdout: {}\n");
    assert!(!ok);
    assert!(
        text.contains("rate_limit_resources[0]") && text.contains("needs a `label`"),
        "{text}"
    );
    let (ok, text) = lint(
        "rate_limit_resources:\n  - label: l\n    local: {count: 0}\ninput:\n  stdin: {}\noutput:\n  stdout: {}\n",
    );
    assert!(!ok);
    assert!(
        text.contains("rate_limit_resources[0].local") && text.contains(":3:"),
        "{text}"
    );
}
