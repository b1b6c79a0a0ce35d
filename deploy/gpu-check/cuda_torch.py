"""The CUDA-enabled torch the GPU checks need (shared by provoke_oom.py and scenarios.py)."""

import sys


def cuda_torch():
    """torch when it sees a CUDA device; else None, after saying why on stderr (the checks then
    exit 3: nothing was checked)."""
    try:
        import torch
    except ImportError:
        print("no torch in this Python", file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print("torch %s sees no CUDA device" % torch.__version__, file=sys.stderr)
        return None
    return torch
