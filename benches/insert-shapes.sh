#!/usr/bin/env bash
# How the shape of one INSERT body changes ClickHouse's cost: 500 000 `process_samples` rows into
# the real schema (with its rollup view) on a throw-away server, posted with curl, three rounds of
#   rowbinary    RowBinary, rows alternating nodes row by row (the worst interleaving)
#   grouped      RowBinary, rows grouped by (cluster, node), time-major inside a node
#   sorted       RowBinary, rows sorted by the table's sort key
#   native       Native (columnar), same rows as `rowbinary`
# printing wall time and the server's CPU seconds (utime + stime from /proc) per insert.
#
#   cargo build --release -p oomlens-collector
#   benches/insert-shapes.sh [ROWS]        # default 500000; needs clickhouse-server, curl, bc
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
collector=${OOMLENS_COLLECTOR_BIN:-$root/target/release/oomlens-collector}
rows=${1:-500000}
work=$(mktemp -d /tmp/oomlens-insert-shapes.XXXXXX)
cleanup() { "$root/deploy/dev-clickhouse.sh" stop "$work/ch" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

eval "$("$root/deploy/dev-clickhouse.sh" start "$work/ch" | grep '^OOMLENS_CLICKHOUSE_URL=')"
url="$OOMLENS_CLICKHOUSE_URL/?database=oomlens"
server_pid=$(cat "$work/ch/pid")
"$collector" migrate --clickhouse-url "$OOMLENS_CLICKHOUSE_URL" >/dev/null 2>&1
q() { curl -sS --fail-with-body "$url" --data-binary "$1"; }
urlencode() { python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1"; }

cols="cluster, node, gpu_index, ts_ms, pid, agent_id, process_name, used_bytes, workload, label_keys, label_values"
gen="SELECT 'sim' AS cluster, concat('node-', toString(number % 64)) AS node,
  toUInt32(number % 8) AS gpu_index, toInt64(1764460800000 + intDiv(number, 8192) * 1000) AS ts_ms,
  toUInt32(1000 + number % 128) AS pid, concat('agent-', toString(number % 64)) AS agent_id,
  'python3' AS process_name, if(number % 17 = 0, NULL, number * 1024) AS used_bytes,
  concat('job-', toString(number % 24)) AS workload, ['pod', 'namespace'] AS label_keys,
  [concat('pod-', toString(number % 24)), 'ml'] AS label_values FROM numbers($rows)"
q "$gen FORMAT RowBinary" >"$work/rowbinary"
q "SELECT * FROM ($gen) ORDER BY cluster, node, ts_ms, gpu_index, pid FORMAT RowBinary" >"$work/grouped"
q "SELECT * FROM ($gen) ORDER BY cluster, node, gpu_index, ts_ms, pid FORMAT RowBinary" >"$work/sorted"
q "$gen FORMAT Native" >"$work/native"

hz=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
echo "ClickHouse $(q 'SELECT version()'), $rows rows per insert"
printf '%-10s %5s %9s %11s\n' shape round wall_s server_cpu_s
for round in 1 2 3; do
  for shape in rowbinary grouped sorted native; do
    format=RowBinary
    [ "$shape" = native ] && format=Native
    c0=$(cpu_ticks); t0=$(date +%s.%N)
    curl -sS --fail-with-body "$url&query=$(urlencode "INSERT INTO process_samples ($cols) FORMAT $format")" \
      --data-binary "@$work/$shape"
    t1=$(date +%s.%N); c1=$(cpu_ticks)
    # Real columns must have arrived (a Native body with other column names inserts defaults,
    # cheaply): no empty node, in the table and in its rollup.
    [ "$(q "SELECT countIf(node = '') + (SELECT countIf(node = '') FROM process_minutes) FROM process_samples")" = 0 ] \
      || { echo "$shape stored default values" >&2; exit 1; }
    printf '%-10s %5d %9.3f %11.2f\n' "$shape" "$round" "$(echo "$t1 - $t0" | bc)" "$(echo "($c1 - $c0) / $hz" | bc -l)"
  done
done
[ "$(q "SELECT count() FROM process_samples")" -eq $((rows * 12)) ] || { echo "row count mismatch" >&2; exit 1; }
