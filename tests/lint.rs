//! `sluice lint` checks without running: every problem of every stream and file, each
//! with file, document path, line and column, as text or JSON.

use std::path::{Path, PathBuf};

fn sluice() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Exit code and standard output of `sluice lint` with `args`.
fn lint(args: &[&Path], extra: &[&str]) -> (Option<i32>, String) {
    let out = sluice()
        .arg("lint")
        .args(extra)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const TWO_BAD_STREAMS: &str = "\
streams:
  a:
    input:
      generate: {payload: x}
    output:
      http_client:
        url: 'http://exa mple.com/'
  b:
    input:
      generate: {payload: x}
    output:
      broker:
        outputs:
          - drop: {}
          - kafka:
              addresses: [127.0.0.1:9092]
              topic: t
              max_in_flight: 0
";

#[test]
fn every_problem_of_every_stream_and_file_is_positioned() {
    let dir = tempfile::tempdir().unwrap();
    let streams = write(dir.path(), "streams.yaml", TWO_BAD_STREAMS);
    let parse = write(
        dir.path(),
        "parse.yaml",
        "input:\n  stdin: {}\noutput:\n  file:\n    pth: x.log\n",
    );
    let (code, out) = lint(&[&streams, &parse], &[]);
    assert_eq!(code, Some(1), "{out}");
    let lines: Vec<_> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let s = streams.display();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{s}:6:7 (streams.a.output.http_client): "))),
        "{out}"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "{s}:15:13 (streams.b.output.broker.outputs[1].kafka): "
        )) && l.contains("max_in_flight")),
        "{out}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{}:5:5 (output.file.pth)", parse.display()))),
        "{out}"
    );
}

#[test]
fn json_format_gives_each_field() {
    let dir = tempfile::tempdir().unwrap();
    let streams = write(dir.path(), "streams.yaml", TWO_BAD_STREAMS);
    let (code, out) = lint(&[&streams], &["--format", "json"]);
    assert_eq!(code, Some(1), "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let items = v.as_array().unwrap();
    assert_eq!(items.len(), 2, "{out}");
    let kafka = items
        .iter()
        .find(|i| i["path"] == "streams.b.output.broker.outputs[1].kafka")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(kafka["file"], streams.display().to_string());
    assert_eq!(
        (kafka["line"].as_u64(), kafka["column"].as_u64()),
        (Some(15), Some(13))
    );
    assert!(kafka["message"].as_str().unwrap().contains("max_in_flight"));

    let clean = write(
        dir.path(),
        "clean.yaml",
        "input: {stdin: {}}\noutput: {drop: {}}\n",
    );
    let (code, out) = lint(&[&clean], &["--format", "json"]);
    assert_eq!((code, out.trim()), (Some(0), "[]"));
}

#[test]
fn files_are_checked_one_by_one_unless_together() {
    let dir = tempfile::tempdir().unwrap();
    let text = "input:\n  http_server: {path: /events}\noutput:\n  drop: {}\n";
    let a = write(dir.path(), "a.yaml", text);
    let b = write(dir.path(), "b.yaml", text);
    let (code, out) = lint(&[&a, &b], &[]);
    assert_eq!(code, Some(0), "{out}");
    let (code, out) = lint(&[&a, &b], &["--together"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("already served"), "{out}");
    assert!(
        out.starts_with(&format!("{}:2:3 (input.http_server)", b.display())),
        "{out}"
    );
}

#[test]
fn the_readme_tour_lints_every_example() {
    let mut files: Vec<_> = std::fs::read_dir("pipelines")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (code, out) = lint(&paths, &[]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn an_empty_config_is_an_error_for_lint_and_run() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty.yaml", "# nothing yet\n");
    let (code, out) = lint(&[&empty], &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("no streams to run"), "{out}");
    let run = sluice().arg("run").arg(&empty).output().unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&run.stderr).contains("no streams to run"));
}

#[test]
fn nested_aliases_and_duplicate_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..9 {
        let refs = vec![format!("*a{}", i - 1); 9].join(", ");
        bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
    }
    let bomb = write(dir.path(), "bomb.yaml", &bomb);
    let (code, out) = lint(&[&bomb], &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("aliases expand the document"), "{out}");

    let dup = write(
        dir.path(),
        "dup.yaml",
        "input: {stdin: {}}\noutput: {drop: {}}\ninput: {generate: {payload: x}}\n",
    );
    let (code, out) = lint(&[&dup], &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "{}:3:1 (input): duplicate key `input`: first given at line 1, column 1",
            dup.display()
        )),
        "{out}"
    );
}

/// A stream config listening on `address`.
fn with_address(dir: &Path, address: &str) -> PathBuf {
    let text =
        format!("http:\n  address: '{address}'\ninput: {{stdin: {{}}}}\noutput: {{drop: {{}}}}\n");
    write(dir, "http.yaml", &text)
}

#[test]
fn a_listen_address_run_would_refuse_is_a_lint_error() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["4195", "localhost", "127.0.0.1:99999", ":4195", "a b:80"] {
        let path = with_address(dir.path(), bad);
        let (code, out) = lint(&[&path], &[]);
        assert_eq!(code, Some(1), "{bad}: {out}");
        assert!(
            out.contains(&format!(
                "{}:2:12 (http.address): `{bad}` is not a listen address",
                path.display()
            )),
            "{bad}: {out}"
        );
    }
    for good in ["127.0.0.1:0", "[::1]:4195", "localhost:4195", "0.0.0.0:80"] {
        let path = with_address(dir.path(), good);
        let (code, out) = lint(&[&path], &[]);
        assert_eq!(code, Some(0), "{good}: {out}");
    }
}

const CHAT_API: &str = "\
openapi: 3.0.3
info: {title: chat, version: '1'}
paths: {}
x-sluice-api-gateway:
  info: {id: chat, name: chat}
  server: {listenPath: {value: /chat/, strip: true}}
x-sluice-streaming:
  streams:
    main:
      input:
        http_server: {path: /say}
      output:
        http_server: {stream_path: /events, delivery: broadcast}
";

#[test]
fn an_api_definition_is_compiled_as_the_gateway_does_and_a_node_local_stream_warned_of() {
    let dir = tempfile::tempdir().unwrap();
    let chat = write(dir.path(), "chat.yaml", CHAT_API);
    let (code, out) = lint(&[&chat], &[]);
    assert_eq!(code, Some(0), "a warning does not fail: {out}");
    let line = out.lines().next().unwrap_or_default();
    assert!(line.starts_with("warning: "), "{out}");
    assert!(line.contains("chat.yaml:9:"), "placed at the stream: {out}");
    assert!(line.contains("cluster.bus"), "{out}");

    let (code, out) = lint(&[&chat], &["--format", "json"]);
    assert_eq!(code, Some(0));
    let items: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(items[0]["severity"], "warning");
    assert_eq!(items[0]["path"], "x-sluice-streaming.streams.main");
    assert_eq!(items[0]["line"], 9);

    // A broken definition is an error, placed like the gateway places it.
    let broken = write(
        dir.path(),
        "broken.yaml",
        &CHAT_API.replace(
            "stream_path: /events",
            "stream_path: /events, max_in_flight: 0",
        ),
    );
    let (code, out) = lint(&[&broken], &[]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("broken.yaml:13:"), "{out}");
    assert!(out.contains("max_in_flight"), "{out}");
    assert!(!out.contains("warning:"), "{out}");
}
