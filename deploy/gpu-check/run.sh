#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU, as one short script (a few minutes on one GPU; CI has no
# GPU and does not run it).
#
#   deploy/gpu-check/run.sh [OUT_DIR]
#
# 1. `oomlens-agent nvml-smoke`: NVML opens, every GPU and one full reading (memory, utilisation,
#    power, clocks, processes).
# 2. A real CUDA OOM under the hook: `oomlens-agent hook-listen --print` serves the hook socket and
#    deploy/gpu-check/provoke_oom.py (PyTorch with CUDA) fails twice under `oomlens_hook` —
#    activations filling the GPU, and a fragmented cache. Checked here: each report reached the
#    agent; the GPU is named by the UUID NVML lists; the allocator summary is there (for the
#    fragmented one: free blocks adding up to the request, none large enough).
# 3. The real exception texts through `oomlens-agent parse` and `oomlens explain --json` (the
#    message-only attribution a person gets by pasting them).
# 4. Every scenario as a real job (deploy/gpu-check/scenarios.py: a model too large to load, Adam's
#    state that does not fit, a batch too large (a CNN, a GPT), a context too long, a tenant
#    holding the GPU, a neighbour growing into it, a fragmented cache, a DataLoader worker killed
#    in a memory cgroup), once plain and once under the hook, while `oomlens-agent run --source
#    nvml` follows their logs, the kernel log and the hook socket. No collector is reachable
#    there: every batch stays in the agent's disk spool, which is packed into
#    OUT_DIR/scenarios.tar.gz with the logs and scenarios.tsv (log file, the cause by
#    construction, exit status). Unpacked into collector/tests/fixtures/h200 it is what `cargo
#    test -p oomlens-collector --test gpu_replay` replays into ClickHouse and scores (that
#    directory's README). The agent needs certificates to start, though nothing listens (the
#    replay mints its own): $OOMLENS_GPU_CERTS with ca.pem and agent-gpu-check.pem/.key, from
#    `oomlens-collector certs --out DIR --node gpu-check --cluster gpu-check --collector-name
#    localhost`; the step is skipped without them. OOMLENS_SCENARIOS picks a subset; no job starts
#    after OOMLENS_DEADLINE_S seconds of the whole script (default 900).
# 5. The wordings a real GPU prints for each allocator setting and library
#    (deploy/gpu-check/variants.py: the caching allocator, expandable segments, cudaMallocAsync, a
#    memory fraction, a CUDA graph's private pool, cuBLAS and cuDNN on a full GPU, a pinned host
#    buffer, a CPU tensor) into OUT_DIR/variants/, each through
#    `oomlens-agent parse`; agent/tests/fixtures/logs/h200_variants.log keeps such a run's texts.
#
# Binaries: $OOMLENS_BIN_DIR (default target/release, then target/debug): oomlens-agent and oomlens,
# built on a machine with the Rust toolchain (`cargo build --release -p oomlens-agent -p
# oomlens-cli`) where the GPU machine has none. Python: $PYTHON (default python3) with torch built
# for CUDA. Everything it finds lands in OUT_DIR (default ./gpu-check-out); the summary is
# OUT_DIR/summary.txt. Exit status: 0 every check passed, 1 a check failed, 3 no GPU / driver /
# CUDA torch here (nothing was checked).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$PWD/gpu-check-out}
mkdir -p "$out"
python=${PYTHON:-python3}
summary="$out/summary.txt"
: >"$summary"
failed=0
say() { printf '%s\n' "$*" | tee -a "$summary"; }
check() { # check NAME CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then say "ok    $1"; else say "FAIL  $1"; failed=1; fi
}

bin_dir=${OOMLENS_BIN_DIR:-}
if [ -z "$bin_dir" ]; then
  for candidate in "$root/target/release" "$root/target/debug"; do
    if [ -x "$candidate/oomlens-agent" ]; then bin_dir=$candidate; break; fi
  done
fi
agent="$bin_dir/oomlens-agent"
cli="$bin_dir/oomlens"
if [ ! -x "$agent" ] || [ ! -x "$cli" ]; then
  say "no oomlens-agent / oomlens binaries in '${bin_dir:-target/release or target/debug}': build them first (OOMLENS_BIN_DIR)"
  exit 1
fi
if [ ! -e /proc/driver/nvidia ] && ! command -v nvidia-smi >/dev/null 2>&1; then
  say "no NVIDIA driver on this machine: nothing checked"
  exit 3
fi

say "== $(date -u +%FT%TZ) $(uname -srm)"
nvidia-smi -L 2>&1 | tee -a "$summary"

# 1. NVML through the agent's own source.
"$agent" nvml-smoke >"$out/nvml-smoke.txt" 2>&1
check "nvml-smoke (out: nvml-smoke.txt)" $?
uuids=$(grep -o 'GPU-[0-9a-f-]*' "$out/nvml-smoke.txt" | sort -u)
[ -n "$uuids" ]
check "NVML lists the GPUs' UUIDs: $(echo $uuids)" $?

# 2. Real CUDA OOMs under the hook, reported to a real listener.
sock=$(mktemp -u /tmp/oomlens-gpu-check.XXXXXX.sock)
OOMLENS_LOG=warn "$agent" hook-listen --socket "$sock" --print >"$out/hook-events.jsonl" 2>"$out/hook-listen.log" &
listener=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
PYTHONUNBUFFERED=1 OOMLENS_HOOK_SOCKET="$sock" "$python" "$root/deploy/gpu-check/provoke_oom.py" "$out" \
  >"$out/provoke.log" 2>&1
provoked=$?
cat "$out/provoke.log" >>"$summary"
kill -TERM "$listener" 2>/dev/null
wait "$listener" 2>/dev/null
if [ "$provoked" -eq 3 ]; then
  say "no CUDA torch in $python: the hook checks did not run"
  exit 3
fi
check "two real CUDA OOMs provoked and reported (provoke.log)" "$provoked"

"$python" - "$out" "$uuids" <<'EOF' >>"$summary" 2>&1
import json, os, sys
out, uuids = sys.argv[1], sys.argv[2].split()
events = [json.loads(l) for l in open(os.path.join(out, "hook-events.jsonl")) if l.strip()]
bad = 0
def check(name, ok):
    global bad
    print(("ok    " if ok else "FAIL  ") + name)
    bad |= not ok
check("the agent accepted 2 hook events (got %d)" % len(events), len(events) == 2)
for e in events:
    labels = e.get("labels", {})
    name = "phase %s" % e.get("phase")
    check("%s: GPU named by a UUID NVML lists (%s)" % (name, labels.get("gpu.uuid")), labels.get("gpu.uuid") in uuids)
    check("%s: capacity %s B and free %s B from the device" % (name, e.get("capacity_bytes"), e.get("free_bytes")),
          bool(e.get("capacity_bytes")) and e.get("free_bytes") is not None)
    check("%s: allocator summary (%s segments, largest free block %s B)" % (
        name, labels.get("alloc.segments"), labels.get("alloc.largest_free_block_bytes")), "alloc.segments" in labels)
    check("%s: allocation sites recorded (%s)" % (name, labels.get("alloc.site.1")), "alloc.site.1" in labels)
    if e.get("phase") == "backward":
        req = e.get("requested_bytes") or 0
        free = int(labels.get("alloc.cached_free_bytes", 0))
        largest = int(labels.get("alloc.largest_free_block_bytes", 0))
        check("fragmented: cached free %d >= request %d > largest free block %d" % (free, req, largest),
              free >= req > largest)
sys.exit(1 if bad else 0)
EOF
check "hook events carry the UUID, the device's numbers and the allocator summary" $?

# 3. The real messages through the parser and the offline attribution.
for text in "$out"/torch-oom-*.txt; do
  [ -e "$text" ] || continue
  name=$(basename "$text" .txt)
  "$agent" parse "$text" >"$out/$name.parse.txt" 2>&1
  grep -q cuda_oom "$out/$name.parse.txt"
  check "$name: oomlens-agent parse finds the cuda_oom" $?
  "$cli" explain --json "$text" >"$out/$name.explain.json" 2>&1
  check "$name: oomlens explain ($(grep -o '"scenario":"[a-z_]*"' "$out/$name.explain.json" | head -1))" $?
done

# 4. Every scenario as a real job, under the agent with NVML.
certs=${OOMLENS_GPU_CERTS:-}
if [ -z "$certs" ] || [ ! -r "$certs/agent-gpu-check.pem" ]; then
  say "skip  scenarios under the agent: no agent certificates in \$OOMLENS_GPU_CERTS"
else
  work=$(mktemp -d /tmp/oomlens-scenarios.XXXXXX)
  mkdir -p "$work/logs" "$work/spool"
  cat >"$work/agent.toml" <<EOF
[agent]
node = "gpu-check"
cluster = "gpu-check"
[source]
kind = "nvml"
[uplink]
# Nothing listens here: every batch waits in the disk spool for the replay.
collectors = ["127.0.0.1:4433"]
server_name = "localhost"
ca = "$certs/ca.pem"
cert = "$certs/agent-gpu-check.pem"
key = "$certs/agent-gpu-check.key"
drain_timeout_ms = 1000
[spool]
dir = "$work/spool"
fsync = "always"
[logs]
paths = ["$work/logs/*.log"]
state_file = "$work/log-offsets.json"
[hook]
path = "$work/hook.sock"
[telemetry]
listen = "127.0.0.1:9109"
EOF
  OOMLENS_LOG=info "$agent" run --config "$work/agent.toml" >"$out/agent.log" 2>&1 &
  runner=$!
  for _ in $(seq 100); do [ -S "$work/hook.sock" ] && break; sleep 0.1; done
  [ -S "$work/hook.sock" ]
  check "oomlens-agent run --source nvml started (agent.log)" $?
  manifest="$work/scenarios.tsv"
  printf 'log\tscenario\tvariant\texit\tstart_ms\tend_ms\n' >"$manifest"
  job() { # job VARIANT NAME SCENARIO [command prefix...]
    local variant=$1 name=$2 truth=$3; shift 3
    local log="$work/logs/$variant-$name.log" flag=""
    [ "$variant" = hook ] && flag=--hook
    local t0; t0=$(date +%s%3N)
    PYTHONUNBUFFERED=1 OOMLENS_HOOK_SOCKET="$work/hook.sock" timeout 100 "$@" "$python" \
      "$root/deploy/gpu-check/scenarios.py" "$name" $flag >>"$log" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(basename "$log")" "$truth" "$variant" "$rc" "$t0" "$(date +%s%3N)" >>"$manifest"
    [ "$rc" -eq 1 ]
    check "$variant $name: the job failed ($rc: $(grep -m1 -o '[A-Za-z.]*\(OutOfMemoryError\|RuntimeError\).\{0,90\}' "$log" | head -1))" $?
    sleep 3 # the GPU's memory goes back before the next job
  }
  memory_cgroup() { # memory_cgroup VARIANT: a fresh cgroup v2 of 6 GiB (its path on stdout)
    local cg=/sys/fs/cgroup/oomlens-gpu-check-$$-$1
    echo +memory >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    mkdir -p "$cg" && echo 6G >"$cg/memory.max" && { echo 0 >"$cg/memory.swap.max" 2>/dev/null || true; } && echo "$cg"
  }
  wanted=${OOMLENS_SCENARIOS:-static_load static_optimizer batch batch_lm sequence contention contention_growth fragmentation host_oom}
  for variant in plain hook; do
    for name in $wanted; do
      if [ "$SECONDS" -gt "${OOMLENS_DEADLINE_S:-900}" ]; then
        say "skip  $variant $name: past the deadline (OOMLENS_DEADLINE_S=${OOMLENS_DEADLINE_S:-900} s)"
        continue
      fi
      case $name in
        static_load|static_optimizer) job "$variant" "$name" static ;;
        batch_lm) job "$variant" "$name" batch ;;
        contention_growth)
          log="$work/logs/$variant-tenant-growing.log"
          PYTHONUNBUFFERED=1 OOMLENS_TENANT_FRACTION=0.75 OOMLENS_TENANT_DELAY_S=3 \
            "$python" "$root/deploy/gpu-check/scenarios.py" tenant >"$log" 2>&1 &
          tenant=$!
          export OOMLENS_RESIZE_AFTER_S=14 # the tenant has grown by then
          job "$variant" contention_growth contention
          unset OOMLENS_RESIZE_AFTER_S
          kill -TERM "$tenant" 2>/dev/null; wait "$tenant" 2>/dev/null
          sleep 2 ;;
        contention)
          log="$work/logs/$variant-tenant.log"
          PYTHONUNBUFFERED=1 OOMLENS_TENANT_FRACTION=0.75 "$python" "$root/deploy/gpu-check/scenarios.py" tenant >"$log" 2>&1 &
          tenant=$!
          for _ in $(seq 600); do grep -q 'tenant: holding' "$log" 2>/dev/null && break; sleep 0.1; done
          job "$variant" contention contention
          kill -TERM "$tenant" 2>/dev/null; wait "$tenant" 2>/dev/null
          sleep 2 ;;
        host_oom)
          if cg=$(memory_cgroup "$variant"); then
            # The job (and the DataLoader worker it forks) runs inside the cgroup.
            job "$variant" host_oom host_oom sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg"
          else
            say "skip  $variant host_oom: no cgroup v2 memory controller"
          fi ;;
        *) job "$variant" "$name" "$name" ;;
      esac
    done
  done
  sleep 12 # the agent's merge window (detect.merge_grace_ms, 10 s) closes on the last events
  curl -s http://127.0.0.1:9109/metrics >"$work/agent-metrics.txt" 2>/dev/null || true
  kill -TERM "$runner" 2>/dev/null
  wait "$runner" # exits 1: nothing acknowledged the batches, which stay in the spool
  grep -q 'agent stopped' "$out/agent.log"
  check "oomlens-agent stopped, its batches in the spool ($(du -sh "$work/spool" | cut -f1))" $?
  grep -h 'oomlens_agent_events\|oomlens_agent_spool' "$work/agent-metrics.txt" 2>/dev/null | grep -v '^#' | head -20 >>"$summary"
  cp "$out/agent.log" "$work/agent.log"
  nvidia-smi -q >"$work/nvidia-smi.txt" 2>&1
  dmesg 2>/dev/null | tail -n 300 >"$work/dmesg.txt" # the kernel's own OOM-killer lines, if any
  "$python" -c 'import torch; print(torch.__version__, torch.version.cuda)' >"$work/versions.txt" 2>&1
  tar -C "$work" -czf "$out/scenarios.tar.gz" logs spool scenarios.tsv agent.toml agent.log agent-metrics.txt nvidia-smi.txt dmesg.txt versions.txt
  check "scenarios.tar.gz: $(du -h "$out/scenarios.tar.gz" | cut -f1) (logs, spool, scenarios.tsv)" $?
fi

# 5. Each variant's wording through the parser (a variant that failed otherwise is reported, not
# failed: a library's behaviour on a full GPU differs between versions).
if [ "$SECONDS" -le "${OOMLENS_DEADLINE_S:-900}" ]; then
  "$python" "$root/deploy/gpu-check/variants.py" "$out/variants" >"$out/variants.log" 2>&1
  check "variants.py ran (variants.log)" $?
  for text in "$out"/variants/variant-*.txt; do
    [ -e "$text" ] || continue
    "$agent" parse "$text" >"${text%.txt}.parse.txt" 2>&1
    say "      $(basename "$text" .txt): $(grep -m1 '^line' "${text%.txt}.parse.txt" || echo 'no event')"
  done
else
  say "skip  variants: past the deadline (OOMLENS_DEADLINE_S=${OOMLENS_DEADLINE_S:-900} s)"
fi

say "== $([ "$failed" -eq 0 ] && echo passed || echo FAILED); files in $out"
exit "$failed"
