#!/usr/bin/env bash
# Portal webhook throughput: a stream publishes N events through the `portal_webhook`
# output to a product with 10 subscribers (nginx on loopback, one port each); the
# dashboard checks each event's signature, queues 10 signed deliveries in its store
# (SQLite) and its worker sends them. Measures events/s from the stream's start until
# every delivery is on record as delivered, and, as the baseline of the same run, the
# same N events sent by an `http_client` output straight to one receiver (no portal, no
# queue, no signatures). Prints both and their ratio.
#   benches/webhooks.sh                   # 5000 events
#   BENCH_EVENTS=20000 benches/webhooks.sh
# Installs nginx from Debian's packages when missing.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. benches/processes.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

events="${BENCH_EVENTS:-5000}"
subscribers=10
log() { echo "webhooks-bench: $*" >&2; }

if [ ! -x /usr/sbin/nginx ]; then
    log "installing nginx-light"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
fi

log "building (dist: the optimised build of published binaries)"
cargo build --profile dist --locked --bin sluice >&2
sluice="$CARGO_TARGET_DIR/dist/sluice"

bench_work webhooks
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { print a - b }'; }

# The receivers: one nginx, a port per subscriber, each taking any POST with a 204.
ports=()
servers=""
for _ in $(seq 1 "$subscribers"); do
    p="$(free_port)"
    ports+=("$p")
    servers+="    server { listen 127.0.0.1:$p; location / { return 204; } }"$'\n'
done
mkdir -p "$work/nginx"
cat >"$work/nginx/nginx.conf" <<EOF
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    keepalive_requests 1000000;
$servers}
EOF
/usr/sbin/nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" &
pids+=($!)
for p in "${ports[@]}"; do wait_port "$p"; done

# The dashboard, on a SQLite store of its own, with its delivery worker.
key="bench-admin-key-0123456789"
db_port="$(free_port)"
SLUICE_DB_LISTEN_PORT="$db_port" SLUICE_DB_STORE_URL="sqlite://$work/store.db" \
    SLUICE_DB_ADMIN_KEY="$key" SLUICE_DB_SECRET="bench-sealing-secret-0123456789" \
    SLUICE_DB_LOGGER_LEVEL=warn "$sluice" dashboard >"$work/dashboard.log" 2>&1 &
pids+=($!)
wait_port "$db_port"
api="http://127.0.0.1:$db_port/api"
call() { # method, path, body
    curl -sS -f -X "$1" "$api$2" -H "Authorization: Bearer $key" \
        -H 'Content-Type: application/json' -d "$3"
}

product="$(call POST /portal/products \
    '{"name": "bench", "webhooks": {"enabled": true, "events": ["bench.event"]}}')"
product_id="$(echo "$product" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ID"])')"
publish_secret="$(echo "$product" | python3 -c 'import json,sys; print(json.load(sys.stdin)["publish_secret"])')"
for i in $(seq 0 $((subscribers - 1))); do
    call POST /portal/apps "{\"name\": \"app$i\", \"developer\": \"dev$i@example.com\",
        \"product_id\": \"$product_id\", \"webhooks\": [{\"url\": \"http://127.0.0.1:${ports[$i]}/hook\",
        \"secret\": \"subscriber-secret-$i-0123456789\", \"events\": [\"bench.event\"]}]}" >/dev/null
done

stream() { # output yaml
    cat <<EOF
input:
  generate:
    mapping: |
      root.order = count("bench")
      root.total = 9.5
    count: $events
    interval: 0s
    batch_size: 64
output:
$1
logger:
  level: warn
EOF
}

# The baseline: the same events straight to one receiver.
stream "  http_client:
    url: http://127.0.0.1:${ports[0]}/direct
    max_in_flight: 64" >"$work/direct.yaml"
log "baseline: $events events by http_client to one receiver"
start="$(now)"
"$sluice" run "$work/direct.yaml" >/dev/null
direct_seconds="$(since "$start")"

stream "  portal_webhook:
    event_type: bench.event
    portal_url: $api/portal/products/$product_id/events
    secret: $publish_secret
    max_in_flight: 64" >"$work/portal.yaml"
log "portal: $events events to $subscribers subscribers"
start="$(now)"
"$sluice" run "$work/portal.yaml" >/dev/null
published_seconds="$(since "$start")"
want=$((events * subscribers))
# One poller process (starting Python per poll would take a core's share itself).
if ! python3 - "$work/store.db" "$want" <<'PY'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=10)
want, deadline = int(sys.argv[2]), time.time() + 600
while time.time() < deadline:
    done = db.execute("SELECT COUNT(*) FROM deliveries WHERE status = 'delivered'").fetchone()[0]
    if done >= want:
        sys.exit(0)
    time.sleep(0.02)
print(f"only {done} of {want} deliveries after 600 s", file=sys.stderr)
sys.exit(1)
PY
then
    exit 1
fi
portal_seconds="$(since "$start")"

awk -v n="$events" -v s="$subscribers" -v d="$direct_seconds" -v p="$published_seconds" \
    -v t="$portal_seconds" 'BEGIN {
    printf "baseline  http_client, 1 receiver:     %8.0f events/s\n", n / d
    printf "portal    published (stored, acked):   %8.0f events/s\n", n / p
    printf "portal    delivered to %d subscribers: %8.0f events/s (%.0f signed deliveries/s)\n", s, n / t, n * s / t
    printf "ratio     portal delivered / baseline: %8.2fx\n", (n / t) / (n / d)
}'
