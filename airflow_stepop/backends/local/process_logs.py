"""Process mode's log relay: the job's ``output.log`` read from a byte offset, a bounded range
per call.

The triggerer is shared by every deferred task, so one call reads at most ``READ_BYTES`` of the
log, whatever the step printed (a dumped array, a ``\\r`` progress bar, gigabytes while no
triggerer ran); the cursor says when more waits (``more``: the trigger reads again at once).
A line still being written is held back while shorter than ``log_lines.PIECE_BYTES`` (and not
read again until the log grows); a longer one is passed on in marked pieces. So every call
moves the cursor on, and a cursor saved before a triggerer restart never replays a read that
could not end. Once the job has ended, its last unfinished line is passed on as it is.

The cursor (JSON) is ``{"offset": bytes relayed, "seen": the log's size at the last read}``
plus ``"more": true`` while a read stopped at its bound; an older version's cursor, a plain
byte offset, is read as the offset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow_stepop.backends.log_lines import MORE, take_lines

# What one relay call reads of a job's log, at most: 256 KiB. Its lines take about a MiB of the
# triggerer's memory, and a step printing gigabytes is relayed in as many calls, never at
# once (measured: 1 MiB reads left the relay's memory 22-33 MiB larger, 256 KiB reads 6 MiB;
# the calls cost no more time: bench/log_relay.py).
READ_BYTES = 1 << 18


def read(path: Path, cursor: Any, *, ended: bool) -> tuple[list[str], dict[str, Any]]:
    """The lines of the log at ``path`` past ``cursor`` (None: from the start), at most
    ``READ_BYTES`` of it, and the next cursor. ``ended``: the job has ended, its log is whole
    (check it before calling: a log read first could still grow)."""
    offset, seen = _offsets(cursor)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return [], {"offset": offset, "seen": seen}
    # nothing new (or only the held back start of a line, not grown): no open, no read
    if size <= offset or (size <= seen and not ended):
        return [], {"offset": offset, "seen": seen}
    with open(path, "rb") as log:
        log.seek(offset)
        data = log.read(READ_BYTES)
    reached = offset + len(data)
    lines, used = take_lines(data, ended=ended and reached >= size)
    after: dict[str, Any] = {"offset": offset + used, "seen": reached}
    if reached < size:  # the read stopped at its bound: the rest waits
        after[MORE] = True
    return lines, after


def _offsets(cursor: Any) -> tuple[int, int]:
    """(offset, seen) of a cursor; anything but a cursor of ours starts from the top."""
    if isinstance(cursor, int) and not isinstance(cursor, bool):
        cursor = {"offset": cursor}  # an older version's
    if not isinstance(cursor, dict):
        return 0, 0
    offset, seen = cursor.get("offset"), cursor.get("seen", 0)
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        return 0, 0
    return offset, seen if isinstance(seen, int) and seen >= offset else offset
