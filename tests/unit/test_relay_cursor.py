"""The log relay's cursor: saved only past lines that reached the task log, and kept at the end.

A line the trigger logs reaches the task's log file a moment later (the triggerer's supervisor
reads it from a socket). A triggerer killed outright in that moment must leave a saved cursor
before the line, or the trigger that resumes the relay skips it.
"""

from __future__ import annotations

import asyncio

import pytest

from airflow_stepop.triggers import relay_cursor
from airflow_stepop.triggers.relay_cursor import SAVE_SECONDS, SETTLE_SECONDS, CursorStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(relay_cursor, "time", clock)
    return clock


def _store(tmp_path) -> CursorStore:
    return CursorStore({"job_id": "dag-task-t1", "run_uri": tmp_path.as_uri()}, None)


def _saved(tmp_path):
    """The cursor a trigger resuming the relay would start from."""
    return asyncio.run(_store(tmp_path).load())


def test_a_cursor_is_saved_only_once_its_lines_have_settled_in_the_task_log(tmp_path, clock):
    store = _store(tmp_path)
    asyncio.run(store.save({"line": 3}, relayed=3, tail=()))
    assert _saved(tmp_path) is None  # just logged: maybe not in the file yet

    clock.now += SETTLE_SECONDS / 2
    asyncio.run(store.save({"line": 5}, relayed=2, tail=()))
    assert _saved(tmp_path) is None

    clock.now += SETTLE_SECONDS * 0.75  # lines up to 3 settled; 4 and 5 not yet
    asyncio.run(store.save({"line": 6}, relayed=1, tail=()))
    assert _saved(tmp_path) == {"line": 3}


def test_a_cursor_is_saved_at_most_every_save_interval(tmp_path, clock):
    store = _store(tmp_path)
    first_write = clock.now + SETTLE_SECONDS
    for line in range(1, 5):  # a round every SETTLE_SECONDS
        asyncio.run(store.save({"line": line}, relayed=1, tail=()))
        clock.now += SETTLE_SECONDS
    assert _saved(tmp_path) == {"line": 1}  # the second round wrote it; none since

    clock.now = first_write + SAVE_SECONDS
    asyncio.run(store.save({"line": 5}, relayed=1, tail=()))
    assert _saved(tmp_path) == {"line": 4}  # the newest settled one


def test_a_flush_saves_the_last_cursor_and_only_when_lines_were_relayed_since(tmp_path, clock):
    store = _store(tmp_path)
    asyncio.run(store.save({"line": 1}, relayed=1, tail=()))
    asyncio.run(store.flush())
    assert _saved(tmp_path) == {"line": 1}

    (tmp_path / "relay-dag-task-t1.json").unlink()
    asyncio.run(store.save({"line": 1}, relayed=0, tail=()))
    asyncio.run(store.flush())
    assert _saved(tmp_path) is None  # nothing new: no write


def test_when_the_job_began_running_is_kept_with_the_cursor(tmp_path, clock):
    store = _store(tmp_path)
    store.running_since = 1_900_000_000.0
    asyncio.run(store.save({"line": 1}, relayed=1, tail=()))
    asyncio.run(store.flush())

    resumed = _store(tmp_path)
    assert asyncio.run(resumed.load()) == {"line": 1}
    assert resumed.running_since == 1_900_000_000.0


def test_the_tail_up_to_the_saved_cursor_is_saved_with_it(tmp_path, clock):
    """A resumed trigger's event must carry the lines before it too (the last lines explain a
    job that died without a traceback): the tail saved is the one of the cursor saved."""
    store = _store(tmp_path)
    asyncio.run(store.save({"line": 2}, relayed=2, tail=["loading", "epoch 1"]))
    clock.now += SETTLE_SECONDS
    asyncio.run(store.save({"line": 3}, relayed=1, tail=["loading", "epoch 1", "epoch 2"]))

    resumed = _store(tmp_path)
    assert asyncio.run(resumed.load()) == {"line": 2}
    assert resumed.tail == ["loading", "epoch 1"]  # not the lines past the saved cursor


@pytest.mark.parametrize(
    "document",
    [
        {"job_id": "dag-task-t1", "cursor": None, "tail": ["relayed again from the top"]},
        {"job_id": "dag-task-t1", "cursor": 7, "tail": "not a list"},
        {"job_id": "dag-task-t1", "cursor": 7},  # saved by a release without the tail
    ],
)
def test_a_tail_is_restored_only_with_a_cursor_to_go_on_from(tmp_path, document):
    """Without a cursor the relay starts from the top, and would show those lines twice."""
    import json

    (tmp_path / "relay-dag-task-t1.json").write_text(json.dumps(document))
    store = _store(tmp_path)
    asyncio.run(store.load())
    assert store.tail == []
