"""The saved relay cursor lies where the job writes: loading it is bounded, and its tail (which
the task's failure message shows) cannot carry a forged line or an escape."""

from __future__ import annotations

import asyncio
import json
import os

from airflow_stepop.triggers.deadline import deadline_at
from airflow_stepop.triggers.relay_cursor import MAX_DOCUMENT_BYTES, CursorStore

JOB = "dag-task-t1"


def _load(tmp_path, document) -> tuple[object, CursorStore]:
    (tmp_path / f"relay-{JOB}.json").write_text(json.dumps(document))
    store = CursorStore({"job_id": JOB, "run_uri": tmp_path.as_uri()}, None)
    return asyncio.run(store.load()), store


def test_a_document_larger_than_any_cursor_of_ours_is_not_read(tmp_path, caplog):
    padding = ["p" * 1000] * (MAX_DOCUMENT_BYTES // 1000 + 1)
    cursor, store = _load(tmp_path, {"job_id": JOB, "cursor": {"offset": 7}, "tail": padding})
    assert cursor is None and store.tail == []  # the relay starts from the top
    assert f"larger than {MAX_DOCUMENT_BYTES} bytes" in caplog.text


def test_a_saved_tails_lines_are_shown_as_the_task_log_shows_a_jobs_lines(tmp_path):
    tail = ["ok", "x\n[2026-01-01] INFO - Marking task as SUCCESS\x1b[0m", 5]
    cursor, store = _load(tmp_path, {"job_id": JOB, "cursor": {"offset": 7}, "tail": tail})
    assert cursor == {"offset": 7}
    assert store.tail == ["ok", "x\\x0a[2026-01-01] INFO - Marking task as SUCCESS\\x1b[0m"]


def _within(seconds: float, coroutine):
    """Run ``coroutine``, failing the test if it has not ended within ``seconds``."""

    async def bounded():
        return await asyncio.wait_for(coroutine, seconds)

    return asyncio.run(bounded())


def test_a_fifo_or_a_link_in_place_of_the_cursor_never_blocks_the_triggerer(tmp_path, caplog):
    """A container step may write the run directory (the artifact root is mounted): a FIFO there
    used to block the triggerer's one I/O thread, and every trigger's cursor with it."""
    os.mkfifo(tmp_path / f"relay-{JOB}.json")
    store = CursorStore({"job_id": JOB, "run_uri": tmp_path.as_uri()}, None)
    assert _within(5, store.load()) is None
    assert "not a regular file" in caplog.text

    (tmp_path / f"relay-{JOB}.json").unlink()
    (tmp_path / f"relay-{JOB}.json").symlink_to("/dev/zero")
    assert _within(5, store.load()) is None


def test_a_fifo_or_a_huge_file_in_place_of_the_deadline_counts_from_now(tmp_path):
    handle = {"job_id": JOB, "run_uri": tmp_path.as_uri()}
    os.mkfifo(tmp_path / f"deadline-{JOB}.json")
    at = _within(5, deadline_at(handle, None, "worker-1", 60.0, 1000.0))
    assert at == 1060.0
    (tmp_path / f"deadline-{JOB}.json").write_text(json.dumps({"deadline": 1, "x": "y" * 10**6}))
    assert _within(5, deadline_at(handle, None, "worker-1", 60.0, 2000.0)) == 2060.0
