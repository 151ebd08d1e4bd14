"""A relay round of many short lines leaves the triggerer's event loop to the other triggers."""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging

from airflow_stepop.triggers.job_log_relay import SHOW_BATCH, JobLogRelay
from airflow_stepop.triggers.relay_cursor import CursorStore
from tests.unit.backend_doubles import TriggerSideBackend

LINES = 20 * SHOW_BATCH  # a progress bar of short \r frames: one record each


class Frames(TriggerSideBackend):
    """One read of ``LINES`` short lines, then nothing."""

    async def alogs(self, handle, cursor):
        if cursor:
            return [], cursor
        return [f"{i}%" for i in range(LINES)], {"offset": 1}

    async def astatus(self, handle):
        raise NotImplementedError


class Relay(JobLogRelay):
    """The relay half of a trigger; ``seen`` is what the other trigger had counted at each
    write into the task log."""

    def __init__(self, handle, ticks):
        self.handle = handle
        self.poll_interval = 1.0
        self.log = logging.getLogger("tests.relay_yields")
        self._log_outage = False
        self.ticks, self.seen = ticks, []

    def _show(self, lines, tail):
        self.seen.append(self.ticks())
        super()._show(lines, tail)


def test_a_round_of_many_short_lines_yields_to_other_triggers(tmp_path):
    handle = {"job_id": "job-t1", "run_uri": tmp_path.as_uri()}
    ticks = 0
    relay, cursors = Relay(handle, lambda: ticks), CursorStore(handle, None)

    async def other_trigger():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async def main():
        other = asyncio.create_task(other_trigger())
        await asyncio.sleep(0)
        tail = collections.deque(maxlen=40)
        await relay._relay_round(Frames(), None, cursors, tail, final=True)
        other.cancel()
        return list(tail)

    tail = asyncio.run(main())
    assert tail[-1] == f"{LINES - 1}%"  # every line went out
    # in batches, with the other trigger running between each two (once, all in one go)
    assert len(relay.seen) == LINES // SHOW_BATCH
    assert all(later > earlier for earlier, later in itertools.pairwise(relay.seen))
