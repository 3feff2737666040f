//! The running dashboard against its own OpenAPI document: `scripts/schemathesis.sh`
//! starts the built binary and runs schemathesis with a bounded number of examples per
//! operation. It fails on any 5xx or any response the document does not allow. When
//! schemathesis is not installed the script installs it (python3 and PyPI are needed);
//! the test fails rather than skips when it cannot. The seed is fixed, so that a run
//! gives the same verdict on the same code; the script run by hand without `SEED`
//! explores new examples each time.

#[test]
fn the_dashboard_answers_as_its_document_says() {
    let status = std::process::Command::new("scripts/schemathesis.sh")
        .env("SLUICE_BIN", env!("CARGO_BIN_EXE_sluice"))
        .env("EXAMPLES", "20")
        .env("SEED", "20261126")
        .status()
        .expect("run scripts/schemathesis.sh");
    assert!(status.success(), "schemathesis found problems (see above)");
}
