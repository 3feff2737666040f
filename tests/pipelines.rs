//! Every example in `pipelines/` lints clean and runs as documented.

use crate::common;

use common::{eventually, read_lines, Sluice};

fn sluice() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
}

#[test]
fn every_example_lints_clean() {
    let mut files: Vec<_> = std::fs::read_dir("pipelines")
        .expect("pipelines/")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for f in files {
        let out = sluice().arg("lint").arg(&f).output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn hello_prints_five_greetings_and_exits_zero() {
    // It has no HTTP component, so it does not listen: it runs beside whatever holds the
    // default port (held here, or by another process).
    let _holder = std::net::TcpListener::bind("127.0.0.1:4195");
    let out = sluice()
        .args(["run", "pipelines/hello.yaml"])
        .env("SLUICE_LOG", "error")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<_> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert!(lines.iter().all(|l| l.contains("hello from sluice")));
}

#[tokio::test]
async fn http_to_file_example_writes_posted_bodies() {
    let text = std::fs::read_to_string("pipelines/http_to_file.yaml").unwrap();
    let text = text
        .replace("${SLUICE_HTTP_ADDRESS:0.0.0.0:4195}", "127.0.0.1:{port}")
        .replace("${EVENTS_FILE:./events.log}", "{dir}/events.log");
    let mut s = Sluice::start(&text).await;
    s.wait_up().await;
    let client = reqwest::Client::new();
    for body in ["first", "second"] {
        let resp = client
            .post(s.url("/events"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let out = s.path("events.log");
    eventually("both lines", || read_lines(&out).len() == 2).await;
    assert_eq!(read_lines(&out), vec!["first", "second"]);
    s.signal("TERM");
    assert_eq!(s.finish().await.0, 0);
}

#[tokio::test]
async fn the_petstore_upstream_answers_the_gateway_tour() {
    let text = std::fs::read_to_string("pipelines/petstore_upstream.yaml").unwrap();
    let text = text.replace("${PETSTORE_LISTEN:127.0.0.1:9000}", "127.0.0.1:{port}");
    let mut s = Sluice::start(&text).await;
    s.wait_up().await;
    let client = reqwest::Client::new();
    let list = client.get(s.url("/pets?limit=5")).send().await.unwrap();
    assert_eq!(list.status(), 200);
    assert_eq!(list.headers()["content-type"], "application/json");
    let pets: serde_json::Value = list.json().await.unwrap();
    assert_eq!(pets[0]["name"], "Rex", "{pets}");
    assert_eq!(pets.as_array().unwrap().len(), 2);
    let added: serde_json::Value = client
        .post(s.url("/pets"))
        .body(r#"{"name": "Kit"}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(added, serde_json::json!({"id": 3, "name": "Kit"}));
    s.signal("TERM");
    assert_eq!(s.finish().await.0, 0);
}

#[test]
fn lint_reports_a_misspelt_key_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(
        &path,
        "input:\n  stdin: {}\noutput:\n  file:\n    pth: x.log\n",
    )
    .unwrap();
    let out = sluice().arg("lint").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("bad.yaml:5:5 (output.file.pth): unknown field `pth`"),
        "{stdout}"
    );
    assert!(stdout.contains("did you mean `path`"), "{stdout}");
}

#[test]
fn list_shows_fields_with_defaults() {
    let out = sluice().args(["list", "inputs"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("generate"));
    assert!(
        text.contains("interval") && text.contains("\"1s\""),
        "{text}"
    );
    let json = sluice().args(["list", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert!(v["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o["name"] == "http_client"));
}

#[test]
fn lint_reports_duplicate_labels_and_clashing_paths() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.yaml");
    std::fs::write(
        &path,
        "input:\n  broker:\n    inputs:\n      - label: a\n        http_server: {path: /x}\n      - label: a\n        http_server: {path: /y}\noutput:\n  drop: {}\n",
    )
    .unwrap();
    let out = sluice().arg("lint").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("label `a` is used twice"));
    std::fs::write(
        &path,
        "input:\n  broker:\n    inputs:\n      - http_server: {path: /x}\n      - http_server: {path: /x/}\noutput:\n  drop: {}\n",
    )
    .unwrap();
    let out = sluice().arg("lint").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("already served"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn blobl_maps_each_line_and_reports_failures() {
    use std::io::Write;
    let mut child = sluice()
        .args(["blobl", "root.b = this.a + 1"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"a\":1}\nnot json\n{\"a\":41}\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed line makes the exit status 1"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "{\"b\":2}\n{\"b\":42}\n"
    );
    assert!(!out.stderr.is_empty());
    let parse = sluice().args(["blobl", "root = "]).output().unwrap();
    assert_eq!(parse.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&parse.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&parse.stderr)
    );
}

#[test]
fn every_example_passes_its_config_tests() {
    let out = sluice().args(["test", "pipelines/"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // Every example has tests of its own.
    for entry in std::fs::read_dir("pipelines").unwrap() {
        let path = entry.unwrap().path();
        assert!(
            text.contains(&format!("PASS {}:", path.display())),
            "{} has no passing test:\n{text}",
            path.display()
        );
    }
}

#[test]
fn a_failing_config_test_is_reported_at_its_condition_and_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("shout.yaml"),
        "input:\n  stdin: {}\npipeline:\n  processors:\n    - mapping: 'root = content().uppercase()'\noutput:\n  stdout: {}\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("shout_sluice_test.yaml"),
        "tests:\n  - name: shouts\n    input_batch: [{content: hi}]\n    output_batches:\n      - - content_equals: HI\n  - name: whispers\n    input_batch: [{content: hi}]\n    output_batches:\n      - - content_equals: hi\n          bloblang: 'content() == \"HI\"'\n",
    )
    .unwrap();
    let out = sluice().arg("test").arg(dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("shout_sluice_test.yaml:2 shouts"), "{text}");
    assert!(text.contains("FAIL") && text.contains("whispers"), "{text}");
    assert!(
        text.contains("shout_sluice_test.yaml:9:11")
            && text.contains(r#"content_equals: expected "hi", got "HI""#),
        "{text}"
    );
    assert!(
        !text.contains("bloblang:"),
        "the passing condition is not reported: {text}"
    );
    assert!(
        text.contains("2 test(s) in 1 file(s): 1 passed, 1 failed"),
        "{text}"
    );
}

#[test]
fn sluice_test_without_tests_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = sluice().arg("test").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("no config tests found"));
}

#[test]
fn the_config_tests_page_example_passes() {
    let page = std::fs::read_to_string("docs/testing.md").unwrap();
    let start = page.find("```yaml\n").expect("a YAML example") + "```yaml\n".len();
    let end = start + page[start..].find("```").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("orders.yaml");
    std::fs::write(&file, &page[start..end]).unwrap();
    let out = sluice().arg("test").arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}
