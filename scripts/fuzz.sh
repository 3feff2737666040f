#!/usr/bin/env bash
# Builds the fuzz targets in fuzz/ and runs each for a bounded time, one after another,
# then prints the executions per target. Exits non-zero when a target failed.
#
#   scripts/fuzz.sh                     # every target (mapping, config, json,
#                                       # upstream_response, requests), 60 s each
#   FUZZ_SECONDS=600 scripts/fuzz.sh    # longer runs
#   scripts/fuzz.sh json mapping        # some targets only
#
# Installs cargo-fuzz into $HOME/.cache/sluice-tools the first time. The fuzz build uses
# compiler flags that only nightly Rust accepts; on a stable toolchain RUSTC_BOOTSTRAP=1
# lets the same compiler take them.
#
# Corpora grow in fuzz/corpus/<target> (not committed), seeded from the repository's own
# examples; a failing input is written to fuzz/artifacts/<target>/ and the run's log to
# fuzz/logs/<target>.log. Check it with `cargo fuzz run <target> <file>`, then add it
# to tests/fuzz_regressions.rs.
#
# Settings (environment):
#   FUZZ_SECONDS     run time per target (default 60)
#   FUZZ_SANITIZER   address, leak, memory, thread or none (default none: the only unsafe
#                    code is the Kafka batch output's calls into librdkafka, which no fuzz
#                    target reaches, and the fuzzers look for panics, hangs, runaway
#                    memory and disagreements, which need no sanitizer; none runs faster)
#   FUZZ_TARGET_DIR  build directory (default $HOME/.cache/sluice-fuzz-target)
#   FUZZ_RSS_MB      memory limit of a run, in MiB (default 2048)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-60}"
sanitizer="${FUZZ_SANITIZER:-none}"
target_dir="${FUZZ_TARGET_DIR:-$HOME/.cache/sluice-fuzz-target}"
rss_mb="${FUZZ_RSS_MB:-2048}"
tools_root="${SLUICE_TOOLS_ROOT:-$HOME/.cache/sluice-tools}"
all_targets=(mapping config json upstream_response requests)
targets=("${@:-${all_targets[@]}}")

log() { echo "fuzz: $*" >&2; }

export PATH="$tools_root/bin:$PATH"
if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install --quiet --locked --root "$tools_root" cargo-fuzz
fi
if ! rustc --version | grep -q nightly; then
    export RUSTC_BOOTSTRAP=1
fi

# Seeds: the repository's own examples of each input, read but never written.
seeds() { # target
    case "$1" in
        mapping) echo tests/mapping ;;
        config) echo pipelines ;;
        json) echo fuzz/seeds/json ;;
        upstream_response) echo fuzz/seeds/upstream_response ;;
        requests) echo fuzz/seeds/requests ;;
        *) log "unknown target $1 (targets: ${all_targets[*]})"; return 1 ;;
    esac
}

# Longest generated input: long enough for a real mapping or config, short enough that
# one run stays quick.
max_len() { # target
    case "$1" in
        config) echo 8192 ;;
        *) echo 4096 ;;
    esac
}

for t in "${targets[@]}"; do
    seeds "$t" >/dev/null
done

# Debug assertions stay on: integer overflow panics instead of wrapping silently.
build=(--fuzz-dir fuzz --target-dir "$target_dir" --sanitizer "$sanitizer" --debug-assertions)
log "building the fuzz targets"
cargo fuzz build "${build[@]}"

mkdir -p fuzz/logs
declare -A execs result
status=0
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    # cargo-fuzz writes failing inputs here.
    artifacts="fuzz/artifacts/$t"
    mkdir -p "$corpus"
    log "running $t for ${seconds}s"
    started=$SECONDS
    # -timeout: one input taking this long counts as a hang. -rss_limit_mb: past this the
    # run stops with an out-of-memory report instead of taking the machine's memory.
    if cargo fuzz run "${build[@]}" "$t" "$corpus" "$(seeds "$t")" -- \
        -max_total_time="$seconds" \
        -timeout=10 \
        -rss_limit_mb="$rss_mb" \
        -max_len="$(max_len "$t")" \
        -dict="fuzz/dict/$t.dict" \
        -print_final_stats=1 \
        >"fuzz/logs/$t.log" 2>&1; then
        result[$t]=ok
    else
        result[$t]="FAILED (see fuzz/logs/$t.log and $artifacts/)"
        status=1
    fi
    n="$(sed -n 's/^stat::number_of_executed_units: *//p' "fuzz/logs/$t.log" | tail -1)"
    if [ -z "$n" ]; then
        # A run that stopped on a failing input prints no final stats: take the last
        # progress line's count.
        n="$(grep -o '^#[0-9]*' "fuzz/logs/$t.log" | tail -1 | tr -d '#')"
    fi
    execs[$t]="${n:-0} executions in $((SECONDS - started))s"
done

echo
for t in "${targets[@]}"; do
    printf '%-8s %s: %s\n' "$t" "${execs[$t]}" "${result[$t]}"
done
exit "$status"
