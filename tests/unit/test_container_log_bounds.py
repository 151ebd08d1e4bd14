"""A local container's log relay reads a bounded part of its output a call and passes every
byte on once, however long a line the step prints (the engine's answer is played by a double
that keeps its rules: 16 KiB pieces, stamps in ns, ``since`` to the microsecond)."""

from __future__ import annotations

import asyncio

from airflow_stepop.backends.local import container_logs
from airflow_stepop.backends.log_lines import CONTINUES, more_waiting
from airflow_stepop.triggers.log_drain import relay_round

PIECE = 16 * 1024  # the engine's longest message


def rebuilt(records: list[str]) -> str:
    return "".join(r[: -len(CONTINUES)] if r.endswith(CONTINUES) else r + "\n" for r in records)


def _stamp(ns: int) -> bytes:
    import time

    seconds, fraction = divmod(ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)).encode() + b".%09dZ" % fraction


class Engine:
    """One container's messages as the engine keeps them, and what each logs call sent."""

    def __init__(self, printed: bytes, status: str = "running") -> None:
        self.status = status
        self.messages: list[tuple[int, bytes]] = []
        ns = 1_700_000_000 * 10**9
        for line in printed.splitlines(keepends=True):  # the engine splits at \n only ...
            line_pieces = [line[i : i + PIECE] for i in range(0, len(line), PIECE)]
            for piece in line_pieces:  # ... and a long line in pieces, some in one instant
                ns += 1 if len(self.messages) % 3 else 1000
                self.messages.append((ns, piece))
        self.sent: list[int] = []  # bytes of each answer read

    def logs(self, *, stdout, stderr, timestamps, stream, follow, since=None):
        assert timestamps and stream and not follow
        floor = int(round(since * 1e6)) * 1000 if since else 0
        chosen = [m for m in self.messages if m[0] >= floor] if stdout else []
        return _Answer(chosen, self.sent)


class _Answer:
    def __init__(self, messages, sent):
        self.messages, self.sent = messages, sent
        sent.append(0)

    def __iter__(self):
        for ns, message in self.messages:
            self.sent[-1] += len(message)
            yield _stamp(ns) + b" " + message

    def close(self):
        pass


def _relay(engine: Engine, *, final: bool, cursor=None):
    shown: list[list[str]] = []

    async def read(at):
        return container_logs.read(engine, at)

    async def show(lines, after):
        shown.append(lines)

    return asyncio.run(relay_round(read, show, cursor, final=final)), shown


def test_a_long_line_without_newlines_is_relayed_in_bounded_reads_each_byte_once():
    printed = b"z" * (3 * container_logs.READ_BYTES + 123)  # no line end: 16 KiB pieces
    printed += b"".join(b"\r%5d%%" % i for i in range(5000)) + b"\nend\n"
    engine = Engine(printed, status="exited")
    cursor, shown = _relay(engine, final=True)
    assert not more_waiting(cursor)
    assert rebuilt([r for lines in shown for r in lines]) == printed.replace(b"\r", b"\n").decode()
    # each call read at most its bound of new bytes (plus the one message that crossed it);
    # what the engine sends again from the cursor's microsecond is a few messages at most
    assert max(engine.sent) <= container_logs.READ_BYTES + 4 * PIECE
    assert len(engine.sent) >= 2 * 4  # two streams, four bounded reads at least


def test_an_unfinished_line_is_held_while_short_and_passed_in_pieces_when_long():
    engine = Engine(b"epoch 1 of 3")  # still running, no line end yet
    cursor, shown = _relay(engine, final=False)
    assert shown == [[]]
    engine.status = "exited"
    cursor, shown = _relay(engine, final=True, cursor=cursor)
    assert shown == [["epoch 1 of 3"]]

    engine = Engine(b"q" * (2 * PIECE))
    cursor, shown = _relay(engine, final=False)
    assert rebuilt(shown[0]) == "q" * 2 * PIECE and shown[0][-1].endswith(CONTINUES)
    _, again = _relay(engine, final=False, cursor=cursor)
    assert again == [[]]  # passed on once, never again
