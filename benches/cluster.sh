#!/usr/bin/env bash
# Scale-out: the same broadcast workload through 1, 2 and 3 `sluice gateway` processes on
# this machine, in one run. A JetStream stream feeds a streaming API whose `http_server`
# output broadcasts to SSE clients with the broker's positions as event ids (every node
# reads the stream in a group of its own); BENCH_CLIENTS clients are spread evenly over
# the nodes, BENCH_MESSAGES messages are published, and the time until every client has
# every message gives delivered messages/s. Prints each figure, the per-node ratio
# against one node, and the resume latency: a client reconnecting to another node with
# `Last-Event-ID` until its first resumed event (median of BENCH_RESUMES).
#   benches/cluster.sh                                  # 300 clients, 20000 messages
#   BENCH_CLIENTS=600 BENCH_MESSAGES=50000 benches/cluster.sh
#   BENCH_PROFILE=release benches/cluster.sh            # the build of `cargo run --release`
#   SLUICE_BIN=path/to/sluice benches/cluster.sh        # a binary built already
# Needs NATS with JetStream on 4222 (scripts/brokers.sh starts it) and python3. On a
# machine of few cores the nodes, the clients and the broker share them: the ratio says
# what more processes give here, not on separate hosts.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
. benches/processes.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/sluice-target}"

clients="${BENCH_CLIENTS:-300}"
messages="${BENCH_MESSAGES:-20000}"
resumes="${BENCH_RESUMES:-20}"
log() { echo "cluster-bench: $*" >&2; }

scripts/brokers.sh >&2
sluice="${SLUICE_BIN:-}"
if [ -z "$sluice" ]; then
    profile="${BENCH_PROFILE:-dist}"
    log "building ($profile)"
    cargo build --profile "$profile" --locked --bin sluice >&2
    sluice="$CARGO_TARGET_DIR/$profile/sluice"
fi

bench_work cluster

# JetStream's API is request and reply over plain NATS: enough for making a stream.
cat >"$work/jetstream.py" <<'EOF'
import json, socket, sys
verb, name = sys.argv[1], sys.argv[2]
s = socket.create_connection(("127.0.0.1", 4222))
f = s.makefile("rb")
f.readline()  # INFO
body = json.dumps({"name": name, "subjects": [name.lower() + ".>"], "storage": "memory"}) if verb == "CREATE" else ""
s.sendall(b'CONNECT {"verbose":false}\r\nSUB _INBOX.bench 1\r\n')
s.sendall(f"PUB $JS.API.STREAM.{verb}.{name} _INBOX.bench {len(body)}\r\n{body}\r\n".encode())
while True:
    line = f.readline()
    if line.startswith(b"MSG"):
        reply = f.read(int(line.split()[-1]) + 2)
        print(reply.decode().strip())
        break
    if line.startswith(b"PING"):
        s.sendall(b"PONG\r\n")
EOF

# The clients: one process holds them all. Waits until every one is connected (says
# "ready"), then until every one has `messages` events; prints the seconds from the
# first event to the last.
cat >"$work/clients.py" <<'EOF'
import selectors, socket, sys, time
ports, n, messages = [int(p) for p in sys.argv[1].split(",")], int(sys.argv[2]), int(sys.argv[3])
sel = selectors.DefaultSelector()
counts, tails = {}, {}
for i in range(n):
    port = ports[i % len(ports)]
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /feed/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, i)
    counts[i], tails[i] = -1, b""
pending, first, deadline = n, None, time.time() + 600
while pending and time.time() < deadline:
    for key, _ in sel.select(timeout=1):
        i = key.data
        chunk = key.fileobj.recv(1 << 20)
        if not chunk:
            sys.exit(f"client {i} was closed")
        data = tails[i] + chunk
        if counts[i] < 0:
            if b"\r\n\r\n" not in data:
                tails[i] = data
                continue
            data = b"\n" + data.split(b"\r\n\r\n", 1)[1]
            counts[i] = 0
            if all(c >= 0 for c in counts.values()):
                print("ready", flush=True)
        # The last five bytes are kept: a match split over two reads is found once.
        got = data.count(b"\ndata:")
        if got and first is None:
            first = time.time()
        before = counts[i]
        counts[i] += got
        tails[i] = data[-5:]
        if before < messages <= counts[i]:
            pending -= 1
print(f"{time.time() - first:.3f}" if not pending else "timeout", flush=True)
EOF

# Resume latency: reconnect to `port` after event `last`, until the first event.
cat >"$work/resume.py" <<'EOF'
import socket, statistics, sys, time
port, last, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
took = []
for _ in range(rounds):
    start = time.time()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /feed/events HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nLast-Event-ID: {last}\r\n\r\n".encode())
    data = b""
    while b"\ndata:" not in data:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit("closed before the first resumed event")
        data += chunk
    took.append(time.time() - start)
    s.close()
print(f"{statistics.median(took) * 1000:.1f}")
EOF

# One round: `nodes` gateways on one apps directory (every node serves the API). Sets
# `rate` (delivered messages/s) and `resume` (milliseconds, or - with one node).
run() { # nodes
    local nodes="$1" name="BENCH$RANDOM$RANDOM"
    python3 "$work/jetstream.py" CREATE "$name" >/dev/null
    mkdir -p "$work/apis-$name"
    cat >"$work/apis-$name/feed.yaml" <<EOF
openapi: 3.0.3
info: {title: feed, version: "1"}
paths: {}
x-sluice-api-gateway:
  info: {id: feed, name: feed}
  server:
    listenPath: {value: /feed, strip: true}
x-sluice-streaming:
  streams:
    main:
      input:
        nats_jetstream: {urls: ['nats://127.0.0.1:4222'], stream: $name, durable: feed}
      output:
        http_server:
          stream_path: /events
          delivery: broadcast
          id_metadata: nats_sequence_stream
          replay_buffer: {size: $messages, max_age: 10m}
EOF
    local ports=() round_pids=() i
    for ((i = 0; i < nodes; i++)); do
        local port control
        port="$(free_port)"
        control="$(free_port)"
        cat >"$work/gw-$name-$i.yaml" <<EOF
listen: {address: 127.0.0.1, port: $port}
control: {port: $control}
apps: {path: $work/apis-$name}
store: {url: "sqlite://$work/$name-$i.db"}
streaming: {enabled: true}
access_log: false
logger: {level: warn}
EOF
        "$sluice" gateway --config "$work/gw-$name-$i.yaml" >"$work/gw-$name-$i.log" 2>&1 &
        round_pids+=($!)
        pids+=($!)
        ports+=("$port")
    done
    for port in "${ports[@]}"; do wait_port "$port" 20; done
    local list
    list="$(IFS=,; echo "${ports[*]}")"
    coproc CLIENTS { python3 "$work/clients.py" "$list" "$clients" "$messages"; }
    local line
    read -r line <&"${CLIENTS[0]}"
    [ "$line" = ready ] || { log "clients: $line"; exit 1; }
    # The producer: `sluice run` publishing every message to the stream's subject.
    cat >"$work/produce-$name.yaml" <<EOF
logger: {level: warn}
input:
  generate: {mapping: 'root = {"n": count("n"), "at": now()}', count: $messages, interval: 0s}
output:
  nats_jetstream: {urls: ['nats://127.0.0.1:4222'], subject: $(echo "$name" | tr 'A-Z' 'a-z').feed}
EOF
    "$sluice" run "$work/produce-$name.yaml" >&2
    read -r line <&"${CLIENTS[0]}"
    [ "$line" != timeout ] || { log "not every client got every message"; exit 1; }
    rate="$(python3 -c "print(round($messages * $clients / $line))")"
    resume="-"
    if ((nodes > 1)); then
        resume="$(python3 "$work/resume.py" "${ports[1]}" "$((messages / 2))" "$resumes")"
    fi
    for pid in "${round_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait "${round_pids[@]}" 2>/dev/null || true
    python3 "$work/jetstream.py" DELETE "$name" >/dev/null
}

printf '%-8s %-10s %-16s %-10s %s\n' nodes clients "delivered msg/s" "vs 1 node" "resume (ms, median)"
base=""
for nodes in 1 2 3; do
    run "$nodes"
    base="${base:-$rate}"
    ratio="$(python3 -c "print(f'{$rate / $base:.2f}')")"
    printf '%-8s %-10s %-16s %-10s %s\n' "$nodes" "$clients" "$rate" "${ratio}x" "$resume"
done
