"""A local container's new log lines since a cursor: a bounded part of its output a call.

Each poll asks the engine only for the messages since the last one relayed
(``logs(since=..., timestamps=True)``), one stream at a time, and stops reading a stream after
``READ_BYTES`` of new messages (the stream is closed: the engine sends no more), so a call
holds at most that much whatever the step printed; the cursor then says more waits (``more``:
the trigger reads again at once). The engine stamps every message (a line, or a piece of
16 KiB of a long line) with nanoseconds; ``since`` is inclusive and the API takes it to the
microsecond, so the answer starts with messages that were relayed already: those older than
the cursor's stamp are dropped, and of those with its very stamp (lines printed in the same
instant, the pieces of one long line), the cursor counts how many were relayed. Each stream
has its own cursor: the engine writes stdout's and stderr's messages to one file in the order
they reach it, which is not always their stamps' order, and a stream's own messages are
always in order. A line whose end has not come yet is held back (read again next time) while
shorter than ``log_lines.PIECE_BYTES``; a longer one is passed on in marked pieces, so every
call moves on. A stopped container's last unfinished line is passed on as it is.

The cursor (JSON) is ``{"stdout": [stamp_ns, relayed_at_stamp], "stderr": [...]}``, plus
``"more": true`` while a read stopped at its bound. An older version's cursor, a byte offset
into the whole output, starts the relay from the top.
"""

from __future__ import annotations

import calendar
from typing import Any

from airflow_stepop.backends.log_lines import MORE, PIECE_BYTES, all_lines, whole_characters

STREAMS = ("stdout", "stderr")
# New message bytes one call reads of a stream, at most (the engine's messages are 16 KiB at
# most): 256 KiB, as process mode's reads.
READ_BYTES = 1 << 18
ENDED = ("exited", "dead")
Message = tuple[int, bytes]  # (stamp in ns since the epoch, the message's bytes)
Records = tuple[int, list[str]]  # (stamp of a line's first message, its task-log records)


def read(container: Any, cursor: Any) -> tuple[list[str], dict[str, Any]]:
    """The lines printed since ``cursor`` (None: from the start), and the next cursor."""
    ended = getattr(container, "status", None) in ENDED  # first: then its output is whole
    marks = cursor if isinstance(cursor, dict) else {}
    lines: list[Records] = []
    after: dict[str, Any] = {}
    for stream in STREAMS:
        stamp, relayed = _mark(marks.get(stream))
        new, after[stream], full = _read_stream(container, stream, stamp, relayed, ended)
        lines.extend(new)
        if full:
            after[MORE] = True
    lines.sort(key=lambda line: line[0])  # stable: stdout first within one instant
    return [record for _, records in lines for record in records], after


def _mark(mark: Any) -> tuple[int, int]:
    if isinstance(mark, list) and len(mark) == 2 and all(isinstance(n, int) for n in mark):
        return mark[0], mark[1]
    return 0, 0


def _read_stream(
    container: Any, stream: str, stamp: int, relayed: int, ended: bool
) -> tuple[list[Records], list[int], bool]:
    """One stream's records past the cursor (``stamp``, ``relayed``), read up to
    ``READ_BYTES``; the cursor past the last message passed on; whether the read stopped at
    its bound."""
    since = {"since": stamp // 1000 / 1e6} if stamp else {}
    frames = container.logs(
        stdout=stream == "stdout",
        stderr=stream == "stderr",
        timestamps=True,
        stream=True,
        follow=False,
        **since,
    )
    lines: list[Records] = []
    pending: list[bytes] = []  # the messages of a line still unfinished
    held = read = 0
    began = stamp
    seen = [stamp, relayed]  # the cursor past the last message looked at
    after = [stamp, relayed]  # ... and past the last message passed on
    try:  # one frame per message: "<RFC 3339 stamp, in ns> <bytes>"
        for frame in frames:
            when, message = _message(frame)
            if when < stamp or (when == stamp and relayed > 0):
                relayed -= when == stamp  # relayed already
                continue
            seen = [when, seen[1] + 1] if when == seen[0] else [when, 1]
            if not pending:
                began = when
            pending.append(message)
            held += len(message)
            read += len(message)
            finished = message.endswith(b"\n")
            # a piece ends on a whole character, unless the engine's pieces never do
            whole = whole_characters(message) or held >= 8 * PIECE_BYTES
            if finished or (held >= PIECE_BYTES and whole):
                lines.append((began, all_lines(b"".join(pending), continues=not finished)))
                pending, held, after = [], 0, list(seen)
            if read >= READ_BYTES:
                return lines, after, True
    finally:
        frames.close()
    if ended and pending:  # a stopped container's last line, unfinished for good
        lines.append((began, all_lines(b"".join(pending), continues=False)))
        after = list(seen)
    return lines, after, False


def _message(frame: bytes) -> Message:
    stamp, _, message = frame.partition(b" ")
    return _ns(stamp), message


def _ns(stamp: bytes) -> int:
    """``2024-05-01T10:00:00.123456789Z`` (or with ``+hh:mm``) as ns since the epoch."""
    text = stamp.decode()
    date, rest = text[:19], text[19:]
    seconds = calendar.timegm(
        (int(date[:4]), int(date[5:7]), int(date[8:10]), int(date[11:13]),
         int(date[14:16]), int(date[17:19]), 0, 0, 0)
    )  # fmt: skip
    fraction = ""
    if rest.startswith("."):
        digits = len(rest) - len(rest[1:].lstrip("0123456789"))
        fraction, rest = rest[1:digits], rest[digits:]
    if rest not in ("Z", ""):
        sign = -1 if rest[0] == "+" else 1  # 10:00+02:00 is 08:00 UTC
        seconds += sign * (int(rest[1:3]) * 3600 + int(rest[4:6]) * 60)
    return seconds * 10**9 + int((fraction + "000000000")[:9])
