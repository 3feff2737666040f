#!/usr/bin/env bash
# Starts the brokers and the database the integration tests talk to, on loopback, where
# they are not already listening: Mosquitto 1883, NATS with JetStream 4222, RabbitMQ 5672
# (AMQP 0.9.1 and, with its plugin enabled here, AMQP 1.0), Redis 6379, PostgreSQL 5432
# (trust authentication from 127.0.0.1, a database `test`), and a tansu Kafka-API broker
# on a free port. Installs what is missing (Debian packages
# with apt-get, tansu with cargo into a cache directory), including the broker binaries
# that the TLS tests run privately and HAProxy, which the rolling-restart test puts in
# front of the gateways (a test whose binary is missing fails). Idempotent: run it
# before `cargo test` as often as you like.
#
# SLUICE_SKIP_KAFKA=1 leaves tansu out altogether (neither installed nor started): the
# Kafka tests then fail.
#
# The tansu address is written to $SLUICE_KAFKA_ADDR_FILE (default
# target/brokers/kafka.addr); tests read that file, or SLUICE_KAFKA_ADDR if set.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
state_dir="${SLUICE_BROKERS_DIR:-$here/target/brokers}"
tools_root="${SLUICE_TOOLS_ROOT:-$HOME/.cache/sluice-tools}"
kafka_addr_file="${SLUICE_KAFKA_ADDR_FILE:-$state_dir/kafka.addr}"
mkdir -p "$state_dir"

log() { echo "brokers: $*" >&2; }

listening() { # port
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_port() { # port name seconds
    local deadline=$((SECONDS + $3))
    until listening "$1"; do
        if ((SECONDS > deadline)); then
            log "$2 did not start listening on $1"
            return 1
        fi
        sleep 0.2
    done
}

apt_updated=""
need_pkg() { # binary package
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] && return 0
    apt_install "$2"
}

apt_install() { # package
    if [ -z "$apt_updated" ]; then
        apt-get update -qq
        apt_updated=1
    fi
    log "installing $1"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
}

start_redis() {
    listening 6379 && return 0
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no >/dev/null
    wait_port 6379 redis 20
}

start_mosquitto() {
    listening 1883 && return 0
    mkdir -p /run/mosquitto /var/lib/mosquitto /var/log/mosquitto
    chown mosquitto: /run/mosquitto /var/lib/mosquitto /var/log/mosquitto 2>/dev/null || true
    mosquitto -d -c /etc/mosquitto/mosquitto.conf
    wait_port 1883 mosquitto 20
}

# A NATS server greets each client with an INFO line that says whether JetStream is on.
nats_has_jetstream() {
    local info
    info="$(exec 3<>/dev/tcp/127.0.0.1/4222 && timeout 5 head -n 1 <&3)" || return 1
    [[ "$info" == *'"jetstream":true'* ]]
}

# The pid file, not the executable, says whether this server runs: matched by executable,
# any nats-server (a private one a TLS test starts, say) would make --oknodo start
# nothing. tests/nats.rs restarts it with the same command.
start_nats() {
    if ! listening 4222; then
        mkdir -p /var/lib/nats-server
        start-stop-daemon --start --oknodo --background \
            --pidfile /var/lib/nats-server/nats-server.pid --make-pidfile \
            --exec /usr/sbin/nats-server -- \
            -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server
        wait_port 4222 nats 20
    fi
    # Another server can hold the port (Debian's nats-server service runs one without
    # JetStream); the JetStream tests would fail on their first stream.
    if ! nats_has_jetstream; then
        log "the NATS server on 4222 runs without JetStream: stop it and run this again"
        return 1
    fi
}

postgres_bin() { # the newest installed server binary
    ls /usr/lib/postgresql/*/bin/postgres 2>/dev/null | sort -V | tail -n 1 | grep .
}

# The tests connect as `postgres` to 127.0.0.1:5432/test without a password and make a
# database of their own per test. A server that already listens is used as it is.
start_postgres() {
    if ! listening 5432; then
        local version
        version="$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)"
        if [ -z "$version" ]; then
            version="$(basename "$(dirname "$(dirname "$(postgres_bin)")")")"
            [ -n "$version" ] || { log "no PostgreSQL server is installed"; return 1; }
            pg_createcluster "$version" main >/dev/null
        fi
        local hba="/etc/postgresql/$version/main/pg_hba.conf"
        if ! grep -Eq '^host[[:space:]]+all[[:space:]]+all[[:space:]]+127\.0\.0\.1/32[[:space:]]+trust' "$hba"; then
            # Only loopback is trusted, and only for this machine's tests.
            sed -i '/^host/d' "$hba"
            printf 'host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n' >>"$hba"
        fi
        pg_ctlcluster --skip-systemctl-redirect "$version" main start
        wait_port 5432 postgresql 60
    fi
    if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" postgres | grep -q 1; then
        psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE test" postgres
    fi
}

start_rabbitmq() {
    if ! listening 5672; then
        rabbitmq-server -detached
        # RabbitMQ takes a while to boot its Erlang node.
        wait_port 5672 rabbitmq 120
    fi
    enable_amqp1
}

# The AMQP 1.0 plugin serves the amqp_1 tests on the same port. It is enabled only when it
# is not yet; the broker keeps it enabled across restarts.
enable_amqp1() {
    if rabbitmq-plugins list -q -e -m 2>/dev/null | grep -qx rabbitmq_amqp1_0; then
        return 0
    fi
    log "enabling the RabbitMQ AMQP 1.0 plugin"
    rabbitmq-plugins enable -q rabbitmq_amqp1_0 >/dev/null
}

tansu_bin() {
    if command -v tansu >/dev/null 2>&1; then
        command -v tansu
    elif [ -x "$tools_root/bin/tansu" ]; then
        echo "$tools_root/bin/tansu"
    else
        return 1
    fi
}

# Below the kernel's ephemeral range: a port from it can be taken by an outgoing
# connection between the check and the broker's bind, and the broker then fails to start.
free_port() {
    local p top
    top="$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)"
    [ "$top" -gt 12000 ] || top=12000
    for _ in $(seq 1 50); do
        p=$((10000 + (RANDOM * 32768 + RANDOM) % (top - 10000)))
        listening "$p" || { echo "$p"; return 0; }
    done
    return 1
}

ensure_tansu() {
    tansu_bin >/dev/null && return 0
    log "installing tansu (takes a while the first time)"
    need_pkg cc build-essential
    cargo install --quiet --root "$tools_root" tansu --locked --features dynostore
}

start_tansu() {
    if [ -f "$kafka_addr_file" ] && listening "$(sed 's/.*://' "$kafka_addr_file")"; then
        return 0
    fi
    local bin port pid attempt
    bin="$(tansu_bin)"
    # A broker that cannot bind its port exits: it is tried again on another.
    for attempt in 1 2 3; do
        port="$(free_port)"
        nohup "$bin" broker \
            --storage-engine memory://tansu/ \
            --listener-url "tcp://127.0.0.1:$port" \
            --advertised-listener-url "tcp://127.0.0.1:$port" \
            >"$state_dir/tansu.log" 2>&1 &
        pid=$!
        echo "$pid" >"$state_dir/tansu.pid"
        for _ in $(seq 1 300); do
            if listening "$port"; then
                echo "127.0.0.1:$port" >"$kafka_addr_file"
                return 0
            fi
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$pid" 2>/dev/null || true
        log "tansu did not start on $port (attempt $attempt): $(tail -n 3 "$state_dir/tansu.log")"
    done
    return 1
}

# The broker binaries, for the shared brokers started below and for the private ones the
# TLS and authentication tests start (so even where the shared brokers already listen).
ensure_binaries() {
    need_pkg redis-server redis-server
    need_pkg mosquitto mosquitto
    need_pkg mosquitto_passwd mosquitto
    need_pkg nats-server nats-server
    need_pkg rabbitmq-server rabbitmq-server
    need_pkg psql postgresql-client
    # Not started here: the test runs its own, with a config of its own.
    need_pkg haproxy haproxy
    postgres_bin >/dev/null || apt_install postgresql
    if [ "${SLUICE_SKIP_KAFKA:-}" != 1 ]; then
        ensure_tansu
    fi
}

ensure_binaries
start_redis
start_mosquitto
start_nats
start_postgres
start_rabbitmq
if [ "${SLUICE_SKIP_KAFKA:-}" != 1 ]; then
    start_tansu
fi
log "ready: redis 6379, mosquitto 1883, nats 4222, postgresql 5432, rabbitmq 5672, kafka $(cat "$kafka_addr_file" 2>/dev/null || echo skipped)"
