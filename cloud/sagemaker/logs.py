"""CloudWatch Logs for the SageMaker fake: a job's output lines, batched, into moto.

Lines go to group ``/aws/sagemaker/TrainingJobs``, stream ``<job>/algo-<n>-<epoch>``, as the
service writes them; a ``log_delay`` fault holds lines back that long, while it stands.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import traceback
from typing import Any

LOG_GROUP = "/aws/sagemaker/TrainingJobs"


class LogSink:
    """Output lines -> CloudWatch Logs (moto), batched, with an optional injected delay."""

    def __init__(self, logs: Any, faults: Any) -> None:
        self.logs = logs
        self.faults = faults
        self.pending: dict[str, list[tuple[float, str]]] = {}
        self.created: set[str] = set()
        self.lock = threading.Lock()
        self.send_lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="cloudwatch").start()

    def put(self, stream: str, line: str, ts: float) -> None:
        with self.lock:
            self.pending.setdefault(stream, []).append((ts, line))

    def _loop(self) -> None:
        while not self.closed.wait(0.25):
            try:
                self.flush(self.faults.seconds("log_delay"))
            except Exception:
                traceback.print_exc(file=sys.stderr)

    def flush_all(self) -> None:
        """Send everything that is not held back by a log_delay fault."""
        self.flush(self.faults.seconds("log_delay"))

    def flush(self, delay: float = 0.0) -> None:
        cutoff = time.time() - delay
        with self.send_lock:
            with self.lock:
                batch: dict[str, list[tuple[float, str]]] = {}
                for stream, events in self.pending.items():
                    ready = [e for e in events if e[0] <= cutoff]
                    if ready:
                        batch[stream] = ready
                        self.pending[stream] = events[len(ready) :]
            for stream, events in batch.items():
                self._send(stream, events)

    def _send(self, stream: str, events: list[tuple[float, str]]) -> None:
        if not self.created:
            with contextlib.suppress(self.logs.exceptions.ResourceAlreadyExistsException):
                self.logs.create_log_group(logGroupName=LOG_GROUP)
            self.created.add(LOG_GROUP)
        if stream not in self.created:
            with contextlib.suppress(self.logs.exceptions.ResourceAlreadyExistsException):
                self.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
            self.created.add(stream)
        for i in range(0, len(events), 5000):
            chunk = [
                {"timestamp": int(ts * 1000), "message": line or " "}
                for ts, line in events[i : i + 5000]
            ]
            self.logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=chunk)

    def close(self) -> None:
        self.closed.set()
        with contextlib.suppress(Exception):
            self.flush()
