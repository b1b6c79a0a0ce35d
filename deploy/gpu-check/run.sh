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
  check "$name: oomlens explain ($(head -c 300 "$out/$name.explain.json" | grep -o '"scenario":"[a-z_]*"' | head -1))" $?
done

say "== $([ "$failed" -eq 0 ] && echo passed || echo FAILED); files in $out"
exit "$failed"
