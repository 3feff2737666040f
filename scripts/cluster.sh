#!/usr/bin/env bash
# Starts a Sluice cluster on loopback for trying and testing: one dashboard and three
# `sluice gateway` nodes sharing one PostgreSQL database (keys, API definitions, webhooks)
# and one Redis (rate limits and quotas), with the brokers of scripts/brokers.sh, then
# prints where everything is. docs/cluster.md describes the same topology for production.
#
#   scripts/cluster.sh          # start (or say what already runs)
#   scripts/cluster.sh status   # what runs, where
#   scripts/cluster.sh stop     # stop the dashboard and the nodes (the brokers stay)
#
# Settings (environment):
#   SLUICE_BIN              the sluice binary (default: built with cargo, release profile)
#   SLUICE_CLUSTER_DIR      configs, logs and pids (default $HOME/.cache/sluice-cluster)
#   SLUICE_CLUSTER_NODES    how many gateways (default 3)
#   SLUICE_CLUSTER_DB_URL   the store (default postgres://postgres@127.0.0.1:5432/sluice_cluster,
#                           created when missing)
#   SLUICE_CLUSTER_REDIS    the Redis URL (default redis://127.0.0.1:6379)
# Ports: the dashboard on 3000; node i (from 0) serves APIs on 8080+10*i and its control
# endpoints (/ready, /metrics, /sluice/) on 8081+10*i.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
dir="${SLUICE_CLUSTER_DIR:-$HOME/.cache/sluice-cluster}"
nodes="${SLUICE_CLUSTER_NODES:-3}"
db_url="${SLUICE_CLUSTER_DB_URL:-postgres://postgres@127.0.0.1:5432/sluice_cluster}"
redis_url="${SLUICE_CLUSTER_REDIS:-redis://127.0.0.1:6379}"
dashboard_port=3000

log() { echo "cluster: $*" >&2; }

listening() { # port
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

running() { # name
    local pid_file="$dir/$1.pid"
    [ -f "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null
}

gateway_port() { echo $((8080 + 10 * $1)); }
control_port() { echo $((8081 + 10 * $1)); }

status() {
    local name
    if running dashboard; then
        echo "dashboard   http://127.0.0.1:$dashboard_port/   (console /console/, API /api, admin key in $dir/admin.key)"
    else
        echo "dashboard   not running"
    fi
    for ((i = 0; i < nodes; i++)); do
        name="gateway-$i"
        if running "$name"; then
            echo "$name   APIs http://127.0.0.1:$(gateway_port "$i")/   control http://127.0.0.1:$(control_port "$i")/ (secret in $dir/gateway.secret)"
        else
            echo "$name   not running"
        fi
    done
    echo "store       $db_url"
    echo "redis       $redis_url"
    if [ -f "$here/target/brokers/kafka.addr" ]; then
        echo "kafka       $(cat "$here/target/brokers/kafka.addr")"
    fi
    echo "brokers     nats://127.0.0.1:4222 (JetStream)  mqtt://127.0.0.1:1883  amqp://127.0.0.1:5672"
    echo "logs        $dir/*.log"
}

stop() {
    local pid_file
    for pid_file in "$dir"/*.pid; do
        [ -e "$pid_file" ] || continue
        kill "$(cat "$pid_file")" 2>/dev/null || true
        rm -f "$pid_file"
    done
    log "stopped"
}

# A secret kept in the cluster's directory, made once.
secret() { # file
    if [ ! -s "$dir/$1" ]; then
        head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/$1"
    fi
    cat "$dir/$1"
}

ensure_postgres() {
    if ! listening 5432; then
        if ! command -v pg_ctlcluster >/dev/null 2>&1; then
            log "installing PostgreSQL"
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
        fi
        local version
        version="$(ls /etc/postgresql | sort -n | tail -n 1)"
        pg_ctlcluster "$version" main start
    fi
    local name="${db_url##*/}"
    local admin="${db_url%/*}/postgres"
    if ! psql "$admin" -tAc "SELECT 1 FROM pg_database WHERE datname = '$name'" | grep -q 1; then
        psql "$admin" -qc "CREATE DATABASE $name"
        log "created database $name"
    fi
}

start_one() { # name port command...
    local name="$1" port="$2"
    shift 2
    if running "$name"; then
        return 0
    fi
    if listening "$port"; then
        log "port $port is taken by another process: $name not started"
        return 1
    fi
    nohup "$@" >"$dir/$name.log" 2>&1 &
    echo $! >"$dir/$name.pid"
    local deadline=$((SECONDS + 30))
    until listening "$port"; do
        if ! running "$name" || ((SECONDS > deadline)); then
            log "$name did not start; its log:"
            tail -n 20 "$dir/$name.log" >&2
            return 1
        fi
        sleep 0.2
    done
}

start() {
    mkdir -p "$dir"
    "$here/scripts/brokers.sh"
    ensure_postgres
    local bin="${SLUICE_BIN:-}"
    if [ -z "$bin" ]; then
        export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"
        (cd "$here" && cargo build --release --locked --bin sluice)
        bin="$CARGO_TARGET_DIR/release/sluice"
    fi
    local db_secret gw_secret admin_key
    db_secret="$(secret dashboard.secret)"
    gw_secret="$(secret gateway.secret)"
    admin_key="$(secret admin.key)"

    cat >"$dir/dashboard.yaml" <<EOF
listen:
  address: 127.0.0.1
  port: $dashboard_port
store:
  url: $db_url
streaming:
  enabled: true
secret: $db_secret
admin:
  key: $admin_key
EOF
    start_one dashboard "$dashboard_port" "$bin" dashboard --config "$dir/dashboard.yaml"

    for ((i = 0; i < nodes; i++)); do
        cat >"$dir/gateway-$i.yaml" <<EOF
listen:
  address: 127.0.0.1
  port: $(gateway_port "$i")
control:
  address: 127.0.0.1
  port: $(control_port "$i")
store:
  url: $db_url
redis:
  url: $redis_url
streaming:
  enabled: true
secret: $gw_secret
store_secret: $db_secret
EOF
        start_one "gateway-$i" "$(gateway_port "$i")" "$bin" gateway --config "$dir/gateway-$i.yaml"
    done
    status
}

case "${1:-start}" in
start) start ;;
status) status ;;
stop) stop ;;
*)
    echo "usage: $0 [start|status|stop]" >&2
    exit 2
    ;;
esac
