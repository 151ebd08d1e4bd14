"""Plain helper code imported by the test DAGs (travels in the code bundle)."""

from __future__ import annotations

import os
import time
from pathlib import Path


def make_array(megabytes: int):
    import numpy as np

    return np.arange(megabytes * 2**20 // 8, dtype="float64")


def wait_for_file(path: str, timeout: float = 120.0) -> None:
    """Block until ``path`` exists: lets a test hold a job open as long as it needs."""
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)


def record_pid(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
