#!/usr/bin/env bash
# Broker throughput: sluice pipelines vs bare client loops (same crates), 100-byte
# messages, ratios printed at the end. Starts the local brokers first.
#   benches/brokers.sh                 # everything
#   BENCH_SCALE=0.2 benches/brokers.sh # shorter runs
#   BENCH_ONLY=nats benches/brokers.sh # one broker (kafka, nats, mqtt)
#   BENCH_ROUNDS=9 benches/brokers.sh  # pairs of bare and sluice runs per case
set -euo pipefail
cd "$(dirname "$0")/.."
# The same build directory as scripts/test.sh: a bench build reuses its dependencies.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
scripts/brokers.sh
# Logs off: the bench prints its own lines.
SLUICE_LOG=off exec cargo bench --bench brokers
