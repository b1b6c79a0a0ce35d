#!/usr/bin/env bash
# The oomlens demo: a simulated GPU fleet, a collector and a throw-away ClickHouse, then the reports.
#
#   ./deploy/demo.sh [demo options]      # options go to `oomlens demo` (see --help)
#
# Installs Debian/Ubuntu's ClickHouse server via apt when no `clickhouse`/`clickhouse-server`
# binary exists (with sudo when not root; the system service is not started), builds the release
# binaries and runs `target/release/oomlens demo "$@"`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$PATH:/usr/sbin:/sbin"

sudo_cmd() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

have_server() {
  command -v clickhouse >/dev/null 2>&1 || command -v clickhouse-server >/dev/null 2>&1 \
    || [ -x /usr/sbin/clickhouse-server ]
}

if ! have_server; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "no ClickHouse server found and no apt-get: install clickhouse-server or put a 'clickhouse' binary on PATH" >&2
    exit 1
  fi
  echo "installing clickhouse-server clickhouse-client (apt)" >&2
  policy=/usr/sbin/policy-rc.d
  added=0
  if [ ! -e "$policy" ]; then # do not start the system service; the demo runs its own server
    printf '#!/bin/sh\nexit 101\n' | sudo_cmd tee "$policy" >/dev/null
    sudo_cmd chmod 755 "$policy"
    added=1
  fi
  rc=0
  sudo_cmd apt-get update -qq \
    && sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clickhouse-server clickhouse-client tzdata \
    || rc=$?
  if [ "$added" = 1 ]; then sudo_cmd rm -f "$policy"; fi
  [ "$rc" = 0 ] || exit "$rc"
fi

cargo build --release --workspace --bins
exec "${CARGO_TARGET_DIR:-$root/target}/release/oomlens" demo "$@"
