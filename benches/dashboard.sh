#!/usr/bin/env bash
# Management API throughput: wrk against `sluice dashboard` for GET /api/certs (a page
# of 10 summaries out of 100 certificates) and POST /api/apis/streams (each request a new
# streaming API with its own id and listen path, compiled and stored), once on a SQLite
# file and once on PostgreSQL. Prints requests/s and p50/p99 latency per case, and the
# PostgreSQL/SQLite ratio.
#   benches/dashboard.sh                      # 10 s per case, 16 connections
#   BENCH_SECONDS=30 BENCH_CONNECTIONS=64 benches/dashboard.sh
# PostgreSQL is reached through SLUICE_TEST_POSTGRES_URL (default
# postgres://postgres@127.0.0.1:5432/test); a database is created for the run and dropped.
# Installs wrk from Debian's packages when missing.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

seconds="${BENCH_SECONDS:-10}"
connections="${BENCH_CONNECTIONS:-16}"
threads="${BENCH_WRK_THREADS:-2}"
pg_admin="${SLUICE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
log() { echo "dashboard-bench: $*" >&2; }

if ! command -v wrk >/dev/null; then
    log "installing wrk"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

log "building (dist: the optimised build of published binaries)"
cargo build --profile dist --locked --bin sluice >&2
sluice="$CARGO_TARGET_DIR/dist/sluice"

work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-dashboard-bench.XXXXXX")"
pid=""
pg_db="sluice_bench_$$"
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    wait 2>/dev/null || true
    psql "$pg_admin" -qc "DROP DATABASE IF EXISTS $pg_db WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

key="bench-admin-key-0123456789"

# A request that makes a streaming API with an id and listen path of its own: each wrk
# thread numbers its requests, prefixed with the thread's number.
cat >"$work/streams.lua" <<'LUA'
local n = 0
local threads = 0
function setup(thread)
    threads = threads + 1
    thread:set("tid", threads)
end
function request()
    n = n + 1
    local id = string.format("t%d-%d", tid, n)
    local body = string.format([[{"openapi":"3.0.3","info":{"title":"%s","version":"1"},"paths":{},
"x-sluice-api-gateway":{"info":{"id":"%s","name":"%s"},"upstream":{"url":"http://127.0.0.1:9"},
"server":{"listenPath":{"value":"/%s/","strip":true}}},
"x-sluice-streaming":{"streams":{"s":{"input":{"http_server":{"path":"/in"}},"output":{"http_server":{"path":"/out"}}}}}}]], id, id, id, id)
    return wrk.format("POST", "/api/apis/streams", nil, body)
end
LUA

# Runs wrk and prints "rps p50_ms p99_ms non2xx".
run_wrk() { # url [lua]
    local url="$1" script=()
    [ $# -gt 1 ] && script=(-s "$2")
    local out
    out="$(wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency \
        -H "Authorization: Bearer $key" -H "Content-Type: application/vnd.sluice.streams.oas" \
        "${script[@]}" "$url")"
    local rps p50 p99 bad
    rps="$(awk '/^Requests\/sec/ {print $2}' <<<"$out")"
    p50="$(awk '$1=="50%" {print $2}' <<<"$out")"
    p99="$(awk '$1=="99%" {print $2}' <<<"$out")"
    bad="$(awk '/Non-2xx/ {print $NF}' <<<"$out")"
    echo "$rps $p50 $p99 ${bad:-0}"
}

declare -A results
for backend in sqlite postgres; do
    if [ "$backend" = sqlite ]; then
        store="sqlite://$work/bench.db"
    else
        psql "$pg_admin" -qc "CREATE DATABASE $pg_db" >/dev/null
        store="${pg_admin%/*}/$pg_db"
    fi
    port="$(free_port)"
    SLUICE_DB_LISTEN_PORT="$port" SLUICE_DB_STORE_URL="$store" SLUICE_DB_ADMIN_KEY="$key" \
        SLUICE_DB_STREAMING_ENABLED=true SLUICE_DB_LOGGER_LEVEL=warn \
        "$sluice" dashboard >/dev/null &
    pid=$!
    for _ in $(seq 1 200); do
        curl -fsS "http://127.0.0.1:$port/ping" >/dev/null 2>&1 && break
        sleep 0.05
    done
    log "$backend: loading 100 certificates"
    for i in $(seq 1 100); do
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
            -subj "/CN=host$i.example" -addext "subjectAltName=DNS:host$i.example" \
            -keyout /dev/null -out "$work/c.pem" 2>/dev/null
        curl -fsS -X POST -H "Authorization: $key" -H "Content-Type: application/x-pem-file" \
            --data-binary "@$work/c.pem" \
            "http://127.0.0.1:$port/api/certs" >/dev/null
    done
    log "$backend: GET /api/certs"
    results["$backend certs"]="$(run_wrk "http://127.0.0.1:$port/api/certs?p=1")"
    log "$backend: POST /api/apis/streams"
    results["$backend streams"]="$(run_wrk "http://127.0.0.1:$port/api/apis/streams" "$work/streams.lua")"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
done

printf '%-10s %-26s %10s %9s %9s %7s\n' backend case req/s p50 p99 non2xx
for backend in sqlite postgres; do
    for case in certs streams; do
        read -r rps p50 p99 bad <<<"${results["$backend $case"]}"
        name="GET /api/certs"
        [ "$case" = streams ] && name="POST /api/apis/streams"
        printf '%-10s %-26s %10s %9s %9s %7s\n' "$backend" "$name" "$rps" "$p50" "$p99" "$bad"
    done
done
for case in certs streams; do
    read -r a _ <<<"${results["sqlite $case"]}"
    read -r b _ <<<"${results["postgres $case"]}"
    awk -v a="$a" -v b="$b" -v c="$case" 'BEGIN { printf "postgres/sqlite %-8s %.2f\n", c, b / a }'
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
