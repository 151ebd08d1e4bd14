"""Fault timing the tests set by events, not by delays."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest


def preempt_once_signalled(
    monkeypatch: pytest.MonkeyPatch, fake: Any, signal: Path, timeout: float = 120.0
) -> None:
    """Make the in-process fake's ``preempt`` rules fire only once ``signal`` exists.

    The Azure ML and Vertex fakes take a job's preempt rule when an attempt starts and preempt
    it ``after_seconds`` later, however far the job got: a step slower to reach its checkpoint
    than that (a loaded 2-core CI machine) was preempted without one. With this, the fake's
    thread for that attempt waits for ``signal`` (the step writes it after its checkpoint) and
    the preemption follows at once. After ``timeout`` it preempts anyway, and the test fails on
    what the step returned.
    """
    book = fake.service.faults
    take = book.take_job_fault

    def take_once_signalled(kind: str, name: str) -> dict[str, Any] | None:
        rule = take(kind, name)
        if rule is not None and kind == "preempt":
            deadline = time.monotonic() + timeout
            while not signal.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            rule["after_seconds"] = 0
        return rule

    monkeypatch.setattr(book, "take_job_fault", take_once_signalled)
