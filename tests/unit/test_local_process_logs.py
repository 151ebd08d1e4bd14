"""Process mode's log relay reads a bounded range a call, moves on every call, and loses or
repeats no byte: what a triggerer shared by every deferred task relies on."""

from __future__ import annotations

import asyncio

from airflow_stepop.backends.local import process_logs
from airflow_stepop.backends.log_lines import CONTINUES, more_waiting
from airflow_stepop.triggers.log_drain import RUNNING_READS, relay_round

READ = process_logs.READ_BYTES


def rebuilt(records: list[str]) -> str:
    return "".join(r[: -len(CONTINUES)] if r.endswith(CONTINUES) else r + "\n" for r in records)


def test_each_read_takes_a_bounded_range_moves_on_and_says_more_waits(tmp_path):
    log = tmp_path / "output.log"
    log.write_bytes(b"y" * (3 * READ + 100))  # no line end at all
    cursor, records, reads = None, [], 0
    while True:
        lines, after = process_logs.read(log, cursor, ended=False)
        assert after["offset"] - (cursor or {"offset": 0})["offset"] <= READ
        records += lines
        reads += 1
        if not more_waiting(after):
            break
        assert after["offset"] > (cursor or {"offset": 0})["offset"]  # progress every call
        cursor = after
    assert reads == 4
    # the end of the unfinished line waits for its end, or for the job's
    assert process_logs.read(log, after, ended=False)[0] == []
    last, done = process_logs.read(log, after, ended=True)
    assert rebuilt(records + last) == "y" * (3 * READ + 100) + "\n"
    assert done["offset"] == log.stat().st_size


def test_an_older_versions_cursor_is_its_offset_and_a_forged_one_starts_over(tmp_path):
    log = tmp_path / "output.log"
    log.write_bytes(b"one\ntwo\n")
    assert process_logs.read(log, 4, ended=True)[0] == ["two"]
    assert process_logs.read(log, {"offset": -5}, ended=True)[0] == ["one", "two"]
    assert process_logs.read(log, "nonsense", ended=True)[0] == ["one", "two"]


def _round(log, cursor, *, final):
    shown: list[list[str]] = []

    async def show(lines, after):
        shown.append(lines)

    async def read(at):
        return process_logs.read(log, at, ended=final)

    return asyncio.run(relay_round(read, show, cursor, final=final)), shown


def test_a_finished_jobs_round_relays_all_of_it_one_bounded_read_at_a_time(tmp_path):
    log = tmp_path / "output.log"
    text = b"".join(b"\r%6d%%" % i for i in range(200_000)) + b"\nend"  # a progress bar
    log.write_bytes(text * 3)
    cursor, shown = _round(log, None, final=False)
    assert len(shown) == RUNNING_READS or not more_waiting(cursor)
    cursor, rest = _round(log, cursor, final=True)
    assert not more_waiting(cursor)
    records = [r for lines in shown + rest for r in lines]
    assert rebuilt(records) == (text * 3).replace(b"\r", b"\n").decode() + "\n"
    assert all(sum(map(len, lines)) <= 2 * READ for lines in shown + rest)
