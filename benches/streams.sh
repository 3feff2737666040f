#!/usr/bin/env bash
# Streaming through the gateway against the same stream under `sluice run`, in one run:
# producers POST to an `http_server` input (wrk), one SSE client consumes everything from
# an `http_server` output; a POST is answered only once its message reached the client,
# so requests/s is messages delivered end to end. Then 10,000 idle SSE connections are
# held open through the gateway and its resident memory is read. The two cases take turns
# over several rounds (the first of each pair alternating) and the figures are medians.
#   benches/streams.sh                         # 3 rounds of 5 s per case
#   BENCH_ROUNDS=5 BENCH_SECONDS=10 BENCH_IDLE=20000 benches/streams.sh
# Needs wrk (installed from Debian's packages when missing) and python3.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. benches/processes.sh
. benches/median.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

seconds="${BENCH_SECONDS:-5}"
rounds="${BENCH_ROUNDS:-3}"
idle="${BENCH_IDLE:-10000}"
log() { echo "streams-bench: $*" >&2; }

if ! command -v wrk >/dev/null; then
    log "installing wrk"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
log "building (dist: the optimised build of published binaries)"
cargo build --profile dist --locked --bin sluice >&2
sluice="$CARGO_TARGET_DIR/dist/sluice"

bench_work streams

# The SSE consumer: counts `data:` events until told to stop (SIGTERM), then prints it.
cat >"$work/consume.py" <<'EOF'
import signal, socket, sys
host, port, path, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
s = socket.create_connection((host, port))
headers = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
if key:
    headers += f"X-Api-Key: {key}\r\n"
s.sendall((headers + "\r\n").encode())
count = 0
def done(*_):
    print(count, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, done)
buf = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        done()
    buf += chunk
    count += buf.count(b"\ndata:")
    buf = buf[buf.rfind(b"\n"):] if b"\n" in buf else buf
EOF

cat >"$work/post.lua" <<'EOF'
wrk.method = "POST"
wrk.body = '{"reading": 21.5, "sensor": "kitchen"}'
wrk.headers["Content-Type"] = "application/json"
EOF

stream_yaml='
      input:
        http_server: {path: /publish, allowed_verbs: [POST]}
      output:
        http_server: {stream_path: /events}'

# Case 1: sluice run.
run_port="$(free_port)"
cat >"$work/run.yaml" <<EOF
http: {address: 127.0.0.1:$run_port}
logger: {level: warn}
input:
  http_server: {path: /publish, allowed_verbs: [POST]}
output:
  http_server: {stream_path: /events}
EOF
"$sluice" run "$work/run.yaml" &
pids+=($!)
wait_port "$run_port"

# Case 2: the gateway, the same stream in a streaming API with key authentication.
gw_port="$(free_port)"
control_port="$(free_port)"
mkdir -p "$work/apis"
cat >"$work/apis/live.yaml" <<EOF
openapi: 3.0.3
info: {title: live, version: "1"}
paths: {}
components:
  securitySchemes:
    key: {type: apiKey, in: header, name: X-Api-Key}
security:
  - key: []
x-sluice-api-gateway:
  info: {id: live, name: live}
  server:
    listenPath: {value: /live, strip: true}
    authentication: {enabled: true}
x-sluice-streaming:
  streams:
    main:$stream_yaml
EOF
cat >"$work/gateway.yaml" <<EOF
listen: {address: 127.0.0.1, port: $gw_port}
control: {port: $control_port}
apps: {path: $work/apis}
store: {url: "sqlite://$work/sluice.db"}
streaming: {enabled: true}
secret: bench-secret-$RANDOM$RANDOM
access_log: false
logger: {level: warn}
EOF
"$sluice" gateway --config "$work/gateway.yaml" &
gw_pid=$!
pids+=("$gw_pid")
wait_port "$gw_port"
secret="$(sed -n 's/^secret: //p' "$work/gateway.yaml")"
key="$(curl -sf -X POST "http://127.0.0.1:$control_port/sluice/keys" \
    -H "X-Sluice-Authorization: $secret" -d '{"access_rights": {"live": {}}}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')"

run_case() { # name port events-path publish-path key
    local consumer out rps delivered non2xx
    python3 "$work/consume.py" 127.0.0.1 "$2" "$3" "$5" >"$work/$1.count" &
    consumer=$!
    sleep 0.5
    log "round $round, wrk ${seconds}s: $1"
    out="$(wrk -t2 -c16 -d"${seconds}s" -s "$work/post.lua" ${5:+-H "X-Api-Key: $5"} "http://127.0.0.1:$2$4")"
    sleep 0.5
    kill -TERM "$consumer"
    wait "$consumer" || true
    rps="$(awk '/^Requests\/sec/ {print $2}' <<<"$out")"
    non2xx="$(awk '/Non-2xx or 3xx responses/ {print $NF}' <<<"$out")"
    delivered="$(cat "$work/$1.count")"
    [ -z "$non2xx" ] || { log "$1: $non2xx answers were not 2xx"; exit 1; }
    printf '%s %s %s %s\n' "$round" "$1" "$rps" "$delivered"
}
results="$(
    for round in $(seq 1 "$rounds"); do
        if [ $((round % 2)) = 1 ]; then
            run_case run "$run_port" /events /publish ""
            run_case gateway "$gw_port" /live/events /live/publish "$key"
        else
            run_case gateway "$gw_port" /live/events /live/publish "$key"
            run_case run "$run_port" /events /publish ""
        fi
    done
)"

# Idle SSE connections through the gateway.
ulimit -n 65536 2>/dev/null || true
cat >"$work/idle.py" <<'EOF'
import socket, sys, time
host, port, path, key, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
conns, ok = [], 0
req = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nX-Api-Key: {key}\r\nAccept: text/event-stream\r\n\r\n".encode()
for i in range(n):
    s = socket.create_connection((host, port))
    s.sendall(req)
    conns.append(s)
for s in conns:
    s.settimeout(10)
    if s.recv(4096).startswith(b"HTTP/1.1 200"):
        ok += 1
print(ok, flush=True)
sys.stdin.read()
EOF
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$gw_pid/status"; }
before="$(rss_kib)"
log "opening $idle idle SSE connections through the gateway"
coproc IDLE { python3 "$work/idle.py" 127.0.0.1 "$gw_port" /live/events "$key" "$idle"; }
read -r opened <&"${IDLE[0]}"
sleep 1
after="$(rss_kib)"
exec {IDLE[1]}>&-
wait "$IDLE_PID" 2>/dev/null || true

echo
echo "cores: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg), wrk: 2 threads, 16 connections, $rounds rounds of ${seconds}s per case (medians)"
awk "$median_awk"'
    { rps[$2] = rps[$2] " " $3; got[$2] = got[$2] " " $4; by[$1, $2] = $3; last = $1 }
    END {
        printf "%-10s %14s %12s\n", "case", "messages/s", "delivered"
        printf "%-10s %14.0f %12d\n", "run", median(rps["run"]), median(got["run"])
        printf "%-10s %14.0f %12d\n", "gateway", median(rps["gateway"]), median(got["gateway"])
        for (r = 1; r <= last; r++) ratios = ratios sprintf(" %.2f", by[r, "gateway"] / by[r, "run"])
        printf "\ngateway (key auth) / sluice run: %.2fx (goal 0.9x; rounds:%s)\n", median(ratios), ratios
    }' <<<"$results"
awk -v n="$opened" -v a="$after" -v b="$before" 'BEGIN {
    printf "idle SSE connections: %d open, gateway resident memory %.0f MiB (%.0f MiB before; goal under 200 MiB)\n", n, a / 1024, b / 1024
}'
