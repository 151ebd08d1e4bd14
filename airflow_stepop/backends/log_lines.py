"""A job's log text as the task log gets it: one record a line, control characters shown, long
lines in marked pieces.

Every relay passes what a step printed through here, because the task log is read by people
and by log viewers that trust its lines: an embedded newline would let a step print a line
that passes for one of Airflow's own ("Marking task as SUCCESS"), an escape sequence could
rewrite what a terminal shows, a bidi override what a viewer shows. So:

* a line ends at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (each frame of a ``\\r`` progress bar is
  a line of its own, as ``str.splitlines`` made it before);
* every other control character but tab (C0, DEL, C1), the Unicode line and paragraph
  separators and the bidi controls are shown as escapes (``\\x1b``, ``\\u2028``);
* a line longer than ``PIECE_CHARS`` is passed on in pieces, each but the last ending with
  ``CONTINUES``, so that no record is megabytes long and a reader sees the line goes on.

Byte streams (the local backend's) are cut here too, by ``take_lines``: a line still being
written is held back only while it is shorter than ``PIECE_BYTES``, so what a relay holds and
reads again never grows with what the step prints. Standard library only.
"""

from __future__ import annotations

import re
from typing import Any

# The longest record a relayed line becomes, marker included: under the trigger's own cut
# (8192 characters), with room for a host prefix.
PIECE_CHARS = 8000
CONTINUES = " [line continues]"
# A line still being written is held back (read again at the next poll) while it is shorter
# than this; from this size on it is passed on in pieces.
PIECE_BYTES = PIECE_CHARS
# A cursor (a dict) with this key set to True says: more of the log is already waiting past
# it; call ``alogs`` again now rather than at the next poll (see triggers/log_drain.py).
MORE = "more"

_LINE_END = re.compile(r"\r\n|\r|\n")
_CONTROLS = [*range(0x00, 0x20), *range(0x7F, 0xA0), 0x2028, 0x2029,
             *range(0x202A, 0x202F), *range(0x2066, 0x206A)]  # fmt: skip
_VISIBLE = {c: (f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}") for c in _CONTROLS if c != 0x09}


def visible(text: str) -> str:
    """``text`` with every control character but tab shown as an escape (no line breaks left)."""
    return text.translate(_VISIBLE)


def pieces(line: str, *, continues: bool = False) -> list[str]:
    """One line (no line break in it) as records of at most ``PIECE_CHARS`` characters, each
    but the last marked ``CONTINUES``; the last too when ``continues`` (the rest of the line
    comes with a later read)."""
    text = visible(line)
    if len(text) <= PIECE_CHARS and not continues:
        return [text]
    size = PIECE_CHARS - len(CONTINUES)
    cut = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    records = [piece + CONTINUES for piece in cut]
    if not continues:
        records[-1] = cut[-1]
    return records


def relayed_lines(text: str) -> list[str]:
    """A log event's text (one message, which may hold line breaks) as task-log records.

    Idempotent: records it made come back unchanged, so a trigger may pass every backend's
    lines through it again.
    """
    parts = _LINE_END.split(text)
    if len(parts) > 1 and parts[-1] == "":  # a trailing line break ends a line, adds none
        parts.pop()
    return [record for part in parts for record in pieces(part)]


def take_lines(data: bytes, *, ended: bool) -> tuple[list[str], int]:
    """The records for the lines in ``data`` (a log's bytes from a cursor on), and how many of
    its bytes they use: the cursor moves on by that many.

    An unfinished last line is held back (not used) while it is shorter than ``PIECE_BYTES``;
    from that length on its bytes are passed on as marked pieces, so every call with at least
    ``PIECE_BYTES`` bytes moves on. A final ``\\r`` is held back too: it may be half of a
    ``\\r\\n``. ``ended``: nothing follows ``data`` (the job ended and this is its log's end),
    so an unfinished last line is passed on as it is.
    """
    end = _after_last_line_end(data, ended)
    records = relayed_lines(data[:end].decode("utf-8", "replace")) if end else []
    rest = len(data) - end
    if ended:
        take = rest
    elif rest >= PIECE_BYTES:
        take = _utf8_boundary(data, end + rest - rest % PIECE_BYTES) - end
        if data[end + take - 1 : end + take] == b"\r":  # never end a piece on half a \r\n
            take -= 1
    else:
        take = 0
    if take:
        piece = data[end : end + take].decode("utf-8", "replace")
        records.extend(pieces(piece, continues=not ended))
    return records, end + take


def all_lines(data: bytes, *, continues: bool) -> list[str]:
    """The records for every byte of ``data``: its unfinished last line too, marked when
    ``continues`` (its rest comes later), as is when not (nothing follows)."""
    parts = _LINE_END.split(data.decode("utf-8", "replace"))
    last = parts.pop()  # "" when data ends with a line end
    records = [record for part in parts for record in pieces(part)]
    if last:
        records.extend(pieces(last, continues=continues))
    return records


def whole_characters(data: bytes) -> bool:
    """Whether ``data`` does not end inside a UTF-8 character."""
    return _utf8_boundary(data, len(data)) == len(data)


def more_waiting(cursor: Any) -> bool:
    """Whether a relay's cursor says more of the log already waits past it."""
    return isinstance(cursor, dict) and cursor.get(MORE) is True


def _after_last_line_end(data: bytes, ended: bool) -> int:
    """The index just past the last line end in ``data`` (0: none), a final ``\\r`` not
    counted unless ``ended``."""
    end = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
    if end == len(data) and data.endswith(b"\r") and not ended:
        end = max(data.rfind(b"\n", 0, end - 1), data.rfind(b"\r", 0, end - 1)) + 1
    return end


def _utf8_boundary(data: bytes, index: int) -> int:
    """``index``, or the start of the UTF-8 character that a cut at ``index`` would split."""
    lead = index - 1
    while lead > max(0, index - 4) and data[lead] & 0xC0 == 0x80:
        lead -= 1
    if lead < 0:
        return index
    byte = data[lead]
    length = (
        2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
    )
    return lead if lead + length > index else index
