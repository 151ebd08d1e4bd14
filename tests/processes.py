"""Process helpers shared by the tests."""

from __future__ import annotations

import time


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (ended, not yet reaped) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until_gone(pid: int, timeout: float) -> bool:
    """Poll until the process is gone or the deadline passes; True when it is gone."""
    deadline = time.monotonic() + timeout
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not process_alive(pid)
