"""Real CUDA out-of-memory failures of every scenario, each a job of its own, for the agent to catch
on a real GPU (run by deploy/gpu-check/run.sh, which follows their logs with `oomlens-agent run
--source nvml`).

    python3 scenarios.py NAME [--hook]

Each job is ordinary PyTorch code -- real modules, a real training or inference step -- that fails
the way the scenario fails in the field, and dies of the uncaught exception (the traceback is what
lands in its log). The cause is known by construction, so the agent's attribution can be scored.
Sizes are read from the GPU, so the jobs fail on any card with enough memory for the model of the
`batch` job to fit (about 16 GiB and up).

* ``static_load`` (static): a transformer built on the GPU layer by layer is larger than the GPU;
  the failing request is one layer's weight, the GPU is full of weights.
* ``static_optimizer`` (static): the weights and their gradients fit, Adam's state does not: the
  first ``optimizer.step()`` fails whatever the batch.
* ``batch`` (batch): a ResNet-50 trained at a batch that is too large; the forward pass fails.
* ``batch_lm`` (batch): a small GPT (bf16, flash attention) trained at 2048 tokens and a batch
  that is too large.
* ``sequence`` (sequence): a small GPT with plain attention evaluated at growing context lengths;
  the attention scores of the first length that does not fit fail.
* ``contention`` (contention): the ``batch`` model at a batch that fits an empty GPU, while
  ``tenant`` (another process started by run.sh) holds most of the GPU.
* ``contention_growth`` (contention): the ``batch`` model with progressive resizing (160 then 224
  pixels) at a batch that fits an empty GPU; a neighbour that starts later (``tenant`` with
  ``OOMLENS_TENANT_DELAY_S``) grows into the free memory, and the first larger step fails.
* ``fragmentation`` (fragmentation): length-sorted evaluation batches whose predictions, kept on
  the GPU, land in the segment each step's activation just left; the cache grows until a step's
  activation finds no block large enough though the cached free memory is many times the
  request (PyTorch's own hint: reserved but unallocated is large).
* ``host_oom`` (host_oom): a DataLoader worker whose dataset caches every sample in host memory,
  run by run.sh in a memory cgroup; the kernel's OOM killer kills the worker.
* ``tenant``: not a failure; holds a share of the GPU (``OOMLENS_TENANT_FRACTION``, default 0.7)
  until killed, at once or (``OOMLENS_TENANT_DELAY_S``) growing to it after a delay.

``--hook`` installs oomlens_hook (deploy/hooks/python) with the job's shape and reports each phase
through ``report_oom`` scopes, as a user who adopted the hook would. Exit status: 1 the job failed
(expected), 0 it did not fail (the check then fails), 3 no CUDA torch here.
"""

import math
import os
import sys
import time

from cuda_torch import cuda_torch

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 1 << 30
MIB = 1 << 20

HOOK = None  # oomlens_hook when --hook


def scope(phase, **shape):
    """A report_oom scope under --hook; a no-op otherwise."""
    if HOOK is None:
        import contextlib

        return contextlib.nullcontext()
    return HOOK.report_oom(phase=phase, **shape)


def gpu_total(torch):
    return torch.cuda.mem_get_info()[1]


def transformer_block(nn, d):
    """A pre-norm block's weights: attention projections and a 4x MLP (12 d^2 parameters)."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d, bias=False)
            self.proj = nn.Linear(d, d, bias=False)
            self.up = nn.Linear(d, 4 * d, bias=False)
            self.down = nn.Linear(4 * d, d, bias=False)

        def forward(self, x):
            h = self.norm(x)
            q, _, v = self.qkv(h).chunk(3, dim=-1)
            x = x + self.proj(q * v)
            return x + self.down(nn.functional.gelu(self.up(self.norm(x))))

    return Block()


def load_model(torch, nn, d, layers):
    """Builds the model directly on the GPU (as loaders that skip the CPU copy do)."""
    with torch.device("cuda"):
        return nn.Sequential(*[transformer_block(nn, d) for _ in range(layers)])


def static_load(torch, nn):
    d = 8192
    per_layer = 12 * d * d * 4  # fp32
    layers = int(gpu_total(torch) * 1.4 // per_layer) + 1
    print("loading a %d-layer model of %.1f GiB (fp32) onto a %.1f GiB GPU"
          % (layers, layers * per_layer / GIB, gpu_total(torch) / GIB), flush=True)
    with scope("load", hidden=d, layers=layers, params=12 * d * d * layers, precision="fp32"):
        model = load_model(torch, nn, d, layers)
    return model


def train_step(optimizer, shape, forward):
    """One training step, each phase in its report_oom scope; ``forward()`` returns the loss."""
    with scope("forward", **shape):
        loss = forward()
    with scope("backward", **shape):
        loss.backward()
    with scope("optimizer_step", **shape):
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def static_optimizer(torch, nn):
    d = 8192
    per_layer = 12 * d * d * 4
    # Weights + gradients take about 80 % of the GPU; Adam's two moments cannot fit.
    layers = max(1, int(gpu_total(torch) * 0.4 // per_layer))
    params = 12 * d * d * layers
    print("fine-tuning %d parameters (fp32, Adam) on a %.1f GiB GPU" % (params, gpu_total(torch) / GIB), flush=True)
    shape = dict(hidden=d, layers=layers, params=params, precision="fp32", optimizer="adam", batch=4, seq_len=128)
    with scope("load", **shape):
        model = load_model(torch, nn, d, layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)
    x = torch.randn(4, 128, d, device="cuda")
    for step in range(3):
        loss = train_step(optimizer, shape, lambda: model(x).float().pow(2).mean())
        print("step %d loss %.4f" % (step, loss.item()), flush=True)


def resnet_training(torch, batch, steps=3, resolution=lambda: 224):
    import torchvision

    model = torchvision.models.resnet50(num_classes=1000).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = torch.nn.CrossEntropyLoss()
    shape = dict(batch=batch, params=sum(p.numel() for p in model.parameters()), precision="fp32", optimizer="sgd")
    for step in range(steps):
        size = resolution()
        images = torch.randn(batch, 3, size, size, device="cuda")
        labels = torch.randint(0, 1000, (batch,), device="cuda")
        loss = train_step(optimizer, shape, lambda: criterion(model(images), labels))
        print("step %d batch %d resolution %d loss %.3f" % (step, batch, size, loss.item()), flush=True)


# ResNet-50 training at 224x224 in fp32 keeps roughly this much per image (measured on PyTorch 2.x).
RESNET50_BYTES_PER_IMAGE = 100 * MIB


def batch(torch, nn):
    size = int(gpu_total(torch) * 1.5 // RESNET50_BYTES_PER_IMAGE)
    size -= size % 64
    print("training ResNet-50 at batch %d" % size, flush=True)
    resnet_training(torch, size)


def contention(torch, nn):
    # A batch that needs about 45 % of an empty GPU; the tenant holds 70 %.
    size = int(gpu_total(torch) * 0.45 // RESNET50_BYTES_PER_IMAGE)
    size -= size % 16
    free, total = torch.cuda.mem_get_info()
    print("training ResNet-50 at batch %d; %.1f of %.1f GiB free at start" % (size, free / GIB, total / GIB), flush=True)
    resnet_training(torch, max(16, size))


def tenant(torch, nn):
    """Holds OOMLENS_TENANT_FRACTION of the GPU. With OOMLENS_TENANT_DELAY_S it first waits that
    long, then grows to it in 2 GiB steps every 0.1 s (a neighbour whose job ramps up)."""
    fraction = float(os.environ.get("OOMLENS_TENANT_FRACTION", "0.7"))
    delay = float(os.environ.get("OOMLENS_TENANT_DELAY_S", "0"))
    target = int(gpu_total(torch) * fraction)
    held = []
    if delay > 0:
        print("tenant: waiting %.0f s, then growing to %.1f GiB" % (delay, target / GIB), flush=True)
        time.sleep(delay)
        while sum(t.numel() for t in held) + 2 * GIB <= target:
            try:
                held.append(torch.empty(2 * GIB, dtype=torch.uint8, device="cuda"))
            except torch.OutOfMemoryError:
                time.sleep(0.1)
                continue
            time.sleep(0.1)
    else:
        held.append(torch.empty(target, dtype=torch.uint8, device="cuda"))
    print("tenant: holding %.1f GiB" % (sum(t.numel() for t in held) / GIB), flush=True)
    while True:
        time.sleep(1)


def gpt(torch, nn, vocab, d, layers, heads, flash=False):
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, d)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            if flash:
                out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.out(out.transpose(1, 2).reshape(b, s, d))
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            attn = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
            return self.out((attn @ v).transpose(1, 2).reshape(b, s, d))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = Attention()
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, tokens):
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x)
            return self.head(x)

    return GPT().cuda().to(torch.bfloat16)


def sequence(torch, nn):
    model = gpt(torch, nn, vocab=32000, d=2048, layers=8, heads=16).eval()
    length = 4096
    with torch.no_grad():
        while True:
            tokens = torch.randint(0, 32000, (1, length), device="cuda")
            with scope("eval", batch=1, seq_len=length, hidden=2048, layers=8, heads=16, precision="bf16"):
                logits = model(tokens)
            print("context %d: logits %s" % (length, tuple(logits.shape)), flush=True)
            del logits
            length *= 2


# A small GPT's training (bf16, flash attention) keeps roughly this much per token.
GPT_BYTES_PER_TOKEN = 800 * 1024


def batch_lm(torch, nn):
    seq = 2048
    size = int(gpu_total(torch) * 1.5 // (seq * GPT_BYTES_PER_TOKEN))
    size -= size % 8
    model = gpt(torch, nn, vocab=32000, d=2048, layers=8, heads=16, flash=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    shape = dict(batch=size, seq_len=seq, hidden=2048, layers=8, heads=16, precision="bf16", optimizer="adamw",
                 flash_attention=True, params=sum(p.numel() for p in model.parameters()))
    print("training a GPT at batch %d x %d tokens" % (size, seq), flush=True)
    for step in range(3):
        tokens = torch.randint(0, 32000, (size, seq + 1), device="cuda")
        loss = train_step(optimizer, shape, lambda: nn.functional.cross_entropy(
            model(tokens[:, :-1]).flatten(0, 1).float(), tokens[:, 1:].flatten()))
        print("step %d loss %.3f" % (step, loss.item()), flush=True)


def contention_growth(torch, nn):
    """Progressive resizing: trains at 160x160 for OOMLENS_RESIZE_AFTER_S seconds, then at 224x224,
    at a batch that fits an empty GPU at 224 (about a third of it). A neighbour that starts in the
    meantime (run.sh's growing tenant) takes the free memory, and the first step at 224 fails."""
    size = int(gpu_total(torch) * 0.3 // RESNET50_BYTES_PER_IMAGE)
    size -= size % 16
    switch = time.monotonic() + float(os.environ.get("OOMLENS_RESIZE_AFTER_S", "10"))
    print("training ResNet-50 at batch %d, 160 then 224 pixels, beside a neighbour" % size, flush=True)
    resnet_training(torch, max(16, size), steps=100000, resolution=lambda: 160 if time.monotonic() < switch else 224)


def fragmentation(torch, nn):
    """An evaluation loop over batches sorted by length (each step's activation a little larger than
    the last) that keeps every step's predictions on the GPU for the end-of-epoch metric. The
    predictions are materialised after the step's activation is freed, so each lands in the segment
    the activation just left and pins it; the next, larger activation fits none of the remainders."""
    width = 8192
    kept = []
    rows = (GIB // 2) // width  # a 1 GiB bf16 activation at the first step
    print("evaluating length-sorted batches, keeping the predictions on the GPU", flush=True)
    for step in range(4000):
        with scope("eval", seq_len=rows, hidden=width, precision="bf16"):
            activation = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
            score = activation.amax(dim=1)
            del activation
            predictions = torch.empty(rows * width * 6 // 10, device="cuda", dtype=torch.bfloat16)
            predictions[: score.numel()].copy_(score)
            kept.append(predictions)
        rows += 2048
        if step % 20 == 0:
            print("step %d rows %d reserved %.1f GiB allocated %.1f GiB" % (
                step, rows, torch.cuda.memory_reserved() / GIB, torch.cuda.memory_allocated() / GIB), flush=True)


def host_oom(torch, nn):
    import numpy as np

    class CachingDataset(torch.utils.data.Dataset):
        """Decodes each sample once and keeps it in host memory (the cache grows in every worker)."""

        def __init__(self):
            self.cache = {}

        def __len__(self):
            return 1 << 20

        def __getitem__(self, index):
            if index not in self.cache:
                self.cache[index] = np.ones((3, 512, 512), dtype=np.float32)  # 3 MiB per sample
            return torch.from_numpy(self.cache[index])

    model = torch.nn.Conv2d(3, 16, 3).cuda()
    loader = torch.utils.data.DataLoader(CachingDataset(), batch_size=32, num_workers=2)
    for step, images in enumerate(loader):
        with scope("data_loading", batch=32):
            out = model(images.cuda(non_blocking=True))
        if step % 20 == 0:
            print("step %d %s" % (step, tuple(out.shape)), flush=True)


JOBS = {
    f.__name__: f
    for f in (
        static_load,
        static_optimizer,
        batch,
        batch_lm,
        sequence,
        contention,
        contention_growth,
        fragmentation,
        host_oom,
        tenant,
    )
}


def main(argv):
    global HOOK
    if len(argv) < 2 or argv[1] not in JOBS:
        print("usage: scenarios.py {%s} [--hook]" % "|".join(JOBS), file=sys.stderr)
        return 2
    torch = cuda_torch()
    if torch is None:
        return 3
    nn = torch.nn
    torch.manual_seed(0)
    if "--hook" in argv[2:]:
        sys.path.insert(0, os.path.join(HERE, "..", "hooks", "python"))
        import oomlens_hook

        HOOK = oomlens_hook
        HOOK.install(record_history=True, max_entries=20_000, labels={"scenario": argv[1]})
    print("%s: torch %s on %s" % (argv[1], torch.__version__, torch.cuda.get_device_name(0)), flush=True)
    JOBS[argv[1]](torch, nn)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
