//! `processors` on inputs and outputs: each input's apply to what it reads (a broker's
//! after its inputs' own), each output's to what it is given, through `sluice run`.

fn run(config: &str, dir: &std::path::Path) {
    let file = dir.join("c.yaml");
    std::fs::write(&file, config).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(&file)
        .env("SLUICE_LOG", "error")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sorted_lines(path: &std::path::Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn inputs_and_outputs_apply_their_own_processors() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    run(
        &format!(
            r#"
input:
  broker:
    inputs:
      - generate: {{count: 2, mapping: 'root = "a"'}}
        processors:
          - mapping: 'root = content().string() + "1"'
      - generate: {{count: 1, mapping: 'root = "b"'}}
  processors:
    - mapping: 'root = content().string() + "-broker"'
    - mapping: 'root = if content().string().has_prefix("b") {{ deleted() }} else {{ content() }}'
pipeline:
  processors:
    - mapping: 'root = content().string() + "-pipeline"'
output:
  file: {{path: "{d}/out.txt", codec: lines}}
  processors:
    - mapping: 'root = content().string() + "-output"'
"#
        ),
        dir.path(),
    );
    // The `b` message was filtered by the broker's processors, and settled, so the run
    // ended cleanly.
    assert_eq!(
        sorted_lines(&dir.path().join("out.txt")),
        ["a1-broker-pipeline-output", "a1-broker-pipeline-output"]
    );
}

#[test]
fn a_routers_processors_run_before_it_routes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    run(
        &format!(
            r#"
input:
  generate: {{count: 2, mapping: 'root = {{"n": count("n")}}'}}
output:
  broker:
    pattern: fan_out
    outputs:
      - file: {{path: "{d}/one.txt", codec: lines}}
      - file: {{path: "{d}/two.txt", codec: lines}}
        processors:
          - mapping: 'root = this.n * 100'
  processors:
    - mapping: 'root.n = this.n + 1'
"#
        ),
        dir.path(),
    );
    assert_eq!(
        sorted_lines(&dir.path().join("one.txt")),
        [r#"{"n":2}"#, r#"{"n":3}"#]
    );
    assert_eq!(sorted_lines(&dir.path().join("two.txt")), ["200", "300"]);
}
