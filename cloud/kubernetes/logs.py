"""A container's log as the kubelet serves it: ``GET .../pods/{name}/log``.

Every output line of the running container is kept with the time it was read (nanoseconds),
and stays readable until the pod is deleted. The query (:class:`LogQuery`) is the kubelet's:
``tailLines`` first, then ``sinceTime`` (inclusive, to the second: the API carries it as a
``metav1.Time``, so lines of the same second come again) or ``sinceSeconds``, ``timestamps``
(each line prefixed ``2026-01-01T00:00:00.123456789Z ``), ``limitBytes`` (the answer cut
there), ``stream`` (``Stdout``/``Stderr``/``All``) and ``follow`` (the answer stays open until
the container ends). A ``log_delay`` fault holds lines back for its seconds.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cloud.fake_http import Request
from cloud.kubernetes.api import bad_request, nano_time, parse_time


@dataclass(frozen=True)
class LogLine:
    ns: int  # epoch nanoseconds when the line was read
    stream: str  # "stdout" or "stderr"
    text: str


@dataclass
class ContainerLog:
    """One container's lines, in order, and whether the container has ended."""

    lines: list[LogLine] = field(default_factory=list)
    ended: bool = False

    def append(self, stream: str, text: str, ts: float) -> None:
        ns = int(ts * 1e9)
        if self.lines and ns < self.lines[-1].ns:  # the two pipes' readers race: keep order
            ns = self.lines[-1].ns
        self.lines.append(LogLine(ns, stream, text))


@dataclass(frozen=True)
class LogQuery:
    """The options of one log request."""

    timestamps: bool = False
    since_ns: int | None = None
    tail: int | None = None
    limit: int | None = None
    stream: str | None = None  # "stdout", "stderr" or None for both
    follow: bool = False

    @classmethod
    def from_request(cls, req: Request) -> LogQuery:
        """The query of ``req``; 400 for values the API refuses."""

        def number(name: str, least: int) -> int | None:
            raw = req.arg(name)
            if raw is None:
                return None
            try:
                value = int(raw)
            except ValueError:
                raise bad_request(f"{name}: invalid value {raw!r}") from None
            if value < least:
                raise bad_request(f"{name}: must be greater than or equal to {least}")
            return value

        since_time, since_seconds = req.arg("sinceTime"), number("sinceSeconds", 1)
        if since_time is not None and since_seconds is not None:
            raise bad_request("at most one of sinceTime or sinceSeconds may be specified")
        since_ns = None
        if since_time is not None:
            try:
                since_ns = math.floor(parse_time(since_time)) * 1_000_000_000  # to the second
            except ValueError:
                raise bad_request(f"sinceTime: invalid time {since_time!r}") from None
        elif since_seconds is not None:
            since_ns = time.time_ns() - since_seconds * 1_000_000_000
        stream = (req.arg("stream") or "All").lower()
        if stream not in ("all", "stdout", "stderr"):
            raise bad_request(f'stream: Unsupported value: "{req.arg("stream")}"')
        return cls(
            timestamps=_flag(req.arg("timestamps")),
            since_ns=since_ns,
            tail=number("tailLines", 0),
            limit=number("limitBytes", 1),
            stream=None if stream == "all" else stream,
            follow=_flag(req.arg("follow")),
        )

    def render(self, line: LogLine) -> bytes:
        text = f"{nano_time(line.ns)} {line.text}" if self.timestamps else line.text
        return (text + "\n").encode()

    def wanted(self, line: LogLine) -> bool:
        return (self.stream is None or line.stream == self.stream) and (
            self.since_ns is None or line.ns >= self.since_ns
        )

    def first(self, lines: list[LogLine]) -> int:
        """Index of the first line ``tailLines`` lets through."""
        if self.tail is None:
            return 0
        chosen = [i for i, line in enumerate(lines) if self.stream in (None, line.stream)]
        return (
            chosen[-self.tail]
            if 0 < self.tail <= len(chosen)
            else (len(lines) if self.tail == 0 else 0)
        )


def _flag(raw: str | None) -> bool:
    return (raw or "").lower() in ("true", "1")


def read_all(log: ContainerLog, query: LogQuery, visible_before_ns: int) -> bytes:
    """The answer to a request that does not follow."""
    lines = [ln for ln in log.lines if ln.ns <= visible_before_ns]
    body = b"".join(query.render(ln) for ln in lines[query.first(lines) :] if query.wanted(ln))
    return body[: query.limit] if query.limit is not None else body


def follow(
    log: ContainerLog,
    query: LogQuery,
    changed: threading.Condition,
    visible_before_ns: Callable[[], int],
    gone: Callable[[], bool],
) -> Iterator[bytes]:
    """The chunks of a followed log: the lines so far, then each new one, until the container
    has ended (or the pod is gone); an empty chunk every second while nothing comes.
    ``changed`` is the store's condition: lines are appended and read under its lock."""
    sent: int | None = None
    seen = (0, False)  # (lines, ended) at the last look, the lines visible or held back
    left = query.limit
    while True:
        with changed:
            if sent is not None and (len(log.lines), log.ended) == seen and not gone():
                changed.wait(1.0)
            seen = (len(log.lines), log.ended)
            cutoff = visible_before_ns()
            lines = [ln for ln in log.lines if ln.ns <= cutoff]
            if sent is None:
                sent = query.first(lines)
            chunk = b"".join(query.render(ln) for ln in lines[sent:] if query.wanted(ln))
            sent = len(lines)
            finished = (log.ended and sent == len(log.lines)) or gone()
        if left is not None:
            chunk = chunk[:left]
            left -= len(chunk)
        yield chunk
        if finished or left == 0:
            return
