#!/usr/bin/env bash
# Gateway throughput and latency, all in one run against the same upstream (an nginx
# answering a fixed 64-byte body): wrk straight at the upstream, through another nginx
# as a plain reverse proxy (the reference), through `sluice gateway` with no middleware,
# and through `sluice gateway` with key authentication and a rate limit (set high enough
# never to refuse, so that it is counted, not hit), and the same with every request traced
# (OpenTelemetry, every trace kept unless a sampler is given, exported over OTLP/HTTP to the upstream nginx, which
# answers 200). Prints requests/s, p50 and p99 latency and the ratios: Sluice plain
# against nginx, Sluice with middleware against plain, and traced against untraced.
# The cases take turns over several rounds and each figure is the median over the rounds:
# on a small machine the client, the proxies and the upstream share the cores, and a
# case measured only once, in a fixed place in the order, meets the others' after-effects.
#   benches/gateway.sh                             # 5 rounds of 4 s per case, 64 connections
#   BENCH_ROUNDS=9 BENCH_SECONDS=10 BENCH_CONNECTIONS=128 benches/gateway.sh
#   BENCH_PROFILE=release benches/gateway.sh       # the build of `cargo run --release`
#   BENCH_TRACE_SAMPLER=traceidratio BENCH_TRACE_RATIO=0.1 benches/gateway.sh  # one trace in ten
# Installs wrk and nginx from Debian's packages when missing. Every server logs nothing
# per request, so that logging does not decide the result.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. benches/processes.sh
. benches/median.sh
root="$(pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

seconds="${BENCH_SECONDS:-4}"
rounds="${BENCH_ROUNDS:-5}"
connections="${BENCH_CONNECTIONS:-64}"
threads="${BENCH_WRK_THREADS:-2}"
log() { echo "gateway-bench: $*" >&2; }

need=()
command -v wrk >/dev/null || need+=(wrk)
[ -x /usr/sbin/nginx ] || need+=(nginx-light)
if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# dist: the fully optimised build of published binaries; BENCH_PROFILE=release measures
# the build that `cargo run --release` makes.
profile="${BENCH_PROFILE:-dist}"
log "building ($profile)"
cargo build --profile "$profile" --locked --bin sluice >&2
sluice="$CARGO_TARGET_DIR/$profile/sluice"

bench_work gateway

up_port="$(free_port)"
nginx_port="$(free_port)"
plain_port="$(free_port)"
mw_port="$(free_port)"
body="$(head -c 64 /dev/zero | tr '\0' 'x')"

# Two nginx instances: the upstream and the reference proxy. They are separate processes,
# as Sluice and the upstream are: one instance serving both roles would hand a proxied
# request to the upstream inside one worker, with no process switch to pay for.
nginx_conf() { # dir, server blocks
    mkdir -p "$work/$1"
    cat >"$work/$1/nginx.conf" <<EOF
worker_processes auto;
pid $work/$1/nginx.pid;
error_log $work/$1/error.log warn;
daemon off;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $work/$1/body;
    proxy_temp_path $work/$1/proxy;
    fastcgi_temp_path $work/$1/fastcgi;
    uwsgi_temp_path $work/$1/uwsgi;
    scgi_temp_path $work/$1/scgi;
    keepalive_requests 1000000;
$2
}
EOF
    /usr/sbin/nginx -c "$work/$1/nginx.conf" -p "$work/$1" &
    pids+=($!)
}
nginx_conf upstream "    server {
        listen 127.0.0.1:$up_port;
        location / { default_type text/plain; return 200 \"$body\"; }
    }"
nginx_conf proxy "    upstream backend {
        server 127.0.0.1:$up_port;
        keepalive 256;
    }
    server {
        listen 127.0.0.1:$nginx_port;
        location /bench/ {
            proxy_pass http://backend/;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
        }
    }"
wait_port "$up_port"
wait_port "$nginx_port"

# Two gateways: one plain, one with key auth and a rate limit on the API and the key.
api() { # id, auth (yes/no)
    local auth_block="" security="" limit=""
    if [ "$2" = yes ]; then
        auth_block=$'    authentication:\n      enabled: true'
        security=$'components:\n  securitySchemes:\n    key: {type: apiKey, in: header, name: X-Api-Key}\nsecurity:\n  - key: []'
        limit=$'    rateLimit: {rate: 100000000, per: 1s}'
    fi
    cat <<EOF
openapi: 3.0.3
info: {title: $1, version: "1"}
paths: {}
$security
x-sluice-api-gateway:
  info: {id: $1, name: $1}
  upstream:
    url: http://127.0.0.1:$up_port
$limit
  server:
    listenPath: {value: /bench/, strip: true}
$auth_block
EOF
}
start_gateway() { # name port auth control-port
    mkdir -p "$work/$1/apis"
    api "$1" "$3" >"$work/$1/apis/bench.yaml"
    cat >"$work/$1/gateway.yaml" <<EOF
listen: {address: 127.0.0.1, port: $2}
control: {port: $4}
apps: {path: $work/$1/apis}
store: {url: "sqlite://$work/$1/sluice.db"}
secret: bench-secret-$RANDOM$RANDOM
access_log: false
logger: {level: warn}
EOF
    if [ "${5:-}" = traced ]; then
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$up_port" \
            OTEL_TRACES_SAMPLER="${BENCH_TRACE_SAMPLER:-always_on}" \
            OTEL_TRACES_SAMPLER_ARG="${BENCH_TRACE_RATIO:-1}" \
            "$sluice" gateway --config "$work/$1/gateway.yaml" &
    else
        "$sluice" gateway --config "$work/$1/gateway.yaml" &
    fi
    pids+=($!)
    wait_port "$2"
}
mw_control_port="$(free_port)"
traced_port="$(free_port)"
traced_control_port="$(free_port)"
start_gateway plain "$plain_port" no "$(free_port)"
start_gateway mw "$mw_port" yes "$mw_control_port"
start_gateway traced "$traced_port" yes "$traced_control_port" traced
make_key() { # name control-port
    local secret
    secret="$(sed -n 's/^secret: //p' "$work/$1/gateway.yaml")"
    curl -sf -X POST "http://127.0.0.1:$2/sluice/keys" \
        -H "X-Sluice-Authorization: $secret" \
        -d '{"access_rights": {"'"$1"'": {}}, "rate_limit": {"rate": 100000000, "per": "1s"}}' |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])'
}
key="$(make_key mw "$mw_control_port")"
traced_key="$(make_key traced "$traced_control_port")"
[ -n "$key" ] && [ -n "$traced_key" ] || { log "could not make a key"; exit 1; }

# Every case must answer 200 with the body before it is timed.
check() { # url [header]
    local got
    got="$(curl -sf ${2:+-H "$2"} "$1")" || { log "$1 failed"; exit 1; }
    [ "$got" = "$body" ] || { log "$1 answered something else: $got"; exit 1; }
}
check "http://127.0.0.1:$up_port/x"
check "http://127.0.0.1:$nginx_port/bench/x"
check "http://127.0.0.1:$plain_port/bench/x"
check "http://127.0.0.1:$mw_port/bench/x" "X-Api-Key: $key"
check "http://127.0.0.1:$traced_port/bench/x" "X-Api-Key: $traced_key"

# wrk's latency table in milliseconds: 50% and 99%.
to_ms() {
    awk '{ v=$1; if (v ~ /us$/) { sub(/us$/,"",v); v/=1000 } else if (v ~ /ms$/) { sub(/ms$/,"",v) } else if (v ~ /s$/) { sub(/s$/,"",v); v*=1000 } printf "%.2f", v }'
}
run() { # name url [header]
    local out rps p50 p99 errors
    log "round $round, wrk ${seconds}s, $connections connections: $1"
    out="$(wrk -t"$threads" -c"$connections" -d"${seconds}s" --latency ${3:+-H "$3"} "$2")"
    rps="$(awk '/^Requests\/sec/ {print $2}' <<<"$out")"
    p50="$(awk '$1=="50%" {print $2}' <<<"$out" | to_ms)"
    p99="$(awk '$1=="99%" {print $2}' <<<"$out" | to_ms)"
    errors="$(awk '/Non-2xx or 3xx responses/ {print $NF}' <<<"$out")"
    if [ -n "$errors" ]; then
        log "$1: $errors answers were not 2xx"
        exit 1
    fi
    printf '%s %s %s %s %s\n' "$round" "$1" "$rps" "$p50" "$p99"
}

# Warm each path a little (connections, pools, caches), then measure.
for url in "http://127.0.0.1:$nginx_port/bench/x" "http://127.0.0.1:$plain_port/bench/x"; do
    wrk -t1 -c8 -d1s "$url" >/dev/null
done
wrk -t1 -c8 -d1s -H "X-Api-Key: $key" "http://127.0.0.1:$mw_port/bench/x" >/dev/null
wrk -t1 -c8 -d1s -H "X-Api-Key: $traced_key" "http://127.0.0.1:$traced_port/bench/x" >/dev/null

# Each round runs every case once, starting one case further along the list each time.
cases=(direct nginx sluice sluice+auth+limit traced+auth+limit)
url_of() {
    case "$1" in
    direct) echo "http://127.0.0.1:$up_port/x" ;;
    nginx) echo "http://127.0.0.1:$nginx_port/bench/x" ;;
    sluice) echo "http://127.0.0.1:$plain_port/bench/x" ;;
    sluice+auth+limit) echo "http://127.0.0.1:$mw_port/bench/x" ;;
    traced+auth+limit) echo "http://127.0.0.1:$traced_port/bench/x" ;;
    esac
}
results="$(
    for round in $(seq 1 "$rounds"); do
        for i in "${!cases[@]}"; do
            name="${cases[$(((i + round - 1) % ${#cases[@]}))]}"
            header=""
            [ "$name" = sluice+auth+limit ] && header="X-Api-Key: $key"
            [ "$name" = traced+auth+limit ] && header="X-Api-Key: $traced_key"
            run "$name" "$(url_of "$name")" "$header"
        done
    done
)"

echo
echo "cores: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg), wrk: $threads threads, $connections connections, $rounds rounds of ${seconds}s per case (medians)"
awk "$median_awk"'
    { rps[$2] = rps[$2] " " $3; p50[$2] = p50[$2] " " $4; p99[$2] = p99[$2] " " $5; by[$1, $2] = $3; last = $1 }
    END {
        printf "%-20s %12s %10s %10s\n", "case", "requests/s", "p50 ms", "p99 ms"
        split("direct nginx sluice sluice+auth+limit traced+auth+limit", order, " ")
        for (i = 1; i <= 5; i++) printf "%-20s %12.0f %10.2f %10.2f\n", order[i], median(rps[order[i]]), median(p50[order[i]]), median(p99[order[i]])
        for (r = 1; r <= last; r++) {
            plain = plain sprintf(" %.2f", by[r, "sluice"] / by[r, "nginx"])
            mw = mw " " by[r, "sluice+auth+limit"] / by[r, "sluice"]
            mwn = mwn " " by[r, "sluice+auth+limit"] / by[r, "nginx"]
            traced = traced " " by[r, "traced+auth+limit"] / by[r, "sluice+auth+limit"]
        }
        printf "\nsluice / nginx:                 %.2fx (goal 1.0x; rounds:%s)\n", median(plain), plain
        printf "sluice+auth+limit / sluice:     %.2fx (goal 0.9x)\n", median(mw)
        printf "sluice+auth+limit / nginx:      %.2fx\n", median(mwn)
        printf "traced / untraced (auth+limit): %.2fx\n", median(traced)
    }' <<<"$results"
