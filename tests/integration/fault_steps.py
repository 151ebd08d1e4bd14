"""Step functions the fault tests and their DAGs run as jobs, on every cloud.

No Airflow import: a job imports this module by name from its code bundle, which ships it with
the ``tests`` packages above it and the DAGs folder's step_helpers (tests/conftest.py puts that
folder on sys.path, as Airflow does).
"""

from __future__ import annotations

from step_helpers import wait_for_file


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


def split(n: int) -> dict:
    """A result for ``multiple_outputs``: plain values and a list."""
    print(f"splitting {n}")
    return {"count": n, "names": ["a", "b", "c"][:n]}


def fails(why: str) -> None:
    raise ValueError(why)
