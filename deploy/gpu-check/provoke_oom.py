"""Provokes real CUDA out-of-memory errors under the oomlens hook, on a real GPU.

Run by deploy/gpu-check/run.sh with a hook listener on $OOMLENS_HOOK_SOCKET. Two failures, each in
its own report_oom scope, with the allocation history recorded so the allocator summary names the
code:

1. ``activations``: "weights" loaded in a load() function (about a third of the GPU), then a
   forward() that keeps every layer's activations until the GPU is full. The summary's sites must
   show the weights under load and the activations under forward.
2. ``fragmented``: 1 GiB segments each split into a live tensor and a free 384 MiB block, the rest
   of the GPU full, then a 512 MiB request. The summary must show free blocks adding up to the
   request with none large enough.

Each failure's exception text is written to <out>/torch-oom-<name>.txt (the real message the
parser and `oomlens explain` then read) and what the hook sent to <out>/report-<name>.json.
Exit status: 0 both provoked and reported; 3 no CUDA here; 1 anything else.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hooks", "python"))

import oomlens_hook  # noqa: E402
from cuda_torch import cuda_torch  # noqa: E402

GIB = 1 << 30


def oom_error(torch):
    """torch.OutOfMemoryError (2.5+), torch.cuda.OutOfMemoryError before."""
    return getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


def load(torch, total):
    """The model's weights: about a third of the GPU in 1 GiB tensors."""
    return [torch.empty(GIB // 4, dtype=torch.float32, device="cuda") for _ in range(max(1, total // 3 // GIB))]


def forward(torch, chunk):
    """Keeps every layer's activations (as autograd would for backward) until the GPU is full."""
    kept = []
    while True:
        kept.append(torch.empty(chunk // 2, dtype=torch.bfloat16, device="cuda"))


def fragment(torch):
    """Free memory the allocator cannot hand out in one block: 1 GiB segments, each split into a
    live 640 MiB tensor and a free 384 MiB block, the rest of the GPU taken by live 64 MiB
    tensors; then a 512 MiB request. Cached-free is about 0.37 x the segments, the largest free
    block 384 MiB: fragmentation by definition."""
    big, small = [], []
    try:
        while True:
            big.append(torch.empty(GIB, dtype=torch.uint8, device="cuda"))
    except oom_error(torch):
        pass
    try:
        while True:
            small.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
    except oom_error(torch):
        pass
    segments = len(big)
    del big[:]  # cached by the allocator, not returned to the driver
    # A 640 MiB request does not fit a 384 MiB remainder: each lands in its own 1 GiB segment.
    split = [torch.empty(640 << 20, dtype=torch.uint8, device="cuda") for _ in range(segments)]
    return small, split, torch.empty(512 << 20, dtype=torch.uint8, device="cuda")


def provoke(name, out, torch, fn, **scope):
    sent = []
    original = oomlens_hook._exchange

    def capture(line, *args, **kwargs):
        reply = original(line, *args, **kwargs)
        sent.append((json.loads(line), reply))
        return reply

    oomlens_hook._exchange = capture
    try:
        with oomlens_hook.report_oom(**scope):
            fn()
    except oom_error(torch) as e:
        with open(os.path.join(out, "torch-oom-%s.txt" % name), "w") as f:
            f.write("%s: %s\n" % (type(e).__name__, e))
    finally:
        oomlens_hook._exchange = original
    if not sent:
        print("%s: no report was sent" % name, file=sys.stderr)
        return False
    report, reply = sent[0]
    with open(os.path.join(out, "report-%s.json" % name), "w") as f:
        json.dump({"report": report, "reply": reply}, f, indent=1)
    summary = report.get("allocator") or {}
    print("%s: reply %s; allocator: %d segments, cached free %d B, largest free block %d B, sites %s" % (
        name, reply, summary.get("segments", 0), summary.get("cached_free_bytes", 0),
        summary.get("largest_free_block_bytes", 0), [s.get("function") for s in summary.get("sites", [])]))
    return bool(reply and reply.get("ok"))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    torch = cuda_torch()
    if torch is None:
        return 3
    done = oomlens_hook.install(record_history=True, max_entries=20_000, labels={"check": "gpu"})
    print("torch %s on %s; install: %s" % (torch.__version__, torch.cuda.get_device_name(0), done))
    _, total = torch.cuda.mem_get_info()
    state = {}

    def activations():
        state["weights"] = load(torch, total)
        forward(torch, 2 * GIB)

    ok = provoke("activations", out, torch, activations, phase="forward", batch=64, seq_len=4096)
    state.clear()
    torch.cuda.empty_cache()
    ok = provoke("fragmented", out, torch, lambda: state.setdefault("f", fragment(torch)), phase="backward") and ok
    state.clear()
    torch.cuda.empty_cache()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
