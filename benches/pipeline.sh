#!/usr/bin/env bash
# End-to-end throughput of one mapping over 1 000 000 NDJSON lines of about 142 bytes:
# a hand-written serde_json baseline, `sluice blobl`, and `sluice run` pipelines
# (file -> file, stdin -> stdout, kafka -> kafka, nats -> nats). Prints msgs/s, the ratio
# to `sluice blobl` and to the case's baseline, and the peak memory of each run; every
# run's output is counted and one message of it checked.
#   benches/pipeline.sh                        # everything
#   BENCH_LINES=200000 benches/pipeline.sh     # fewer lines
#   BENCH_ONLY=blobl,file benches/pipeline.sh  # some cases: baseline, blobl, file,
#                                              # stdin, kafka, nats
#   BENCH_THREADS=2 benches/pipeline.sh        # `pipeline.threads` of the sluice runs
# The broker cases start the local brokers first (scripts/brokers.sh) and find tansu as
# the tests do (SLUICE_KAFKA_ADDR, or the file scripts/brokers.sh writes).
set -euo pipefail
# A dot in $EPOCHREALTIME and in awk's numbers, whatever the locale.
export LC_ALL=C
cd "$(dirname "$0")/.."
root="$(pwd)"
# The same build directory as scripts/test.sh: a bench build reuses its dependencies.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

lines="${BENCH_LINES:-1000000}"
only="${BENCH_ONLY:-}"
threads="${BENCH_THREADS:-}"
nats_url="nats://127.0.0.1:4222"

want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
log() { echo "pipeline: $*" >&2; }

if [ ! -x /usr/bin/time ]; then
    log "installing time"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null
fi

if want kafka || want nats; then
    scripts/brokers.sh
fi

log "building (dist: the optimised build of published binaries)"
build_json="$(cargo build --profile dist --locked --bin sluice --bench pipeline_baseline \
    --message-format=json-render-diagnostics)"
executable() { # pattern of the file name
    grep -o "\"executable\":\"[^\"]*/$1\"" <<<"$build_json" | tail -n 1 | cut -d'"' -f4
}
sluice="$(executable sluice)"
base="$(executable 'pipeline_baseline-[0-9a-f]*')"
[ -x "$sluice" ] && [ -x "$base" ] || { log "no sluice or baseline binary built"; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-pipeline.XXXXXX")"
pid=""
topics=()
kafka_addr=""
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    if [ "${#topics[@]}" -gt 0 ]; then
        "$base" kafka-delete "$kafka_addr" "${topics[@]}" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# Other work on the machine slows some cases far more than others: shown with the table.
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
data="$work/data.ndjson"
"$base" gen "$lines" >"$data"
bytes="$(wc -c <"$data")"
log "data set: $lines lines, $((bytes / lines)) bytes a line on average (newline included)"

mapping='root = this
root.b = this.a.uppercase()
root.n = this.x * 2'
printf '%s\n' "$mapping" >"$work/mapping.blobl"

# A `sluice run` config: the input and output (YAML, indented under `input:` and
# `output:`), the mapping in between, logs at warn, and `http` when a port is given.
config() { # file input output [port]
    {
        [ -n "${4:-}" ] && printf 'http:\n  address: 127.0.0.1:%s\n' "$4"
        printf 'logger:\n  level: warn\ninput:\n%s\npipeline:\n' "$2"
        [ -n "$threads" ] && printf '  threads: %s\n' "$threads"
        printf '  processors:\n    - mapping: |\n'
        sed 's/^/        /' <<<"$mapping"
        printf 'output:\n%s\n' "$3"
    } >"$1"
}

now() { echo "$EPOCHREALTIME"; }
# Peak resident memory (KiB) of a running process.
peak_of() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
# A background process under test: stop it (by its id) and wait for it.
stop() {
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
}

# Results, by case: seconds, peak KiB, the case its baseline column compares with.
declare -A secs peak versus
order=()
record() { # case seconds peak_kib baseline_case
    secs[$1]="$2"
    peak[$1]="$3"
    versus[$1]="$4"
    order+=("$1")
    log "$1: $(awk -v n="$lines" -v s="$2" 'BEGIN {printf "%.0f msgs/s", n / s}')"
}
failed=()
fail() { # case message [log file]
    log "$1 FAILED: $2"
    if [ -n "${3:-}" ] && [ -s "$3" ]; then tail -n 20 "$3" >&2; fi
    failed+=("$1")
    order+=("$1")
}

# A run that reads `data` and writes `$work/out`: times it, records its peak memory (GNU
# time) and checks its output. The command gets the data on standard input.
timed() { # case baseline_case command...
    local name="$1" vs="$2" t0 t1
    shift 2
    rm -f "$work/out"
    t0="$(now)"
    if ! /usr/bin/time -f %M -o "$work/rss" "$@" <"$data" >"$work/stdout" 2>"$work/log"; then
        fail "$name" "exit status" "$work/log"
        return
    fi
    t1="$(now)"
    # The stdout cases write their output there; the file case to `$work/out`.
    [ -e "$work/out" ] || mv "$work/stdout" "$work/out"
    if ! sample="$("$base" check "$lines" "$work/out" 2>&1)"; then
        fail "$name" "$sample"
        return
    fi
    record "$name" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" "$(tail -n 1 "$work/rss")" "$vs"
    rm -f "$work/out" "$work/stdout"
}

if want baseline; then
    timed "baseline (serde_json)" "baseline (serde_json)" "$base" map
fi

if want blobl; then
    timed "sluice blobl" "baseline (serde_json)" "$sluice" blobl -f "$work/mapping.blobl"
fi

if want file; then
    config "$work/file.yaml" "  file: {paths: ['$data'], codec: lines}" \
        "  file: {path: '$work/out', codec: lines}"
    timed "run file -> file" "baseline (serde_json)" "$sluice" run "$work/file.yaml"
fi

if want stdin; then
    config "$work/stdin.yaml" "  stdin: {codec: lines}" "  stdout: {codec: lines}"
    timed "run stdin -> stdout" "baseline (serde_json)" "$sluice" run "$work/stdin.yaml"
fi

unique() { echo "bench-$1-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"; }

# A `sluice run` with a kafka output: from its start until its metrics count `lines`
# messages delivered (the end of a run as benches/brokers.rs sees it).
kafka_run() { # case config port out_topic
    local t0 t1 kib
    t0="$(now)"
    "$sluice" run "$2" 2>"$work/log" &
    pid=$!
    if ! "$base" await-metrics "http://127.0.0.1:$3/metrics" "$pid" "$lines" 2>>"$work/log"; then
        stop
        fail "$1" "did not finish" "$work/log"
        return
    fi
    t1="$(now)"
    kib="$(peak_of "$pid")"
    stop
    if ! sample="$("$base" kafka-check "$kafka_addr" "$4" "$lines" 2>&1)"; then
        fail "$1" "$sample"
        return
    fi
    record "$1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" "$kib" "kafka bare loop"
}

if want kafka; then
    kafka_addr="${SLUICE_KAFKA_ADDR:-$(cat "${SLUICE_KAFKA_ADDR_FILE:-${SLUICE_BROKERS_DIR:-$root/target/brokers}/kafka.addr}")}"
    in_topic="$(unique in)"
    bare_out="$(unique bare)"
    sluice_out="$(unique sluice)"
    topics+=("$in_topic" "$bare_out" "$sluice_out")
    log "kafka: loading $lines records into $in_topic"
    "$base" kafka-fill "$kafka_addr" "$in_topic" "$data" >/dev/null
    "$base" kafka-create "$kafka_addr" "$bare_out" "$sluice_out"

    # The bare loop times itself, from its start to its last delivery report.
    sample=""
    if result="$("$base" kafka-loop "$kafka_addr" "$in_topic" "$bare_out" "$lines" 2>"$work/log")" &&
        sample="$("$base" kafka-check "$kafka_addr" "$bare_out" "$lines" 2>&1)"; then
        read -r s kib <<<"$result"
        record "kafka bare loop" "$s" "$kib" "kafka bare loop"
    else
        fail "kafka bare loop" "${sample:-did not finish}" "$work/log"
    fi

    port="$("$base" free-port)"
    config "$work/kafka.yaml" \
        "  kafka:
    addresses: ['$kafka_addr']
    topics: [$in_topic]
    consumer_group: $(unique group)" \
        "  kafka:
    addresses: ['$kafka_addr']
    topic: $sluice_out" "$port"
    kafka_run "run kafka -> kafka" "$work/kafka.yaml" "$port" "$sluice_out"

    "$base" kafka-delete "$kafka_addr" "${topics[@]}" >/dev/null
    topics=()
fi

# A process that reads subject `in` and writes `out`, started as `$pid`: fed and timed by
# `nats-drive`, which checks what comes out.
nats_drive() { # case in out
    local kib result
    if ! result="$("$base" nats-drive "$nats_url" "$2" "$3" "$lines" "$data" 2>>"$work/log")"; then
        stop
        fail "$1" "did not finish" "$work/log"
        return
    fi
    kib="$(peak_of "$pid")"
    stop
    record "$1" "$(head -n 1 <<<"$result")" "$kib" "nats bare loop"
}

if want nats; then
    in_subject="$(unique in)"
    out_subject="$(unique out)"
    "$base" nats-loop "$nats_url" "$in_subject" "$out_subject" 2>"$work/log" &
    pid=$!
    nats_drive "nats bare loop" "$in_subject" "$out_subject"

    config "$work/nats.yaml" \
        "  nats:
    urls: [$nats_url]
    subject: $in_subject" \
        "  nats:
    urls: [$nats_url]
    subject: $out_subject"
    "$sluice" run "$work/nats.yaml" 2>"$work/log" &
    pid=$!
    nats_drive "run nats -> nats" "$in_subject" "$out_subject"
fi

# The table.
echo
printf '%-24s %12s %9s %12s %9s\n' case msgs/s "x blobl" "x baseline" "peak MB"
rate() { awk -v n="$lines" -v s="$1" 'BEGIN {printf "%.0f", n / s}'; }
ratio() { # case reference_case
    if [ -n "${secs[$2]:-}" ]; then
        awk -v a="${secs[$1]}" -v b="${secs[$2]}" 'BEGIN {printf "%.2f", b / a}'
    else
        echo -
    fi
}
for c in "${order[@]}"; do
    if [ -z "${secs[$c]:-}" ]; then
        printf '%-24s %12s\n' "$c" FAILED
        continue
    fi
    printf '%-24s %12s %9s %12s %9s\n' "$c" "$(rate "${secs[$c]}")" "$(ratio "$c" "sluice blobl")" \
        "$(ratio "$c" "${versus[$c]}")" "$(awk -v k="${peak[$c]}" 'BEGIN {printf "%.1f", k / 1024}')"
done
echo "($lines lines of $((bytes / lines)) bytes; x blobl and x baseline: rate / reference rate;"
echo " load average before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg))"

# Goals: every `sluice run` at least 0.8x `sluice blobl` (above 1.0x: the second core at
# work); the broker pipelines at least 0.8x their bare client loop.
goal() { # case reference ratio
    [ -n "${secs[$1]:-}" ] && [ -n "${secs[$2]:-}" ] || return 0
    awk -v a="${secs[$1]}" -v b="${secs[$2]}" -v g="$3" -v c="$1" -v r="$2" \
        'BEGIN {x = b / a; printf "%-24s %.2fx %s: %s the %.1fx goal\n", c, x, r, (x >= g ? "meets" : "BELOW"), g}'
}
echo
for c in "run file -> file" "run stdin -> stdout" "run kafka -> kafka" "run nats -> nats"; do
    goal "$c" "sluice blobl" 0.8
done
goal "run kafka -> kafka" "kafka bare loop" 0.8
goal "run nats -> nats" "nats bare loop" 0.8

if [ "${#failed[@]}" -gt 0 ]; then
    log "failed: ${failed[*]}"
    exit 1
fi
