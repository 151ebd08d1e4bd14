"""Step functions the fault tests and their DAGs run as jobs, on every cloud.

Standard library only, and no Airflow import: a job imports this module by name from its
code bundle (the bundle ships it with the ``tests`` packages above it).
"""

from __future__ import annotations

import time
from pathlib import Path


def wait_for_file(path: str, timeout: float = 120.0) -> None:
    """Block until ``path`` exists: lets a test hold a job open as long as it needs."""
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)


def held_step(release: str) -> str:
    """Runs until the test (or a fault operator's retry) creates ``release``."""
    wait_for_file(release)
    return "done by the first job"


def answer_once() -> str:
    return "computed once"


def hold(release: str) -> str:
    """Runs until ``release`` exists; a kill test never creates it."""
    wait_for_file(release, 300)
    return "released"


def two_phases(release: str, finish: str | None = None) -> str:
    """Logs three "before" lines, waits for ``release``, logs three "after" lines, then (when
    given) waits for ``finish``: a relay test stops and resumes its trigger in between."""
    for i in range(3):
        print(f"before {i}", flush=True)
    wait_for_file(release, 300)
    for i in range(3):
        print(f"after {i}", flush=True)
    if finish is not None:
        wait_for_file(finish, 300)
    return "done"
