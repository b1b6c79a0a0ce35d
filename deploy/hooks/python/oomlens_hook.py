"""Report CUDA out-of-memory errors of a job to the local oomlens agent.

Standard library only; torch is used when the job already has it (never imported eagerly).
The agent listens on a Unix socket (``OOMLENS_HOOK_SOCKET``, default ``/run/oomlens/hook.sock``)
and takes one JSON line per report (protocol v1, see docs/hook-protocol.md).

Three ways to use it, all of which re-raise the original exception after reporting::

    import oomlens_hook

    # 1. Around the code that may fail, with the phase and the job's shape.
    with oomlens_hook.report_oom(phase="forward", batch=32, seq_len=4096, precision="bf16"):
        loss = model(batch)

    # 2. As a decorator.
    @oomlens_hook.report_oom(phase="optimizer_step", optimizer="adamw", zero_stage=2)
    def step(): ...

    # 3. For anything that escapes the program.
    oomlens_hook.install_excepthook(params=7_000_000_000, tp=2, dp=8)

Reporting never raises and waits at most ``timeout`` seconds (default 0.5) for the agent. A report
is sent once per exception object, however many of these wrap it.
"""

import functools
import json
import os
import re
import socket
import sys

__all__ = [
    "DEFAULT_SOCKET",
    "ENV_SOCKET",
    "JOB_FIELDS",
    "PHASES",
    "build_report",
    "install_excepthook",
    "is_cuda_oom",
    "ping",
    "report_oom",
    "send_report",
]

PROTOCOL_VERSION = 1
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


def build_report(exc, phase=None, job=None, labels=None, gpu_index=None):
    """The v1 report (a dict) for exception ``exc``; never raises for odd input."""
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
        report["gpu_index"] = int(gpu_index)
    job = _clean_job(job)
    if job:
        report["job"] = job
    labels = _clean_labels(labels)
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


def send_report(exc, phase=None, job=None, labels=None, gpu_index=None, socket_path=None, timeout=DEFAULT_TIMEOUT_S):
    """Reports ``exc`` once; returns the agent's reply (``{"ok": True, "event_id": ...}`` or
    ``{"ok": False, "error": ...}``) or None when nothing was sent. Never raises."""
    try:
        if getattr(exc, _REPORTED_ATTR, False):
            return None
        try:
            setattr(exc, _REPORTED_ATTR, True)
        except Exception:  # noqa: BLE001 - exceptions without __dict__ may be reported twice
            pass
        line = json.dumps(build_report(exc, phase, job, labels, gpu_index), separators=(",", ":"))
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
    (JOB_FIELDS); ``labels`` (a dict) adds ``job.<key>`` labels (team, model, run id, rank...).
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

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and is_cuda_oom(exc):
            self.last_reply = send_report(
                exc, self.phase, self.job, self.labels, self.gpu_index, self.socket_path, self.timeout
            )
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
