"""Protocol test of oomlens_hook.py against a real agent hook listener (no torch needed; with a
real torch importable -- Debian's CPU-only python3-torch in CI -- the RealTorch tests run too).

Starts ``oomlens-agent hook-listen --socket <tmp> --print`` (binary: $OOMLENS_AGENT_BIN, else
target/debug/oomlens-agent, built with cargo when missing) and checks the round trip: the event
the agent accepted has the reported fields, bad lines get error replies, the original exception
is always re-raised, and an absent agent costs no more than the timeout.

    python3 -m unittest deploy/hooks/python/test_oomlens_hook.py -v
"""

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, HERE)

import oomlens_hook  # noqa: E402

OOM_TEXT = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.11 GiB of which "
    "1.50 GiB is free. Including non-PyTorch memory, this process has 77.60 GiB memory in use."
)


def agent_binary():
    explicit = os.environ.get("OOMLENS_AGENT_BIN")
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    path = os.path.join(target, "debug", "oomlens-agent")
    if not os.path.exists(path):
        subprocess.run(["cargo", "build", "-q", "-p", "oomlens-agent", "--bin", "oomlens-agent"], cwd=ROOT, check=True)
    return path


class FakeOomError(RuntimeError):
    pass


def _import_real_torch():
    try:
        import torch  # noqa: F401

        return torch
    except Exception:  # noqa: BLE001 - not installed (PyPI's torch wheel pulls GBs of CUDA packages;
        return None  # Debian's python3-torch is CPU-only and small)


# Imported once: a module cannot be imported again after sys.modules lost it, so the tests that
# stand in a fake torch (or none) put this one back afterwards.
REAL_TORCH = _import_real_torch()


def restore_torch():
    oomlens_hook._BASE.clear()  # install()'s process context
    if REAL_TORCH is None:
        sys.modules.pop("torch", None)
    else:
        sys.modules["torch"] = REAL_TORCH


def hide_torch():
    """As if torch were not installed: `import torch` raises ImportError."""
    sys.modules["torch"] = None


def real_oom_error():
    """The OOM exception class of the real torch (torch.OutOfMemoryError from 2.5, torch.cuda's before)."""
    return getattr(REAL_TORCH, "OutOfMemoryError", None) or REAL_TORCH.cuda.OutOfMemoryError


def fake_torch():
    """A stand-in `torch` module with the calls the helper uses."""
    torch = types.ModuleType("torch")
    torch.OutOfMemoryError = FakeOomError
    cuda = types.ModuleType("torch.cuda")
    cuda.OutOfMemoryError = FakeOomError
    cuda.current_device = lambda: 1
    cuda.memory_stats = lambda device=None: {
        "allocated_bytes.all.current": 70 << 30,
        "reserved_bytes.all.current": 75 << 30,
        "allocated_bytes.all.peak": 72 << 30,
        "num_alloc_retries": 4,
        "num_ooms": 1,
        "unrelated.key": 9,
    }
    cuda.mem_get_info = lambda device=None: (1 << 30, 80 << 30)
    torch.cuda = cuda
    return torch


def snapshot(device=0):
    """A snapshot in torch.cuda.memory._snapshot()'s documented format (torch >= 2.1: frames on
    the block, innermost first)."""
    train = [{"filename": "/usr/lib/python3/site-packages/torch/nn/functional.py", "line": 2000, "name": "linear"},
             {"filename": "/job/train.py", "line": 88, "name": "forward"}]
    load = [{"filename": "/job/train.py", "line": 12, "name": "load_state_dict"}]
    return {
        "segments": [
            {"device": device, "address": 0, "total_size": 40 << 30, "segment_type": "large",
             "blocks": [
                 {"size": 30 << 30, "state": "active_allocated", "frames": load},
                 {"size": 6 << 30, "state": "active_allocated", "frames": train},
                 {"size": 3 << 30, "state": "inactive"},
                 {"size": 1 << 30, "state": "inactive"},
             ]},
            {"device": device, "address": 1 << 40, "total_size": 2 << 20, "segment_type": "small",
             "blocks": [
                 {"size": 1 << 20, "state": "active_allocated", "frames": train},
                 {"size": 512 << 10, "state": "inactive"},
                 {"size": 512 << 10, "state": "active_pending_free", "frames": []},
             ]},
            {"device": device + 1, "address": 0, "total_size": 1 << 30, "blocks": [{"size": 1 << 30, "state": "inactive"}]},
        ],
        "device_traces": [],
    }


class SummaryTest(unittest.TestCase):
    """summarize_snapshot on snapshot structures in the documented formats (no torch needed)."""

    def test_free_blocks_sites_and_totals(self):
        s = oomlens_hook.summarize_snapshot(snapshot(), device=0, requested_bytes=5 << 30)
        self.assertEqual(s["segments"], 2)
        self.assertEqual(s["reserved_bytes"], (40 << 30) + (2 << 20))
        self.assertEqual(s["cached_free_bytes"], (4 << 30) + (512 << 10))
        self.assertEqual(s["largest_free_block_bytes"], 3 << 30)
        self.assertEqual(s["free_blocks"], 3)
        # < 1 MiB, < 8 MiB, < 64 MiB, < 512 MiB, < 4 GiB, rest
        self.assertEqual(s["free_block_histogram"], [1, 0, 0, 0, 2, 0])
        self.assertEqual(s["requested_bytes"], 5 << 30)
        self.assertTrue(s["history_recorded"])
        sites = [(x["site"], x["function"], x["bytes"], x["blocks"]) for x in s["sites"]]
        self.assertEqual(sites[0], ("/job/train.py:12", "load_state_dict", 30 << 30, 1))
        # The innermost frame outside torch is the site; both blocks of train.py:88 add up.
        self.assertEqual(sites[1], ("/job/train.py:88", "forward", (6 << 30) + (1 << 20), 2))
        self.assertLess(len(json.dumps(s)), 4096, "a few KiB at most")

    def test_torch_2_0_history_and_bad_input(self):
        snap = {"segments": [{"device": 0, "total_size": 100, "blocks": [
            {"size": 60, "state": "active_allocated",
             "history": [{"addr": 0, "real_size": 60, "frames": [{"filename": "a.py", "line": 3, "name": "f"}]}]},
            {"size": 40, "state": "inactive"}]}]}
        s = oomlens_hook.summarize_snapshot(snap, device=0)
        self.assertEqual(s["sites"], [{"site": "a.py:3", "function": "f", "bytes": 60, "blocks": 1}])
        self.assertIsNone(oomlens_hook.summarize_snapshot(snap, device=3), "no segment of that device")
        self.assertIsNone(oomlens_hook.summarize_snapshot(None))
        os.environ["OOMLENS_HOOK_QUIET"] = "1"
        self.assertIsNone(oomlens_hook.summarize_snapshot({"segments": [{"blocks": [{"size": "x"}]}]}))
        many = {"segments": [{"device": 0, "total_size": 1, "blocks": [
            {"size": i + 1, "state": "active_allocated", "frames": [{"filename": "f%d.py" % i, "line": 1, "name": "g"}]}
            for i in range(50)]}]}
        self.assertEqual(len(oomlens_hook.summarize_snapshot(many)["sites"]), oomlens_hook.MAX_SITES)


@unittest.skipUnless(REAL_TORCH, "torch is not installed in this Python (Debian: apt install python3-torch)")
class RealTorchTest(unittest.TestCase):
    """With a real torch (CPU-only or on a machine without a GPU) everything degrades cleanly."""

    def tearDown(self):
        restore_torch()

    def test_install_and_reports_degrade_without_cuda(self):
        torch = REAL_TORCH
        restore_torch()
        previous = sys.excepthook
        try:
            done = oomlens_hook.install(record_history=True)
        finally:
            sys.excepthook = previous
        if not torch.cuda.is_available():
            self.assertEqual(done, {"observer": False, "history": False, "excepthook": True})
        os.environ["OOMLENS_HOOK_QUIET"] = "1"
        error = real_oom_error()("CUDA out of memory. Tried to allocate 2.00 GiB")
        self.assertTrue(oomlens_hook.is_cuda_oom(error))
        report = oomlens_hook.build_report(error)
        self.assertEqual(report["requested_bytes"], 2 << 30)
        self.assertEqual(report["v"], 2)
        self.assertIn("OutOfMemoryError: CUDA out of memory", report["message"])
        if not torch.cuda.is_available():
            self.assertNotIn("allocator", report)
            self.assertNotIn("mem_get_info", report)
            self.assertIsNone(oomlens_hook._take_summary(torch.cuda, 0))
        # The real snapshot call without CUDA is refused by torch and summarised as nothing.
        self.assertIsNone(oomlens_hook._take_summary(torch.cuda, None, 1 << 20))


class HookProtocolTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="oomlens-hook-")
        cls.sock = os.path.join(cls.tmp, "hook.sock")
        env = dict(os.environ, OOMLENS_LOG="warn")
        cls.agent = subprocess.Popen(
            [agent_binary(), "hook-listen", "--socket", cls.sock, "--print"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        cls.events = queue.Queue()
        threading.Thread(target=cls._pump, daemon=True).start()
        os.environ["OOMLENS_HOOK_QUIET"] = "1"
        deadline = time.monotonic() + 20
        while not oomlens_hook.ping(cls.sock):
            if cls.agent.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("hook listener did not start: %s" % cls.agent.stderr.read())
            time.sleep(0.05)
        os.environ[oomlens_hook.ENV_SOCKET] = cls.sock

    @classmethod
    def _pump(cls):
        for line in cls.agent.stdout:
            cls.events.put(json.loads(line))

    @classmethod
    def tearDownClass(cls):
        os.environ.pop(oomlens_hook.ENV_SOCKET, None)
        cls.agent.send_signal(signal.SIGTERM)
        try:
            cls.agent.wait(timeout=10)
        finally:
            if cls.agent.poll() is None:
                cls.agent.kill()
        socket_left = os.path.exists(cls.sock)
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert not socket_left, "the agent must remove its socket on shutdown"

    def tearDown(self):
        restore_torch()

    def next_event(self):
        return self.events.get(timeout=5)

    def test_context_manager_reports_and_reraises(self):
        scope = oomlens_hook.report_oom(
            phase="forward", batch=32, seq_len=4096, precision="bf16", flash_attention=True,
            labels={"team": "nlp", "rank": 3},
        )
        with self.assertRaises(RuntimeError) as raised:
            with scope:
                raise RuntimeError(OOM_TEXT)
        self.assertIn("CUDA out of memory", str(raised.exception))
        self.assertTrue(scope.last_reply["ok"], scope.last_reply)
        event = self.next_event()
        self.assertEqual(event["event_id"], scope.last_reply["event_id"])
        self.assertEqual(event["source"], "hook")
        self.assertEqual(event["kind"], "cuda_oom")
        self.assertEqual(event["pid"], os.getpid())
        self.assertEqual(event["phase"], "forward")
        self.assertEqual(event["gpu_index"], 3)
        self.assertEqual(event["requested_bytes"], 2 << 30)
        self.assertEqual(event["process_used_bytes"], int(77.60 * (1 << 30)))
        self.assertEqual(event["job"]["batch"], 32)
        self.assertEqual(event["job"]["seq_len"], 4096)
        self.assertEqual(event["job"]["precision"], "bf16")
        self.assertIs(event["job"]["flash_attention"], True)
        self.assertIsNone(event["job"]["params"])
        self.assertEqual(event["labels"]["job.team"], "nlp")
        self.assertEqual(event["labels"]["job.rank"], "3")
        self.assertIn("cmdline", event["labels"])
        self.assertIn("CUDA out of memory", event["message"])

    def test_decorator_with_torch_stats(self):
        sys.modules["torch"] = fake_torch()

        @oomlens_hook.report_oom(phase="backward", job={"params": 7_000_000_000, "zero_stage": 2, "tp": 2})
        def step():
            raise FakeOomError("CUDA out of memory. Tried to allocate 512.00 MiB")

        with self.assertRaises(FakeOomError):
            step()
        event = self.next_event()
        self.assertEqual(event["phase"], "backward")
        self.assertEqual(event["gpu_index"], 1)
        self.assertEqual(event["allocated_bytes"], 70 << 30)
        self.assertEqual(event["reserved_bytes"], 75 << 30)
        self.assertEqual(event["free_bytes"], 1 << 30)
        self.assertEqual(event["capacity_bytes"], 80 << 30)
        self.assertEqual(event["requested_bytes"], 512 << 20)
        self.assertEqual(event["labels"]["torch.num_alloc_retries"], "4")
        self.assertEqual(event["labels"]["torch.allocated_bytes.all.peak"], str(72 << 30))
        self.assertEqual(event["job"]["params"], 7_000_000_000)
        self.assertEqual(event["job"]["zero_stage"], 2)
        self.assertTrue(event["message"].startswith(FakeOomError.__module__ + ".FakeOomError: CUDA out of memory"))

    def test_nested_scopes_merge_and_rank_labels_are_added(self):
        os.environ.update({"RANK": "5", "WORLD_SIZE": "16", "SLURM_JOB_ID": "4242"})
        try:
            with self.assertRaises(RuntimeError):
                with oomlens_hook.report_oom(batch=16, seq_len=8192, labels={"team": "nlp"}):
                    with oomlens_hook.report_oom(phase="backward", labels={"step": 7}):
                        raise RuntimeError(OOM_TEXT)
        finally:
            for var in ("RANK", "WORLD_SIZE", "SLURM_JOB_ID"):
                os.environ.pop(var, None)
        event = self.next_event()
        self.assertEqual(event["phase"], "backward")
        self.assertEqual((event["job"]["batch"], event["job"]["seq_len"]), (16, 8192))
        labels = event["labels"]
        self.assertEqual((labels["job.team"], labels["job.step"]), ("nlp", "7"))
        self.assertEqual((labels["job.rank"], labels["job.world_size"], labels["job.slurm_job_id"]), ("5", "16", "4242"))
        # The scope is gone after the block.
        self.assertIsNone(oomlens_hook._SCOPE.get())

    def test_v2_report_with_uuid_and_allocator_summary(self):
        torch = fake_torch()
        torch.cuda.get_device_properties = lambda i: types.SimpleNamespace(uuid="5f8e0c2a-1111-2222-3333-444455556666")
        torch.cuda.memory = types.SimpleNamespace(_snapshot=lambda: snapshot(device=1))
        sys.modules["torch"] = torch
        with self.assertRaises(FakeOomError):
            with oomlens_hook.report_oom(phase="forward"):
                raise FakeOomError("CUDA out of memory. Tried to allocate 5.00 GiB")
        event = self.next_event()
        labels = event["labels"]
        self.assertEqual(labels["gpu.uuid"], "GPU-5f8e0c2a-1111-2222-3333-444455556666")
        self.assertEqual(labels["hook.cuda_index"], "1")
        self.assertIsNone(event["gpu_index"], "hook-listen has no inventory to map the UUID")
        self.assertEqual(labels["alloc.largest_free_block_bytes"], str(3 << 30))
        self.assertEqual(labels["alloc.static_bytes"], str(30 << 30))
        self.assertTrue(labels["alloc.site.1"].startswith(str(30 << 30) + "|1|load|load_state_dict|"))

    def test_install_attaches_the_observer_whose_summary_the_report_uses(self):
        torch = fake_torch()
        observers = []
        torch._C = types.SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append)
        torch.cuda.is_available = lambda: True
        recorded = {}
        torch.cuda.memory = types.SimpleNamespace(
            _snapshot=lambda: snapshot(device=1),
            _record_memory_history=lambda **kw: recorded.update(kw),
        )
        sys.modules["torch"] = torch
        previous = sys.excepthook
        try:
            done = oomlens_hook.install(record_history=True, max_entries=5000, params=7)
            self.assertEqual(done, {"observer": True, "history": True, "excepthook": True})
            self.assertEqual(recorded["max_entries"], 5000)
            # At the OOM the observer summarises; afterwards the allocator changes (freed).
            observers[0](1, 5 << 30, 70 << 30, 1 << 30)
            torch.cuda.memory._snapshot = lambda: {"segments": []}
            with self.assertRaises(FakeOomError):
                with oomlens_hook.report_oom():
                    raise FakeOomError("CUDA out of memory. Tried to allocate 5.00 GiB")
            event = self.next_event()
            self.assertEqual(event["labels"]["alloc.segments"], "2", "the observer's summary, taken at the OOM")
        finally:
            sys.excepthook = previous
        hide_torch()
        no_cuda = oomlens_hook.install(excepthook=False)
        self.assertEqual(no_cuda, {"observer": False, "history": False, "excepthook": False})

    @unittest.skipUnless(REAL_TORCH, "torch is not installed in this Python (Debian: apt install python3-torch)")
    def test_real_torch_oom_error_through_the_excepthook(self):
        # The real exception class, raised in a nested scope and left uncaught: the excepthook
        # install() set reports it to the real agent with the merged context, then chains on.
        restore_torch()
        chained = []
        previous = sys.excepthook
        sys.excepthook = lambda *a: chained.append(a[0])
        try:
            oomlens_hook.install(record_history=True, phase="forward", labels={"team": "nlp"})
            error_class = real_oom_error()
            try:
                with oomlens_hook.report_oom(batch=8, seq_len=2048):
                    raise error_class(OOM_TEXT)
            except error_class:
                sys.excepthook(*sys.exc_info())
        finally:
            sys.excepthook = previous
            oomlens_hook.install(excepthook=False)  # clears the process context again
        self.assertEqual(chained, [error_class], "the previous excepthook still runs")
        first = self.next_event()
        self.assertEqual((first["job"]["batch"], first["job"]["seq_len"]), (8, 2048), "the scope's report")
        self.assertEqual(first["requested_bytes"], 2 << 30)
        self.assertEqual(first["gpu_index"], 3, "from the message: torch has no CUDA device to ask")
        self.assertAlmostEqual(first["capacity_bytes"], 79.11 * (1 << 30), delta=1, msg="the message run through the parser")
        self.assertIn("OutOfMemoryError: CUDA out of memory", first["message"])
        # install()'s context is under every report, the scope's too.
        self.assertEqual(first["phase"], "forward")
        self.assertEqual(first["labels"]["job.team"], "nlp")
        self.assertNotIn("alloc.segments", first["labels"], "no CUDA: no allocator summary")
        # Reported once: the excepthook sees the exception the scope already reported.
        self.assertRaises(queue.Empty, self.events.get, timeout=0.5)

    def test_other_exceptions_are_not_reported(self):
        with self.assertRaises(ValueError):
            with oomlens_hook.report_oom(phase="forward"):
                raise ValueError("not an OOM")
        with self.assertRaises(RuntimeError):
            with oomlens_hook.report_oom():
                raise RuntimeError("CUDA error: device-side assert triggered")
        self.assertTrue(self.events.empty())

    def test_one_report_per_exception_and_excepthook(self):
        calls = []
        previous = sys.excepthook
        sys.excepthook = lambda *a: calls.append(a)
        try:
            oomlens_hook.install_excepthook(params=1_000_000, dp=8)
            exc = RuntimeError(OOM_TEXT)
            with self.assertRaises(RuntimeError):
                with oomlens_hook.report_oom(phase="eval"):
                    with oomlens_hook.report_oom(phase="forward"):
                        raise exc
            sys.excepthook(RuntimeError, exc, None)
            self.assertEqual(len(calls), 1, "the previous hook still runs")
            self.assertEqual(self.next_event()["phase"], "forward", "the innermost scope reports")
            self.assertRaises(queue.Empty, self.events.get, timeout=0.3)

            fresh = RuntimeError(OOM_TEXT)
            sys.excepthook(RuntimeError, fresh, None)
            event = self.next_event()
            self.assertEqual(event["job"]["dp"], 8)
            self.assertEqual(len(calls), 2)
        finally:
            sys.excepthook = previous

    def test_bad_lines_get_error_replies(self):
        def raw(line):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                s.connect(self.sock)
                s.sendall(line + b"\n")
                return json.loads(s.makefile().readline())

        for line, needle in [
            (b"not json", "JSON"),
            (b'{"v":9,"type":"oom"}', "version 9"),
            (b'{"v":1,"type":"oom","batch":4}', 'unknown field "batch"'),
            (b'{"v":1,"type":"oom","job":{"batch":"big"}}', "job.batch"),
            (b'{"v":1,"type":"oom","phase":"warmup"}', "warmup"),
        ]:
            reply = raw(line)
            self.assertFalse(reply["ok"], line)
            self.assertIn(needle, reply["error"])
        self.assertTrue(self.events.empty())
        # The helper's own sanitising keeps a typo from losing the report.
        reply = oomlens_hook.send_report(RuntimeError(OOM_TEXT), phase="warmup", job={"bacth": 4, "batch": "x"})
        self.assertTrue(reply["ok"], reply)
        self.assertEqual(self.next_event()["phase"], "unknown")

    def test_absent_agent_is_quick_and_silent(self):
        missing = os.path.join(self.tmp, "nobody.sock")
        start = time.monotonic()
        with self.assertRaises(RuntimeError):
            with oomlens_hook.report_oom(socket_path=missing, timeout=0.2):
                raise RuntimeError(OOM_TEXT)
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertIsNone(oomlens_hook.send_report(RuntimeError(OOM_TEXT), socket_path=missing))
        self.assertFalse(oomlens_hook.ping(missing))


if __name__ == "__main__":
    unittest.main()
