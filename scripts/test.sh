#!/usr/bin/env bash
# Installs what the tests need and runs them: formatting, lints, unit and integration
# tests. Safe to run again: set-up steps skip what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# Builds are slow on small machines: keep compiled artefacts outside the checkout so a
# fresh clone reuses them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

# Brokers and services the integration tests talk to, and the browser that drives the
# web console.
for setup in scripts/brokers.sh scripts/browser.sh; do
  if [ -x "$setup" ]; then
    "$setup"
  fi
done

cargo fmt --all -- --check
cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked
