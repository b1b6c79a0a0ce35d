"""Protocol test of oomlens_hook.py against a real agent hook listener (no torch needed).

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
        sys.modules.pop("torch", None)

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
