"""The wordings of out-of-memory failures a real GPU prints, one per allocator setting and library.

Run by deploy/gpu-check/run.sh (step 5) on a machine with an NVIDIA GPU and PyTorch built for CUDA:

    python3 deploy/gpu-check/variants.py OUT_DIR

Each variant runs in a fresh Python process (its allocator settings are read once, at CUDA's
start) that fails in its own way and prints its uncaught exception as a job's log would; that
output is written to OUT_DIR/variant-<name>.txt, beside OUT_DIR/variants.tsv (name, what the
message is about, exit status, seconds). The texts are what `oomlens-agent parse` and `oomlens
explain` must read on that PyTorch version; the repository keeps them as golden fixtures with this
provenance (parse/tests/fixtures/gpu-variants/).

| variant | what fails |
|---|---|
| `native` | the default caching allocator, one request larger than the GPU |
| `expandable` | `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, the same request |
| `async` | `PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`: CUDA's own pool, its own wording |
| `fraction` | `torch.cuda.set_per_process_memory_fraction(0.25)`, a request past that share |
| `graphs` | a CUDA graph's private pool holding memory, then a request the rest cannot serve |
| `cublas` | the GPU filled, then the first matrix product (cuBLAS creates its handle and workspace) |
| `cudnn` | the GPU filled, then the first convolution (cuDNN's handle and workspace) |
| `pinned` | a pinned host buffer larger than the machine's memory (`cudaHostAlloc`: host memory, in CUDA's words) |
| `cpu` | a CPU tensor four times the machine's memory, written |

What the H200 run of 2026-12-04 (PyTorch 2.11, CUDA 13.0) printed: the four caching-allocator
variants PyTorch's message with their clauses (`… allowed;`, `… allocated in private pools (e.g.,
CUDA Graphs)`); `cudaMallocAsync` its own (`Allocation on device 0 would exceed allowed memory. (out
of memory)` with `Currently allocated`, `Requested`, `Device limit`, `Free (according to CUDA)`);
cuBLAS `CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate(handle)`; cuDNN only
`CUDNN_STATUS_INTERNAL_ERROR` (which other faults print too: the parser stays quiet on it); the
pinned buffer `torch.AcceleratorError: CUDA error: out of memory` (host memory in the device's
words); the CPU tensor nothing at all — the kernel's OOM killer ended the process (status -9), and
only the kernel's log says so.

Exit status: 0 every variant ran (each failed as it may), 3 no CUDA torch here.
"""

import os
import subprocess
import sys
import time

GIB = 1 << 30

COMMON = """
import torch
GIB = 1 << 30
total = torch.cuda.get_device_properties(0).total_memory
def fill():
    kept = []
    for size in (GIB, 64 << 20, 1 << 20):
        try:
            while True:
                kept.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        except torch.OutOfMemoryError:
            pass
    return kept
"""

VARIANTS = {
    "native": ({}, "x = torch.empty(total + GIB, dtype=torch.uint8, device='cuda')"),
    "expandable": (
        {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
        "a = torch.empty(total // 2, dtype=torch.uint8, device='cuda')\n"
        "x = torch.empty(total // 2 + GIB, dtype=torch.uint8, device='cuda')",
    ),
    "async": (
        {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
        "a = torch.empty(total // 2, dtype=torch.uint8, device='cuda')\n"
        "x = torch.empty(total // 2 + GIB, dtype=torch.uint8, device='cuda')",
    ),
    "fraction": (
        {},
        "torch.cuda.set_per_process_memory_fraction(0.25)\n"
        "a = torch.empty(total // 8, dtype=torch.uint8, device='cuda')\n"
        "x = torch.empty(total // 6, dtype=torch.uint8, device='cuda')",
    ),
    "graphs": (
        {},
        "s = torch.cuda.Stream()\n"
        "static = torch.zeros(GIB // 4, device='cuda')\n"
        "g = torch.cuda.CUDAGraph()\n"
        "with torch.cuda.stream(s):\n"
        "    with torch.cuda.graph(g):\n"
        "        out = static * 2 + 1\n"
        "x = torch.empty(total, dtype=torch.uint8, device='cuda')",
    ),
    "cublas": (
        {},
        "a = torch.randn(64, 64, device='cuda')\n"
        "kept = fill()\n"
        "b = a @ a\n"
        "torch.cuda.synchronize()\n"
        "print('the product ran with the GPU full', flush=True)",
    ),
    "cudnn": (
        {},
        "conv = torch.nn.Conv2d(64, 64, 3).cuda()\n"
        "x = torch.randn(8, 64, 64, 64, device='cuda')\n"
        "kept = fill()\n"
        "y = conv(x)\n"
        "torch.cuda.synchronize()\n"
        "print('the convolution ran with the GPU full', flush=True)",
    ),
    "pinned": (
        {},
        "import os\n"
        "ram = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')\n"
        "x = torch.empty(ram + 16 * GIB, dtype=torch.uint8, pin_memory=True)",
    ),
    "cpu": (
        {},
        "import os\n"
        "ram = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')\n"
        "x = torch.ones(4 * ram, dtype=torch.uint8)",
    ),
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "gpu-variants-out"
    os.makedirs(out, exist_ok=True)
    probe = subprocess.run(
        [sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"],
        capture_output=True,
    )
    if probe.returncode != 0:
        print("no CUDA torch in", sys.executable)
        return 3
    wanted = sys.argv[2:] or list(VARIANTS)
    with open(os.path.join(out, "variants.tsv"), "w") as tsv:
        tsv.write("variant\texit\tseconds\n")
        for name in wanted:
            env_extra, body = VARIANTS[name]
            env = dict(os.environ, PYTHONUNBUFFERED="1", **env_extra)
            # A job's script as a file (Triton compiles only functions defined in one; the
            # traceback's frames name it as a job's would).
            script = os.path.join(out, "variant_%s.py" % name)
            with open(script, "w") as f:
                f.write(COMMON + body + "\n")
            t0 = time.time()
            try:
                run = subprocess.run(
                    [sys.executable, script],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    timeout=120,
                )
                text, code = run.stdout.decode("utf-8", "replace"), run.returncode
            except subprocess.TimeoutExpired as e:
                text, code = (e.stdout or b"").decode("utf-8", "replace") + "\n(timed out)\n", 124
            seconds = time.time() - t0
            with open(os.path.join(out, "variant-%s.txt" % name), "w") as f:
                f.write(text if text.endswith("\n") else text + "\n")
            tsv.write("%s\t%d\t%.1f\n" % (name, code, seconds))
            last = [l for l in text.splitlines() if l.strip()][-1:] or [""]
            print("%-10s exit %3d  %5.1f s  %s" % (name, code, seconds, last[0][:150]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
