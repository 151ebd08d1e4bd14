"""A local container's new log lines since a cursor, without reading its whole output again.

Each poll asks the engine only for the messages since the last one relayed
(``logs(since=..., timestamps=True)``), one stream at a time, so a poll costs what the step
printed since the previous one, not everything it printed so far. The engine stamps every
message (a line, or a piece of a long line) with nanoseconds; ``since`` is inclusive and the
API takes it to the microsecond, so the answer starts with messages that were relayed already:
those older than the cursor's stamp are dropped, and of those with its very stamp (lines
printed in the same instant, the pieces of one long line), the cursor counts how many were
relayed. Each stream has its own cursor: the engine writes stdout's and stderr's messages to
one file in the order they reach it, which is not always their stamps' order, and a stream's
own messages are always in order. A line whose end has not come yet is held back.

The cursor (JSON) is ``{"stdout": [stamp_ns, relayed_at_stamp], "stderr": [...]}``. An older
version's cursor, a byte offset into the whole output, is read once as such.
"""

from __future__ import annotations

import calendar
from typing import Any

STREAMS = ("stdout", "stderr")
Message = tuple[int, bytes]  # (stamp in ns since the epoch, the message's bytes)


def read(container: Any, cursor: Any) -> tuple[list[str], dict[str, list[int]]]:
    """The lines printed since ``cursor`` (None: from the start), and the next cursor."""
    offset = cursor if isinstance(cursor, int) else None  # an older version's byte offset
    marks = cursor if isinstance(cursor, dict) else {}
    lines: list[Message] = []
    after: dict[str, list[int]] = {}
    for stream in STREAMS:
        stamp, relayed = marks.get(stream) or (0, 0)
        messages = _messages(container, stream, stamp)
        new, after[stream] = _complete_lines(messages, stamp, relayed)
        lines.extend(new)
    lines.sort(key=lambda line: line[0])  # stable: stdout first within one instant
    data = b"".join(line for _, line in lines)
    if offset is not None:
        data = data[offset:]
    return data.decode("utf-8", "replace").splitlines(), after


def _messages(container: Any, stream: str, stamp: int) -> list[Message]:
    """One stream's messages from ``stamp`` on (to the microsecond below it: a few before)."""
    since = {"since": stamp // 1000 / 1e6} if stamp else {}
    frames = container.logs(
        stdout=stream == "stdout",
        stderr=stream == "stderr",
        timestamps=True,
        stream=True,
        follow=False,
        **since,
    )
    try:  # one frame per message: "<RFC 3339 stamp, in ns> <bytes>"
        return [_message(frame) for frame in frames]
    finally:
        frames.close()


def _complete_lines(
    messages: list[Message], stamp: int, relayed: int
) -> tuple[list[Message], list[int]]:
    """The complete lines among the messages past the cursor (``stamp``, ``relayed``), each
    with the stamp of its first piece, and the cursor just past the last of them."""
    lines: list[Message] = []
    pieces: list[bytes] = []
    began = stamp
    seen = [stamp, relayed]  # the cursor past the last message looked at
    after = [stamp, relayed]  # ... and past the last complete line
    for when, message in messages:
        if when < stamp or (when == stamp and relayed > 0):
            relayed -= when == stamp  # relayed already
            continue
        seen = [when, seen[1] + 1] if when == seen[0] else [when, 1]
        if not pieces:
            began = when
        pieces.append(message)
        if message.endswith(b"\n"):
            lines.append((began, b"".join(pieces)))
            pieces = []
            after = list(seen)
    return lines, after


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
