"""What a step prints reaches the task log one record a line, with nothing a viewer obeys."""

from __future__ import annotations

import re

from airflow_stepop.backends.log_lines import (
    CONTINUES,
    PIECE_BYTES,
    PIECE_CHARS,
    relayed_lines,
    take_lines,
)


def rebuilt(records: list[str]) -> str:
    """The text the records stand for: a piece's mark joins it to the next record."""
    return "".join(r[: -len(CONTINUES)] if r.endswith(CONTINUES) else r + "\n" for r in records)


def test_a_printed_line_cannot_pass_for_one_of_airflows_own():
    airflows = "[2026-01-01T00:00:00.000+0000] {taskinstance.py:1} INFO - Marking task as SUCCESS"
    forged = f"loss 0.1\n{airflows}"
    records = relayed_lines(forged + "\x1b[2K\r\x1b[1Afake\u2028line\u202eevil\x85\x00")
    assert records[0] == "loss 0.1"
    # each record is one line of the step's: the trigger puts the job's name before each
    assert all(
        not re.search(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202e]", r) for r in records
    )
    assert records[1].endswith("Marking task as SUCCESS\\x1b[2K")
    assert records[2] == "\\x1b[1Afake\\u2028line\\u202eevil\\x85\\x00"


def test_tabs_stay_and_a_trailing_line_end_adds_no_empty_record():
    assert relayed_lines("a\tb\r\n") == ["a\tb"]
    assert relayed_lines("") == [""]
    assert relayed_lines("\r1%\r2%\n") == ["", "1%", "2%"]


def test_a_long_line_comes_in_marked_pieces_and_records_pass_through_unchanged():
    line = "".join(chr(0x41 + i % 26) for i in range(3 * PIECE_CHARS))
    records = relayed_lines(line)
    assert all(len(r) <= PIECE_CHARS for r in records)
    assert [r.endswith(CONTINUES) for r in records] == [True] * (len(records) - 1) + [False]
    assert rebuilt(records) == line + "\n"
    assert [again for r in records for again in relayed_lines(r)] == records  # idempotent


def test_an_unfinished_line_is_held_only_while_shorter_than_a_piece():
    lines, used = take_lines(b"done\nstill writ", ended=False)
    assert (lines, used) == (["done"], 5)
    data = b"x" * (PIECE_BYTES * 2 + 10)
    lines, used = take_lines(data, ended=False)
    assert used == 2 * PIECE_BYTES and all(r.endswith(CONTINUES) for r in lines)
    assert take_lines(data[used:], ended=True) == (["x" * 10], 10)


def test_a_piece_never_splits_a_character_nor_a_crlf():
    data = "é".encode() * PIECE_BYTES  # two bytes each
    lines, used = take_lines(data[: PIECE_BYTES + 1], ended=False)
    assert used == PIECE_BYTES and "\ufffd" not in rebuilt(lines)
    lines, used = take_lines(b"ok\r", ended=False)
    assert (lines, used) == ([], 0)  # the \r may be half of a \r\n
    lines, used = take_lines(b"ok\r\nnext\r", ended=True)
    assert (lines, used) == (["ok", "next"], 9)
