"""Faults the tests set at a moment the step reaches, not after a delay."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.waiting import wait_for


@contextlib.contextmanager
def preempted_once_checkpointed(ctl: Any, checkpointed: Path, match: str) -> Iterator[None]:
    """While the block runs, preempt the job named like ``match`` once its step has written
    ``checkpointed`` (each fake checks preempt rules all along a running attempt).

    A preemption at a fixed delay after the attempt's start came before the checkpoint when
    the step was slow to start (a loaded CI machine). If the block ends first, no rule is added;
    a failure to add it fails the block's test.
    """
    ended, failed = threading.Event(), []

    def preempt() -> None:
        try:
            wait_for(lambda: checkpointed.exists() or ended.is_set(), 300, "the checkpoint")
            if checkpointed.exists():
                ctl.add_faults({"kind": "preempt", "after_seconds": 0, "match": match})
        except BaseException as exc:
            failed.append(exc)

    preempter = threading.Thread(target=preempt, daemon=True)
    preempter.start()
    try:
        yield
    finally:
        ended.set()
        preempter.join(30)
    assert not failed, failed
