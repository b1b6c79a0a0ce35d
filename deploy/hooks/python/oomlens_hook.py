"""Report CUDA out-of-memory errors of a job to the local oomlens agent.

Standard library only; torch is used when the job already has it (never imported eagerly).
The agent listens on a Unix socket (``OOMLENS_HOOK_SOCKET``, default ``/run/oomlens/hook.sock``)
and takes one JSON line per report (protocol v2, see docs/hook-protocol.md).

The simplest use, once at start-up::

    import oomlens_hook
    oomlens_hook.install(record_history=True, params=7_000_000_000, tp=2, dp=8)

``install`` attaches PyTorch's out-of-memory observer, so at the failure the allocator's state is
summarised in the job's process (segments, the largest free block, free blocks by size, the code
holding the most memory; a few KiB, never the raw snapshot), and reports uncaught OOMs. Scopes
add what only the code knows, and all of them re-raise the original exception after reporting::

    # Around the code that may fail, with the phase and the job's shape.
    with oomlens_hook.report_oom(phase="forward", batch=32, seq_len=4096, precision="bf16"):
        loss = model(batch)

    # As a decorator.
    @oomlens_hook.report_oom(phase="optimizer_step", optimizer="adamw", zero_stage=2)
    def step(): ...

    # Only the excepthook (no observer, no history).
    oomlens_hook.install_excepthook(params=7_000_000_000, tp=2, dp=8)

Nested scopes merge: an inner ``report_oom(phase="backward")`` inside an outer
``report_oom(batch=16, labels={...})`` reports the phase, the batch and the labels (inner values
win). Rank labels (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``SLURM_JOB_ID``,
``TORCHELASTIC_RUN_ID``) are added from the environment. The GPU is sent by UUID, which the agent
maps to its own GPU numbering (a container's CUDA index 0 is not the node's GPU 0).

Reporting never raises and waits at most ``timeout`` seconds (default 0.5) for the agent. A report
is sent once per exception object, however many of these wrap it.
"""

import contextvars
import functools
import json
import os
import re
import socket
import sys
import threading
import time

__all__ = [
    "DEFAULT_SOCKET",
    "ENV_SOCKET",
    "FREE_BLOCK_BOUNDS",
    "JOB_FIELDS",
    "PHASES",
    "RANK_LABELS",
    "build_report",
    "install",
    "install_excepthook",
    "is_cuda_oom",
    "ping",
    "report_oom",
    "send_report",
    "summarize_snapshot",
]

PROTOCOL_VERSION = 2
DEFAULT_SOCKET = "/run/oomlens/hook.sock"
ENV_SOCKET = "OOMLENS_HOOK_SOCKET"
DEFAULT_TIMEOUT_S = 0.5
MAX_MESSAGE_CHARS = 16 * 1024
MAX_REPLY_BYTES = 64 * 1024

PHASES = (
    "load",
    "optimizer_init",
    "forward",
    "backward",
    "optimizer_step",
    "eval",
    "inference",
    "data_loading",
    "unknown",
)
# Job-shape keys the agent accepts, with the type each must have.
JOB_FIELDS = {
    "params": int,
    "batch": int,
    "seq_len": int,
    "hidden": int,
    "layers": int,
    "heads": int,
    "precision": str,
    "optimizer": str,
    "zero_stage": int,
    "tp": int,
    "pp": int,
    "dp": int,
    "activation_checkpointing": bool,
    "flash_attention": bool,
}
# torch.cuda.memory_stats() keys the agent uses (others are ignored by it, so not sent).
MEMORY_STATS_KEYS = (
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
    "active_bytes.all.current",
    "active_bytes.all.peak",
    "inactive_split_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
)

_UNITS = {
    "b": 1,
    "bytes": 1,
    "kib": 1 << 10,
    "kb": 1 << 10,
    "mib": 1 << 20,
    "mb": 1 << 20,
    "gib": 1 << 30,
    "gb": 1 << 30,
    "tib": 1 << 40,
    "tb": 1 << 40,
}
_SIZE = r"([0-9][0-9,]*(?:\.[0-9]+)?)\s*(TiB|GiB|MiB|KiB|TB|GB|MB|KB|bytes|B)\b"
_REQUESTED = re.compile(r"Tried to allocate " + _SIZE)
_PROCESS_USED = re.compile(r"this process has " + _SIZE + r" memory in use")
_GPU = re.compile(r"\bGPU (\d+)\b")
_REPORTED_ATTR = "_oomlens_reported"

# Environment variables added as labels (label key: variable), when set.
RANK_LABELS = {
    "rank": "RANK",
    "local_rank": "LOCAL_RANK",
    "world_size": "WORLD_SIZE",
    "slurm_job_id": "SLURM_JOB_ID",
    "torchelastic_run_id": "TORCHELASTIC_RUN_ID",
}
# Upper bounds (exclusive, bytes) of the free-block histogram's buckets; the last bucket is the rest.
FREE_BLOCK_BOUNDS = (1 << 20, 8 << 20, 64 << 20, 512 << 20, 4 << 30)
MAX_SITES = 8
MAX_SITE_CHARS = 160
# How long an allocator summary taken by the OOM observer waits for its exception, seconds.
OBSERVED_TTL_S = 30.0
# Frames inside these paths are library code, not the job's own: the innermost other frame is
# the allocation site.
_LIBRARY_PARTS = ("/torch/", "/site-packages/", "/dist-packages/", "/lib/python", "<frozen", "<string>")

# The merged context of the enclosing report_oom scopes (phase, job, labels, gpu_index).
_SCOPE = contextvars.ContextVar("oomlens_hook_scope", default=None)
# Allocator summaries taken by the OOM observer, newest last: (monotonic time, device, summary).
_OBSERVED = []
_OBSERVED_LOCK = threading.Lock()


def _warn(text):
    if not os.environ.get("OOMLENS_HOOK_QUIET"):
        try:
            sys.stderr.write("oomlens_hook: %s\n" % text)
        except Exception:  # noqa: BLE001 - stderr may be closed; reporting never raises
            pass


def _torch():
    """The torch module if the job has imported it (or it imports), else None."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        import importlib

        return importlib.import_module("torch")
    except Exception:  # noqa: BLE001 - torch missing or broken: report without it
        return None


def _bytes(number, unit):
    return int(float(number.replace(",", "")) * _UNITS[unit.lower()])


def is_cuda_oom(exc):
    """True for torch.cuda.OutOfMemoryError / torch.OutOfMemoryError and RuntimeErrors whose text
    says "CUDA out of memory" (older PyTorch)."""
    if exc is None:
        return False
    torch = sys.modules.get("torch")
    if torch is not None:
        classes = []
        for owner, name in ((torch, "OutOfMemoryError"), (getattr(torch, "cuda", None), "OutOfMemoryError")):
            cls = getattr(owner, name, None) if owner is not None else None
            if isinstance(cls, type):
                classes.append(cls)
        if classes and isinstance(exc, tuple(classes)):
            return True
    if type(exc).__name__ == "OutOfMemoryError" and "out of memory" in str(exc).lower():
        return True
    return isinstance(exc, RuntimeError) and "CUDA out of memory" in str(exc)


def _clean_job(job):
    out = {}
    for key, value in (job or {}).items():
        want = JOB_FIELDS.get(key)
        if want is None:
            _warn("ignoring unknown job field %r (known: %s)" % (key, ", ".join(JOB_FIELDS)))
            continue
        if value is None:
            continue
        try:
            if want is bool:
                value = bool(value)
            elif want is int:
                if isinstance(value, bool) or int(value) != value or value < 0:
                    raise ValueError(value)
                value = int(value)
            else:
                value = str(value)[:64]
        except (TypeError, ValueError):
            _warn("ignoring job field %r: %r is not a %s" % (key, value, want.__name__))
            continue
        out[key] = value
    return out


def _clean_labels(labels):
    out = {}
    for key, value in list((labels or {}).items())[:16]:
        key = str(key)
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key):
            _warn("ignoring label %r: keys are 1-64 characters of [A-Za-z0-9_.-]" % key)
            continue
        if isinstance(value, (bool, int)):
            out[key] = value
        else:
            out[key] = str(value)[:256]
    return out


def _rank_labels():
    out = {}
    for key, var in RANK_LABELS.items():
        value = os.environ.get(var)
        if value:
            out[key] = value
    return out


def _gpu_uuid(cuda, index):
    """The NVML-style UUID (``GPU-…`` / ``MIG-…``) of CUDA device ``index``, or None."""
    try:
        uuid = getattr(cuda.get_device_properties(index), "uuid", None)
    except Exception:  # noqa: BLE001 - old torch, no CUDA: no uuid
        return None
    if uuid is None:
        return None
    text = str(uuid)
    if not text:
        return None
    return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text


def _innermost_user_frame(frames):
    """The innermost frame outside library code (frames come innermost first), else the innermost."""
    if not frames:
        return None
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if filename and not any(part in filename for part in _LIBRARY_PARTS):
            return frame
    return frames[0]


def _block_frames(block):
    """The stack frames recorded for a block: ``frames`` (torch >= 2.1) or its last ``history``
    entry's (torch 2.0)."""
    frames = block.get("frames")
    if frames:
        return frames
    history = block.get("history") or []
    if history and isinstance(history[-1], dict):
        return history[-1].get("frames") or []
    return []


def summarize_snapshot(snapshot, device=None, requested_bytes=None, top_sites=MAX_SITES):
    """Summarises ``torch.cuda.memory._snapshot()`` for ``device`` (every device when None): a
    small dict (see docs/hook-protocol.md, "allocator"), or None when the snapshot has no segment
    of that device. Never raises for odd input; unknown block states count as neither free nor
    allocated."""
    try:
        segments = [s for s in (snapshot or {}).get("segments", []) if isinstance(s, dict)]
        if device is not None:
            segments = [s for s in segments if s.get("device", device) == device]
        if not segments:
            return None
        reserved = allocated = cached_free = largest_free = free_blocks = 0
        hist = [0] * (len(FREE_BLOCK_BOUNDS) + 1)
        sites = {}
        recorded = False
        for seg in segments:
            reserved += int(seg.get("total_size", 0))
            for block in seg.get("blocks", []) or []:
                size = int(block.get("size", 0))
                state = block.get("state", "")
                if state == "inactive":
                    cached_free += size
                    free_blocks += 1
                    largest_free = max(largest_free, size)
                    hist[sum(1 for bound in FREE_BLOCK_BOUNDS if size >= bound)] += 1
                elif state.startswith("active"):
                    allocated += size
                    frame = _innermost_user_frame(_block_frames(block))
                    if frame is None:
                        continue
                    recorded = True
                    site = "%s:%s" % (frame.get("filename", "?"), frame.get("line", "?"))
                    key = (site[-MAX_SITE_CHARS:], str(frame.get("name", "?"))[:MAX_SITE_CHARS])
                    bytes_, blocks = sites.get(key, (0, 0))
                    sites[key] = (bytes_ + size, blocks + 1)
        top = sorted(sites.items(), key=lambda kv: (-kv[1][0], kv[0]))[: max(0, int(top_sites))]
        summary = {
            "segments": len(segments),
            "reserved_bytes": reserved,
            "allocated_bytes": allocated,
            "cached_free_bytes": cached_free,
            "largest_free_block_bytes": largest_free,
            "free_blocks": free_blocks,
            "free_block_histogram": hist,
            "history_recorded": recorded,
            "sites": [
                {"site": site, "function": function, "bytes": b, "blocks": n}
                for (site, function), (b, n) in top
            ],
        }
        if device is not None:
            summary["device"] = int(device)
        if requested_bytes is not None:
            summary["requested_bytes"] = int(requested_bytes)
        return summary
    except Exception as e:  # noqa: BLE001 - a snapshot of an unexpected shape: no summary
        _warn("could not summarise the allocator snapshot: %s" % e)
        return None


def _take_summary(cuda, device, requested_bytes=None):
    """Snapshots the allocator now and summarises it for ``device``; None where torch cannot."""
    memory = getattr(cuda, "memory", None)
    snapshot = getattr(memory, "_snapshot", None) if memory is not None else None
    if snapshot is None:
        return None
    try:
        taken = snapshot()
    except Exception as e:  # noqa: BLE001 - no CUDA context, old torch
        _warn("no allocator snapshot: %s" % e)
        return None
    return summarize_snapshot(taken, device, requested_bytes)


def _observed_summary(device):
    """The newest summary the OOM observer took for ``device`` within OBSERVED_TTL_S (consumed)."""
    now = time.monotonic()
    with _OBSERVED_LOCK:
        _OBSERVED[:] = [o for o in _OBSERVED if now - o[0] <= OBSERVED_TTL_S]
        for i in range(len(_OBSERVED) - 1, -1, -1):
            if device is None or _OBSERVED[i][1] == device:
                return _OBSERVED.pop(i)[2]
    return None


# install()'s process-wide context (phase, job, labels): the base every report merges over.
_BASE = {}


def _merge_context(outer, phase=None, job=None, labels=None, gpu_index=None):
    """``outer`` (a scope context or None) with these values on top (the inner ones win)."""
    outer = outer or {}
    merged = {
        "phase": phase if phase is not None else outer.get("phase"),
        "job": dict(outer.get("job") or {}, **(job or {})),
        "labels": dict(outer.get("labels") or {}, **(labels or {})),
        "gpu_index": gpu_index if gpu_index is not None else outer.get("gpu_index"),
    }
    return merged


def build_report(exc, phase=None, job=None, labels=None, gpu_index=None, allocator=None):
    """The v2 report (a dict) for exception ``exc``; never raises for odd input. The enclosing
    ``report_oom`` scopes' context is merged under these arguments. ``allocator`` is a
    summary from :func:`summarize_snapshot` (default: the OOM observer's, or a snapshot now)."""
    scope = _SCOPE.get() or {}
    ctx = _merge_context(_BASE, scope.get("phase"), scope.get("job"), scope.get("labels"), scope.get("gpu_index"))
    ctx = _merge_context(ctx, phase, job, labels, gpu_index)
    phase, job, labels, gpu_index = ctx["phase"], ctx["job"], ctx["labels"], ctx["gpu_index"]
    message = "%s.%s: %s" % (type(exc).__module__, type(exc).__qualname__, exc)
    report = {
        "v": PROTOCOL_VERSION,
        "type": "oom",
        "pid": os.getpid(),
        "framework": "pytorch",
        "message": message[:MAX_MESSAGE_CHARS],
    }
    if phase is not None:
        if phase in PHASES:
            report["phase"] = phase
        else:
            _warn("ignoring unknown phase %r (one of %s)" % (phase, ", ".join(PHASES)))
    text = str(exc)
    found = _REQUESTED.search(text)
    if found:
        report["requested_bytes"] = _bytes(*found.groups())
    found = _PROCESS_USED.search(text)
    if found:
        report["process_used_bytes"] = _bytes(*found.groups())
    if gpu_index is None:
        found = _GPU.search(text)
        if found:
            gpu_index = int(found.group(1))
    torch = _torch() if is_cuda_oom(exc) else sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is not None:
        try:
            if gpu_index is None:
                gpu_index = int(cuda.current_device())
        except Exception:  # noqa: BLE001 - no CUDA context: leave it unknown
            pass
        try:
            stats = cuda.memory_stats(gpu_index) if gpu_index is not None else cuda.memory_stats()
            picked = {k: int(stats[k]) for k in MEMORY_STATS_KEYS if k in stats and stats[k] is not None}
            if picked:
                report["memory_stats"] = picked
        except Exception:  # noqa: BLE001
            pass
        try:
            free, total = cuda.mem_get_info(gpu_index) if gpu_index is not None else cuda.mem_get_info()
            report["mem_get_info"] = {"free_bytes": int(free), "total_bytes": int(total)}
        except Exception:  # noqa: BLE001
            pass
        if gpu_index is not None:
            uuid = _gpu_uuid(cuda, gpu_index)
            if uuid:
                report["gpu_uuid"] = uuid[:MAX_SITE_CHARS]
        if allocator is None and is_cuda_oom(exc):
            allocator = _observed_summary(gpu_index) or _take_summary(
                cuda, gpu_index, report.get("requested_bytes")
            )
    if allocator:
        report["allocator"] = allocator
    if gpu_index is not None:
        report["gpu_index"] = int(gpu_index)
    job = _clean_job(job)
    if job:
        report["job"] = job
    labels = _clean_labels(dict(_rank_labels(), **(labels or {})))
    if labels:
        report["labels"] = labels
    return report


def _socket_path(socket_path):
    return socket_path or os.environ.get(ENV_SOCKET) or DEFAULT_SOCKET


def _exchange(line, socket_path, timeout):
    """Sends one line, returns the decoded reply (dict) or None; never raises."""
    path = _socket_path(socket_path)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(line.encode("utf-8") + b"\n")
            reply = b""
            while not reply.endswith(b"\n") and len(reply) < MAX_REPLY_BYTES:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
        return json.loads(reply.decode("utf-8", "replace").splitlines()[0])
    except Exception as e:  # noqa: BLE001 - the agent may be absent; never raise
        _warn("could not reach the oomlens agent at %s: %s" % (path, e))
        return None


def send_report(exc, phase=None, job=None, labels=None, gpu_index=None, socket_path=None, timeout=DEFAULT_TIMEOUT_S,
                allocator=None):
    """Reports ``exc`` once; returns the agent's reply (``{"ok": True, "event_id": ...}`` or
    ``{"ok": False, "error": ...}``) or None when nothing was sent. Never raises."""
    try:
        if getattr(exc, _REPORTED_ATTR, False):
            return None
        try:
            setattr(exc, _REPORTED_ATTR, True)
        except Exception:  # noqa: BLE001 - exceptions without __dict__ may be reported twice
            pass
        line = json.dumps(build_report(exc, phase, job, labels, gpu_index, allocator), separators=(",", ":"))
        reply = _exchange(line, socket_path, timeout)
        if isinstance(reply, dict) and not reply.get("ok"):
            _warn("the agent refused the report: %s" % reply.get("error"))
        return reply
    except Exception as e:  # noqa: BLE001
        _warn("could not build the report: %s" % e)
        return None


def ping(socket_path=None, timeout=DEFAULT_TIMEOUT_S):
    """True when an agent answers on the socket."""
    reply = _exchange(json.dumps({"v": PROTOCOL_VERSION, "type": "ping"}), socket_path, timeout)
    return isinstance(reply, dict) and reply.get("ok") is True


class report_oom:
    """Context manager and decorator: reports a CUDA OOM raised inside, then re-raises it.

    ``phase`` is one of PHASES; ``job`` (a dict) and keyword arguments give the job's shape
    (JOB_FIELDS); ``labels`` (a dict) adds ``job.<key>`` labels (team, model, run id...). Scopes
    nest: the report carries the merged context of every enclosing scope (inner values win).
    """

    def __init__(self, phase=None, job=None, labels=None, gpu_index=None, socket_path=None,
                 timeout=DEFAULT_TIMEOUT_S, **shape):
        self.phase = phase
        self.job = dict(job or {}, **shape)
        self.labels = labels
        self.gpu_index = gpu_index
        self.socket_path = socket_path
        self.timeout = timeout
        self.last_reply = None
        self._tokens = []

    def __enter__(self):
        merged = _merge_context(_SCOPE.get(), self.phase, self.job, self.labels, self.gpu_index)
        self._tokens.append(_SCOPE.set(merged))
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc is not None and is_cuda_oom(exc):
                # The merged context is the current one: build_report reads it.
                self.last_reply = send_report(exc, socket_path=self.socket_path, timeout=self.timeout)
        finally:
            if self._tokens:
                _SCOPE.reset(self._tokens.pop())
        return False  # never swallow the exception

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapper


def install_excepthook(phase=None, job=None, labels=None, gpu_index=None, socket_path=None,
                       timeout=DEFAULT_TIMEOUT_S, **shape):
    """Reports an uncaught CUDA OOM before the previous ``sys.excepthook`` prints it. Returns the
    previous hook."""
    previous = sys.excepthook
    job = dict(job or {}, **shape)

    def hook(exc_type, exc, tb):
        try:
            if is_cuda_oom(exc):
                send_report(exc, phase, job, labels, gpu_index, socket_path, timeout)
        finally:
            previous(exc_type, exc, tb)

    sys.excepthook = hook
    return previous


def _observer(cuda):
    """The function PyTorch calls at an OOM (device, requested, device total, device free): it
    summarises the allocator while the failed state is intact, for the report that follows."""

    def observe(device, alloc, device_allocated, device_free):
        try:
            summary = _take_summary(cuda, int(device), int(alloc))
            if summary is not None:
                with _OBSERVED_LOCK:
                    _OBSERVED.append((time.monotonic(), int(device), summary))
                    del _OBSERVED[:-8]
        except Exception as e:  # noqa: BLE001 - never raise into the allocator
            _warn("OOM observer failed: %s" % e)

    return observe


def install(record_history=False, max_entries=100_000, excepthook=True, phase=None, job=None, labels=None,
            socket_path=None, timeout=DEFAULT_TIMEOUT_S, **shape):
    """Sets up reporting for the whole process; returns what it could set up (a dict of booleans:
    ``observer``, ``history``, ``excepthook``). Never raises.

    ``phase``, ``job`` (and keyword arguments: the job's shape) and ``labels`` are the process's
    context: every report -- the excepthook's and each ``report_oom`` scope's -- carries them
    under its own values (a scope's values win).

    * ``observer``: PyTorch's out-of-memory observer summarises the allocator at each OOM.
    * ``history`` (with ``record_history``): the allocator records the stack of each allocation
      (at most ``max_entries`` entries), so the summary names the code holding the memory. This
      costs a little time per allocation; leave it off where that matters.
    * ``excepthook``: uncaught CUDA OOMs are reported (with ``phase``, ``job``, ``labels``).

    Without torch or CUDA the observer and history are skipped (reported False)."""
    done = {"observer": False, "history": False, "excepthook": False}
    _BASE.clear()
    _BASE.update(_merge_context(None, phase, dict(job or {}, **shape), labels))
    if excepthook:
        install_excepthook(socket_path=socket_path, timeout=timeout)
        done["excepthook"] = True
    torch = _torch()
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        available = bool(cuda is not None and cuda.is_available())
    except Exception:  # noqa: BLE001
        available = False
    if not available:
        return done
    attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    if attach is not None:
        try:
            attach(_observer(cuda))
            done["observer"] = True
        except Exception as e:  # noqa: BLE001
            _warn("cannot attach the OOM observer: %s" % e)
    if record_history:
        record = getattr(getattr(cuda, "memory", None), "_record_memory_history", None)
        if record is not None:
            try:
                try:
                    record(enabled="all", context="alloc", stacks="python", max_entries=int(max_entries))
                except TypeError:  # torch 2.0: record_memory_history(enabled, record_context, trace_alloc_max_entries)
                    try:
                        record(True, trace_alloc_max_entries=int(max_entries))
                    except TypeError:  # torch 1.13: (enabled, device), the live blocks' stacks only
                        record(True)
                done["history"] = True
            except Exception as e:  # noqa: BLE001
                _warn("cannot record allocation history: %s" % e)
    return done
