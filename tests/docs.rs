//! The docs stay true: every YAML example in `docs/` that defines a stream builds, every
//! gateway API definition and gateway config loads, and every component is documented on
//! its family's page.

use sluice::component::registry::Registry;
use sluice::stream::{Stream, StreamEnv};

fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// Whether a block of the docs is (a part of) a gateway config.
fn is_gateway_config(block: &str) -> bool {
    block.starts_with("listen:") || block.starts_with("cluster:")
}

#[tokio::test]
async fn every_stream_example_in_the_docs_builds() {
    let mut checked = 0;
    for entry in std::fs::read_dir("docs").unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, block) in yaml_blocks(&text).into_iter().enumerate() {
            let name = format!("{}#{i}", path.display());
            // Gateway API definitions and gateway configs are checked as such.
            if block.contains("x-sluice-api-gateway:") {
                sluice::gateway::api::from_file(&name, &block)
                    .unwrap_or_else(|e| panic!("{name}: {e}\n{block}"));
                checked += 1;
                continue;
            }
            // Sections of the dashboard's config.
            if block.starts_with("portal:") {
                sluice::dashboard::config::parse(&name, &block, &[])
                    .unwrap_or_else(|e| panic!("{name}: {e}\n{block}"));
                checked += 1;
                continue;
            }
            if is_gateway_config(&block) {
                sluice::gateway::config::parse(&name, &block, &[])
                    .unwrap_or_else(|e| panic!("{name}: {e}\n{block}"));
                checked += 1;
                continue;
            }
            if !(block.contains("input:") || block.contains("streams:")) {
                continue;
            }
            let root = sluice::stream::config::parse_str(&name, &block)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{block}"));
            let env = StreamEnv::standalone()
                .with_resources(&root.resources)
                .unwrap_or_else(|e| panic!("resources: {e:?}"));
            for (stream, cfg) in &root.streams {
                Stream::build(stream, cfg, &env).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} examples found");
}

#[test]
fn every_component_is_documented_on_its_page() {
    let pages = [
        ("docs/inputs.md", sluice::input::InputKind::NAMES),
        (
            "docs/processors.md",
            sluice::processor::ProcessorKind::NAMES,
        ),
        ("docs/outputs.md", sluice::output::OutputKind::NAMES),
        ("docs/resources.md", sluice::cache::CacheKind::NAMES),
        (
            "docs/resources.md",
            sluice::rate_limit::RateLimitKind::NAMES,
        ),
    ];
    for (page, names) in pages {
        let text = std::fs::read_to_string(page).unwrap();
        for name in names {
            assert!(
                text.contains(&format!("## `{name}`")),
                "{page} lacks a section for `{name}`"
            );
        }
    }
}

#[tokio::test]
async fn every_spec_example_builds() {
    let specs = sluice::input::InputKind::specs()
        .into_iter()
        .chain(sluice::processor::ProcessorKind::specs())
        .chain(sluice::output::OutputKind::specs())
        .chain(sluice::cache::CacheKind::specs())
        .chain(sluice::rate_limit::RateLimitKind::specs());
    for (spec, _) in specs {
        assert!(!spec.examples.is_empty(), "{} has no example", spec.name);
        for ex in spec.examples {
            let root = sluice::stream::config::parse_str(spec.name, ex.yaml)
                .unwrap_or_else(|e| panic!("{} example `{}`: {e}", spec.name, ex.title));
            let env = StreamEnv::standalone()
                .with_resources(&root.resources)
                .unwrap_or_else(|e| panic!("resources: {e:?}"));
            for (stream, cfg) in &root.streams {
                Stream::build(stream, cfg, &env).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            }
        }
    }
}

/// The config file's JSON Schema accepts every example a user is shown: the docs' stream
/// configs and `pipelines/`.
#[test]
fn the_config_schema_accepts_every_example() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["list", "--format", "jsonschema"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let schema: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let mut docs: Vec<(String, String)> = Vec::new();
    for dir in ["docs", "pipelines"] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            match path.extension().and_then(|e| e.to_str()) {
                Some("md") => {
                    for (i, block) in yaml_blocks(&text).into_iter().enumerate() {
                        docs.push((format!("{}#{i}", path.display()), block));
                    }
                }
                Some("yaml") => docs.push((path.display().to_string(), text)),
                _ => {}
            }
        }
    }
    let mut checked = 0;
    for (name, block) in docs {
        let is_stream = (block.contains("input:") || block.contains("streams:"))
            && !block.contains("x-sluice-api-gateway:")
            && !is_gateway_config(&block);
        if !is_stream {
            continue;
        }
        let value: serde_json::Value = serde_yaml::from_str(&block).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&value)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:#?}");
        checked += 1;
    }
    assert!(checked > 50, "only {checked} configs checked");
}

/// `docs/metrics.md` lists every metric a Sluice process exports.
#[test]
fn every_metric_is_documented() {
    let text = std::fs::read_to_string("docs/metrics.md").unwrap();
    let missing: Vec<&str> = sluice::metrics::ALL
        .iter()
        .copied()
        .filter(|name| !text.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "not in docs/metrics.md: {missing:?}");
}

/// The metric names a PromQL expression reads, histogram series folded into their
/// metric (`_bucket`, `_sum`, `_count`).
fn metrics_in(expr: &str) -> Vec<String> {
    let names = regex::Regex::new(r"sluice_[a-z_]+").unwrap();
    names
        .find_iter(expr)
        .map(|m| {
            let name = m.as_str();
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| {
                    name.strip_suffix(suffix)
                        .filter(|base| sluice::metrics::ALL.contains(base))
                })
                .unwrap_or(name)
                .to_owned()
        })
        .collect()
}

/// The Grafana dashboard queries only metrics Sluice exports, and every panel queries
/// something.
#[test]
fn the_grafana_dashboard_queries_exported_metrics() {
    let text = std::fs::read_to_string("docs/grafana/sluice.json").unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut queried = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{} queries nothing", panel["title"]);
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            let names = metrics_in(expr);
            assert!(!names.is_empty(), "{expr}");
            queried.extend(names);
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(q) = var["definition"].as_str() {
            queried.extend(metrics_in(q));
        }
    }
    let unknown: Vec<&String> = queried
        .iter()
        .filter(|name| !sluice::metrics::ALL.contains(&name.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries what Sluice does not export: {unknown:?}"
    );
    // The dashboard covers the gateway, the streams, their HTTP clients and webhooks.
    for name in [
        sluice::metrics::GATEWAY_REQUESTS,
        sluice::metrics::STREAM_STATE,
        sluice::metrics::SENT_MESSAGES,
        sluice::metrics::HTTP_STREAM_ACTIVE_CONNECTIONS,
        sluice::metrics::WEBHOOK_ATTEMPTS,
    ] {
        assert!(queried.contains(name), "the dashboard does not show {name}");
    }
}
