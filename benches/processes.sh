# Sourced by the benchmark scripts that start servers. `bench_work <name>` makes the work
# directory `$work` and the list `pids`: at exit every process in it is stopped and the
# directory removed. `free_port` prints a free loopback port; `wait_port <port>
# [seconds]` waits until something listens there (10 s by default), else logs (with the
# script's `log`) and exits.
bench_work() { # name
    work="$(mktemp -d "${TMPDIR:-/tmp}/sluice-$1-bench.XXXXXX")"
    pids=()
    trap bench_cleanup EXIT
}

bench_cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_port() { # port [seconds]
    for _ in $(seq 1 $((${2:-10} * 20))); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    log "nothing listens on $1"
    exit 1
}
