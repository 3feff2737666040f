//! Sluice's integration tests, one module per area, built as one test binary: every test
//! binary links the whole crate and its C libraries, and one link is much cheaper than
//! thirty. Run one area with a filter: `cargo test --test integration gateway::`.
//!
//! A new `tests/<area>.rs` must be listed here (`autotests` is off in `Cargo.toml`);
//! `every_test_file_is_listed` below fails until it is.

mod common;

mod amqp;
mod amqp1;
mod asyncapi;
mod attached;
mod cluster;
mod console;
mod dashboard;
mod dashboard_schemathesis;
mod docs;
mod egress;
mod engine;
mod filtered_streams;
mod fuzz_regressions;
mod gateway;
mod gateway_streams;
mod http_streams;
mod kafka;
mod layering;
mod limit_redis;
mod lint;
mod live_changes;
mod live_streams;
mod mapping;
mod mqtt;
mod nats;
mod otel;
mod pipelines;
mod portal;
mod portal_browser;
mod portal_developers;
mod redis;
mod resources;
mod rolling_restart;
mod serve;
mod server;
mod slow_clients;
mod store;
mod stream_health;
mod tenant_programs;
mod tenants;
mod webhooks;

#[test]
fn every_test_file_is_listed() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = std::fs::read_to_string(root.join("main.rs")).unwrap();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(area) = name.strip_suffix(".rs") {
            if area != "main" && !main.contains(&format!("\nmod {area};\n")) {
                missing.push(name);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "add `mod <area>;` to tests/main.rs for {missing:?}: they are not built"
    );
}
