#!/usr/bin/env bash
# Sets up what the browser tests of the console (tests/console.rs) need: Debian's
# headless Chromium and its driver, and the pinned Node driver in tests/browser
# (installed with `npm ci` from its lock file when node_modules is missing or older than
# the lock file). Idempotent: run it before `cargo test` as often as you like.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
log() { echo "browser: $*" >&2; }

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    log "installing chromium and chromium-driver"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    log "installing nodejs and npm"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

cd "$here/tests/browser"
# npm writes node_modules/.package-lock.json on every install: when it is older than the
# lock file, the installed tree may not be the locked one.
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    log "installing the browser driver (npm ci)"
    npm ci --no-audit --no-fund --silent
fi
