"""A build's log lines into CloudWatch Logs (moto), a few times a second, as CodeBuild's agent
sends them while the build runs.

Each build writes to its own group and stream (``/aws/codebuild/<project>`` and ``<build uuid>``
unless the logs config names others); a ``log_delay`` fault holds lines back that long, while it
stands. :func:`agent_line` words a line of the agent's own (``[Container] <time> ...``).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import traceback
from typing import Any

FLUSH_SECONDS = 0.25


def agent_line(message: str, ts: float) -> str:
    """``[Container] 2026/11/29 10:00:00.000000 <message>``, as CodeBuild's agent logs."""
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.gmtime(ts))
    return f"[Container] {stamp}.{int((ts % 1) * 1e6):06d} {message}"


class LogSink:
    """Lines -> CloudWatch Logs, batched per (group, stream), with an optional injected delay."""

    def __init__(self, logs: Any, faults: Any) -> None:
        self.logs = logs
        self.faults = faults
        self.pending: dict[tuple[str, str], list[tuple[float, str]]] = {}
        self.created: set[tuple[str, str] | str] = set()
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="codebuild-logs").start()

    def put(self, group: str, stream: str, line: str, ts: float) -> None:
        with self.lock:
            self.pending.setdefault((group, stream), []).append((ts, line))

    def _loop(self) -> None:
        while not self.closed.wait(FLUSH_SECONDS):
            try:
                self.flush()
            except Exception:
                traceback.print_exc(file=sys.stderr)

    def flush(self) -> None:
        """Send every line a ``log_delay`` fault does not hold back."""
        cutoff = time.time() - self.faults.seconds("log_delay")
        with self.send_lock:
            with self.lock:
                batch: dict[tuple[str, str], list[tuple[float, str]]] = {}
                for key, events in self.pending.items():
                    ready = [e for e in events if e[0] <= cutoff]
                    if ready:
                        batch[key] = ready
                        self.pending[key] = events[len(ready) :]
            for (group, stream), events in batch.items():
                self._send(group, stream, events)

    def _send(self, group: str, stream: str, events: list[tuple[float, str]]) -> None:
        exists = self.logs.exceptions.ResourceAlreadyExistsException
        if group not in self.created:
            with contextlib.suppress(exists):
                self.logs.create_log_group(logGroupName=group)
            self.created.add(group)
        if (group, stream) not in self.created:
            with contextlib.suppress(exists):
                self.logs.create_log_stream(logGroupName=group, logStreamName=stream)
            self.created.add((group, stream))
        events = sorted(events, key=lambda e: e[0])
        for i in range(0, len(events), 5000):
            chunk = [
                {"timestamp": int(ts * 1000), "message": line or " "}
                for ts, line in events[i : i + 5000]
            ]
            self.logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=chunk)

    def forget_created(self) -> None:
        """A reset of moto's side may drop groups: create them again when next needed."""
        with self.send_lock:
            self.created.clear()

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(Exception):
            self.flush()
