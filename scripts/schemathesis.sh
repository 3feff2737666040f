#!/usr/bin/env bash
# Checks the running dashboard against its own OpenAPI document with schemathesis: a
# dashboard is started from the built binary on a fresh SQLite store in a temporary
# directory, and schemathesis generates a bounded number of requests per operation.
# The run fails on any 5xx, any response that contradicts the document (status, body
# schema, content type, headers), an endpoint that ignores authentication, and the rest
# of schemathesis's checks except one: `positive_data_acceptance` (schema-valid
# requests must succeed) is left out because the document cannot say what the dashboard
# checks beyond shapes (a definition must compile, PEM must be a certificate), so such
# requests rightly get 400 or 422.
#
#   scripts/schemathesis.sh              # target/debug/sluice, 30 examples an operation
#   SLUICE_BIN=target/release/sluice EXAMPLES=100 scripts/schemathesis.sh
#   SEED=20261126 scripts/schemathesis.sh   # the same examples every run (the test's)
#
# Installs schemathesis into a virtualenv under $HOME/.cache/sluice-tools the first time
# (needs python3 and PyPI), unless `st` is already on the PATH.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
bin=$(realpath "${SLUICE_BIN:-$root/target/debug/sluice}")
examples=${EXAMPLES:-30}
tools_root="${SLUICE_TOOLS_ROOT:-$HOME/.cache/sluice-tools}"

if [ ! -x "$bin" ]; then
  echo "no sluice binary at $bin: build it first (cargo build)" >&2
  exit 1
fi

if command -v st >/dev/null 2>&1; then
  st=st
else
  venv="$tools_root/schemathesis-venv"
  if [ ! -x "$venv/bin/st" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'schemathesis>=4,<5'
  fi
  st="$venv/bin/st"
fi

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(
  cd "$dir"
  exec env SLUICE_DB_LISTEN_PORT="$port" SLUICE_DB_STREAMING_ENABLED=true \
    SLUICE_DB_SECRET=schemathesis-sealing-secret SLUICE_DB_LOGGER_LEVEL=warn \
    "$bin" dashboard >"$dir/stdout" 2>"$dir/stderr"
) &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT

base="http://127.0.0.1:$port"
for _ in $(seq 1 200); do
  if curl -fsS "$base/ping" >/dev/null 2>&1; then break; fi
  sleep 0.05
done
key=$(awk '/^Admin key/ {print $NF}' "$dir/stdout")
if [ -z "$key" ]; then
  echo "the dashboard printed no admin key" >&2
  cat "$dir/stderr" >&2
  exit 1
fi

PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" SCHEMATHESIS_HOOKS=schemathesis_hooks \
  "$st" run "$base/api/openapi.json" \
  --url "$base" \
  --header "Authorization: Bearer $key" \
  --checks all \
  --exclude-checks positive_data_acceptance \
  --max-examples "$examples" \
  ${SEED:+--seed "$SEED"} \
  --no-color

# Whatever the requests did, the dashboard must still be up.
curl -fsS "$base/ping" >/dev/null
