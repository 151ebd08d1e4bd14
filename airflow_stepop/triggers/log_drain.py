"""A relay round: a job's log read until nothing more waits, one bounded read at a time.

Every backend's log read is bounded (bytes, pages), whatever the step printed, and its cursor
says when more of the log already waits past it (``log_lines.more_waiting``). A round reads
again at once while it does: each read's lines go to the task log (and its cursor to the
store) before the next read, so the triggerer holds one read's lines at a time however much
is waiting. A running job's round stops after ``RUNNING_READS`` reads (a step that prints
fast is followed at that pace, and the rest waits for the next round); a finished job's last
round reads until nothing waits, so every line of its log reaches the task log. A read that
does not move the cursor (a failed read, say) ends the round.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from airflow_stepop.backends.log_lines import more_waiting

# Reads in one round of a running job: 16 MiB of a local job's log (reads of 256 KiB) a poll.
RUNNING_READS = 64

Read = Callable[[Any], Awaitable[tuple[list[str], Any]]]
Show = Callable[[list[str], Any], Awaitable[None]]


async def relay_round(read: Read, show: Show, cursor: Any, *, final: bool) -> Any:
    """Read the job's new lines from ``cursor`` (``read(cursor)``: lines and the next cursor),
    hand each read's lines and cursor to ``show``, and read again while more waits; the
    cursor reached."""
    reads = 0
    while True:
        lines, after = await read(cursor)
        await show(lines, after)
        reads += 1
        moved, cursor = after != cursor, after
        if not (moved and more_waiting(cursor)) or (not final and reads >= RUNNING_READS):
            return cursor
