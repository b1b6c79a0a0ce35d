#!/usr/bin/env bash
# The oomlens test command: set up what is missing (idempotent), then run every test.
#
#   ./deploy/test.sh
#
# 1. ClickHouse server binary: Debian/Ubuntu's `clickhouse-server` (18.16) via apt when neither
#    `clickhouse` nor `clickhouse-server` exists (with sudo when not root; the system service is
#    not started — every test starts its own throw-away server). Also curl, openssl (the TLS
#    tests make their certificates with it) and tzdata.
# 2. .venv with chdb-core (ClickHouse 26.x in-process) for the modern-engine check.
# 3. cargo build --workspace --all-targets.
# 4. Rust tests: cargo nextest (if installed) or cargo test.
# 5. The portability check (deploy/sqlcheck): every built-in query (collector/sql), the Grafana
#    dashboard's queries (deploy/grafana/sql) and every panel/variable/annotation SQL of the
#    dashboard over the fixtures on a throw-away 18.16 server and on chdb-core; the answers must
#    match; the committed dashboard JSON must equal deploy/grafana/build.py's output.
# 6. The Python hook helper against a real hook listener (again under a Python with a real torch
#    where one imports it: Debian's CPU-only python3-torch, which CI installs) and its pip package.
#
# Exits non-zero if anything fails. Environment: PYTHON (default python3), OOMLENS_SKIP_RUST_TESTS=1
# to run only the SQL check.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="$PATH:/usr/sbin:/sbin"
python=${PYTHON:-python3}
venv="$root/.venv"
failures=()

section() { printf '\n=== %s\n' "$*"; section_start=$SECONDS; }
done_section() { printf -- '--- %s: %ss\n' "$1" "$((SECONDS - section_start))"; }

sudo_cmd() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

have_server() {
  command -v clickhouse >/dev/null 2>&1 || command -v clickhouse-server >/dev/null 2>&1 \
    || [ -x /usr/sbin/clickhouse-server ]
}

# apt-get install without starting any service the packages ship (policy-rc.d denies it).
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "apt-get not found: install $* yourself" >&2
    return 1
  fi
  local policy=/usr/sbin/policy-rc.d added=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | sudo_cmd tee "$policy" >/dev/null
    sudo_cmd chmod 755 "$policy"
    added=1
  fi
  local rc=0
  sudo_cmd apt-get update -qq && sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" || rc=$?
  if [ "$added" = 1 ]; then sudo_cmd rm -f "$policy"; fi
  return "$rc"
}

section "set-up"
missing=()
have_server || missing+=(clickhouse-server clickhouse-client)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
[ -e /usr/share/zoneinfo/UTC ] || missing+=(tzdata)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing ${missing[*]}"
  apt_install "${missing[@]}"
fi
have_server || { echo "still no ClickHouse server binary after installing" >&2; exit 1; }

if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import chdb' >/dev/null 2>&1; then
  echo "creating $venv with chdb-core"
  if ! [ -x "$venv/bin/python" ]; then
    if ! "$python" -m venv "$venv"; then
      # Debian's own python3 needs python3-venv for this.
      rm -rf "$venv"
      apt_install python3-venv
      "$python" -m venv "$venv"
    fi
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check chdb-core
fi
"$venv/bin/python" -c 'import chdb; print("chdb-core", chdb.__version__)'
# Kubernetes: OpenAPI schemas bundled offline in kubernetes-validate; Helm's engine (Helm v4 as a
# library) in helm-python-sdk, to render the chart.
if ! "$venv/bin/python" -c 'import kubernetes_validate, yaml, helm_python' >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check kubernetes-validate PyYAML helm-python-sdk
fi
done_section "set-up"

section "cargo build --workspace --all-targets"
cargo build --workspace --all-targets
done_section "build"

if [ "${OOMLENS_SKIP_RUST_TESTS:-0}" != 1 ]; then
  if cargo nextest --version >/dev/null 2>&1; then
    section "cargo nextest run --workspace --no-fail-fast"
    cargo nextest run --workspace --no-fail-fast || failures+=("rust tests")
  else
    section "cargo test --workspace (cargo-nextest not installed)"
    cargo test --workspace --no-fail-fast || failures+=("rust tests")
  fi
  done_section "rust tests"
fi

section "Python hook helper against a real hook listener; the pip package installs"
OOMLENS_AGENT_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/oomlens-agent" \
  "$python" -m unittest "$root/deploy/hooks/python/test_oomlens_hook.py" || failures+=("Python hook test")
# Again under a Python that has a real torch (Debian's CPU-only python3-torch, which CI installs):
# the real exception classes, install() and the snapshot calls without CUDA.
torch_python=""
for candidate in "$python" /usr/bin/python3; do
  if "$candidate" -c 'import torch' >/dev/null 2>&1; then torch_python=$candidate; break; fi
done
if [ -z "$torch_python" ]; then
  echo "skip real-torch hook tests: no Python here imports torch (apt install python3-torch)"
elif [ "$torch_python" != "$python" ]; then
  OOMLENS_AGENT_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/oomlens-agent" \
    "$torch_python" -m unittest "$root/deploy/hooks/python/test_oomlens_hook.py" || failures+=("Python hook test (real torch)")
fi
# `pip install ./deploy/hooks/python` as the docs say (built in a temporary copy: no build/ left).
hookpkg=$(mktemp -d "${TMPDIR:-/tmp}/oomlens-hookpkg.XXXXXX")
cp "$root"/deploy/hooks/python/{pyproject.toml,README.md,oomlens_hook.py} "$hookpkg/"
if "$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall "$hookpkg" \
  && (cd / && "$venv/bin/python" -c 'import oomlens_hook as h; assert h.PROTOCOL_VERSION == 2; print("ok   pip install ./deploy/hooks/python:", h.__file__)'); then
  :
else
  failures+=("Python hook package")
fi
rm -rf "$hookpkg"
done_section "Python hook test"

section "Kubernetes: rendered manifests = Helm chart, schemas, invariants, configs accepted by the binaries"
"$venv/bin/python" "$root/deploy/kubernetes/test_manifests.py" \
  --agent-bin "${CARGO_TARGET_DIR:-$root/target}/debug/oomlens-agent" \
  --collector-bin "${CARGO_TARGET_DIR:-$root/target}/debug/oomlens-collector" || failures+=("Kubernetes manifests")
done_section "Kubernetes manifests"

section "systemd: units verified (systemd-analyze), sample configs accepted by the binaries"
systemd_check() {
  local bindir="${CARGO_TARGET_DIR:-$root/target}/debug" tmp rc=0 unit
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/oomlens-systemd.XXXXXX")
  "$bindir/oomlens-agent" run --config "$root/deploy/systemd/agent.toml" --print-config >/dev/null || rc=1
  "$bindir/oomlens-collector" serve --config "$root/deploy/systemd/collector.toml" --print-config >/dev/null || rc=1
  if command -v systemd-analyze >/dev/null 2>&1; then
    for unit in oomlens-agent.service oomlens-collector.service; do
      # The units name /usr/bin; verify them against the binaries just built. verify works
      # offline (no running systemd needed) and prints nothing for a clean unit.
      sed "s#/usr/bin/oomlens-#$bindir/oomlens-#g" "$root/deploy/systemd/$unit" >"$tmp/$unit"
      if ! out=$(systemd-analyze verify --man=no "$tmp/$unit" 2>&1) || [ -n "$out" ]; then
        echo "systemd-analyze verify $unit:"; echo "$out"; rc=1
      else
        echo "ok   $unit (systemd-analyze verify)"
      fi
    done
  else
    echo "systemd-analyze not installed: unit syntax not verified (hardening keys: agent/tests/cli.rs, collector/tests/cli.rs)"
    # .ci/run installs it: in CI a skipped check is a failure.
    if [ "${CI:-}" = true ]; then rc=1; fi
  fi
  rm -rf "$tmp"
  return "$rc"
}
systemd_check || failures+=("systemd units")
done_section "systemd"

section "Prometheus alert rules (promtool, when installed)"
if command -v promtool >/dev/null 2>&1; then
  promtool check rules "$root/deploy/prometheus/alerts.yaml" || failures+=("alert rules")
  (cd "$root/deploy/prometheus" && promtool test rules alerts.test.yaml) || failures+=("alert rule tests")
else
  echo "promtool not installed (Debian: apt-get install prometheus): rules not checked here; the Rust tests check the metric names they use"
  # .ci/run installs it: in CI a skipped check is a failure.
  if [ "${CI:-}" = true ]; then failures+=("alert rules (promtool missing in CI)"); fi
fi
done_section "alert rules"

section "SQL portability check: ClickHouse 18.16 vs chdb-core"
work=$(mktemp -d "${TMPDIR:-/tmp}/oomlens-test.XXXXXX")
cleanup() {
  "$root/deploy/dev-clickhouse.sh" stop "$work/clickhouse" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Output to a file, not a pipe: the server's parent shell keeps the start script's stdout open.
"$root/deploy/dev-clickhouse.sh" start "$work/clickhouse" >"$work/clickhouse.env"
url=$(sed -n 's/^OOMLENS_CLICKHOUSE_URL=//p' "$work/clickhouse.env")
[ -n "$url" ] || { echo "dev-clickhouse.sh printed no URL" >&2; exit 1; }
print_ddl() {
  # The DDL exactly as the collector renders it for a server version (built just above).
  local bin="${CARGO_TARGET_DIR:-$root/target}/debug/oomlens-collector"
  if [ -x "$bin" ]; then
    "$bin" ddl --server-version "$1"
  else
    cargo run -q -p oomlens-collector --bin oomlens-collector -- ddl --server-version "$1"
  fi
}
print_ddl 26.9.1 >"$work/ddl-modern.sql"
print_ddl 18.16.1 >"$work/ddl-old.sql"
"$venv/bin/python" "$root/deploy/sqlcheck/check_sql.py" \
  --ddl-modern "$work/ddl-modern.sql" --ddl-old "$work/ddl-old.sql" \
  --fixtures "$root/collector/tests/fixtures/sql" --queries "$root/collector/sql" \
  --queries "$root/deploy/grafana/sql" --grafana "$root/deploy/grafana/oomlens-dashboard.json" \
  --clickhouse-url "$url" || failures+=("SQL portability check")
# The committed Grafana dashboard is exactly what deploy/grafana/build.py builds from the SQL files.
"$python" "$root/deploy/grafana/build.py" --check || failures+=("Grafana dashboard out of date")
done_section "SQL check"

echo
if [ "${#failures[@]}" -gt 0 ]; then
  echo "FAILED: ${failures[*]}"
  exit 1
fi
echo "all tests passed"
