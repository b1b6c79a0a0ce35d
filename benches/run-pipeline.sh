#!/usr/bin/env bash
# Reproduces the whole-pipeline tables of benches/README.md in one run on one machine:
#   1. decode + validate (+ convert) per core — criterion, benches/benches/ingest.rs
#   2. whole-pipeline throughput (loadgen, throughput mode) and its baselines on the same rows:
#      clickhouse-client RowBinary, RowBinary over HTTP, JSONEachRow over HTTP
#   3. connection scale: 1 000 agents at 1 Hz (loadgen, rate mode); SCALE_AGENTS=10000 for the stretch
# Needs clickhouse-server and clickhouse-client (Debian 18.16 is fine). Results go to stdout and to
# $OUT (default target/pipeline-bench/) as JSON and text.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-target/pipeline-bench}
SECONDS_MEASURED=${SECONDS_MEASURED:-30}
THROUGHPUT_AGENTS=${THROUGHPUT_AGENTS:-64}
SCALE_AGENTS=${SCALE_AGENTS:-1000}
SCALE_SECONDS=${SCALE_SECONDS:-60}
mkdir -p "$OUT"

echo "== machine" | tee "$OUT/machine.txt"
{
  echo "nproc: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo || true
  grep MemTotal /proc/meminfo
  uname -sr
  rustc --version
  clickhouse-server --version 2>/dev/null | head -1 || true
  echo "ulimit -n: $(ulimit -n); net.core.rmem_max: $(cat /proc/sys/net/core/rmem_max 2>/dev/null || echo ?)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee -a "$OUT/machine.txt"

cargo build --release -p oomlens-benches --bin loadgen -p oomlens-collector --bin oomlens-collector
LOADGEN=target/release/loadgen
COLLECTOR=target/release/oomlens-collector

echo "== 1. decode + validate per core (criterion)"
cargo bench -p oomlens-benches --bench ingest -- --warm-up-time 1 --measurement-time 3 2>&1 \
  | grep -E '^ingest|time:|thrpt:|frames,' | tee "$OUT/ingest.txt"

echo "== 2. whole-pipeline throughput + baselines"
"$LOADGEN" --quiet --collector-bin "$COLLECTOR" --label "pipeline throughput" \
  --agents "$THROUGHPUT_AGENTS" --mode throughput --seconds "$SECONDS_MEASURED" \
  --baselines --json "$OUT/throughput.json" "$@" | tee "$OUT/throughput.txt"

echo "== 2b. the same with deeper windows (128 unacknowledged batches per agent and per connection)"
"$LOADGEN" --quiet --collector-bin "$COLLECTOR" --label "pipeline throughput, deep windows" \
  --agents "$THROUGHPUT_AGENTS" --mode throughput --seconds "$SECONDS_MEASURED" \
  --max-in-flight 128 --max-batches-in-flight 128 \
  --baselines --json "$OUT/throughput-deep.json" "$@" | tee "$OUT/throughput-deep.txt"

echo "== 3. connection scale: $SCALE_AGENTS agents at 1 Hz"
"$LOADGEN" --quiet --collector-bin "$COLLECTOR" --label "connection scale" \
  --agents "$SCALE_AGENTS" --mode rate --rate-hz 1 --procs-per-gpu 0 --batch-seconds 1 \
  --seconds "$SCALE_SECONDS" --warmup-s 5 --json "$OUT/scale.json" | tee "$OUT/scale.txt"

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
