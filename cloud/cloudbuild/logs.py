"""A build's log, as Cloud Build writes it: ``<logsBucket>/log-<build id>.txt`` in GCS, written
while the build runs.

The log is kept in memory and, when the build names a ``logsBucket`` and its logging mode writes
to GCS (LEGACY, GCS_ONLY or unspecified), uploaded again whole at most every
:data:`FLUSH_SECONDS` while it has new lines, and once more at the end: a reader polling the
object sees it grow, as with Cloud Build's own streaming. A ``log_delay`` fault holds lines back
that long, while it stands. ``GET /_fake/logs/<build id>`` answers the log as text whatever the
mode.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

FLUSH_SECONDS = 0.5
GCS_MODES = ("LOGGING_UNSPECIFIED", "LEGACY", "GCS_ONLY")


@dataclass
class BuildLog:
    """One build's lines and where they are uploaded (``bucket`` None: nowhere)."""

    bucket: str | None
    object_name: str
    lines: list[tuple[float, str]] = field(default_factory=list)
    uploaded: int = 0  # lines in the object now
    lock: threading.Lock = field(default_factory=threading.Lock)
    upload_lock: threading.Lock = field(default_factory=threading.Lock)  # one upload at a time

    def add(self, line: str, ts: float | None = None) -> None:
        with self.lock:
            self.lines.append((ts or time.time(), line))

    def text(self, cutoff: float | None = None) -> tuple[str, int]:
        """The log up to ``cutoff`` (a ``log_delay``), and how many lines that is."""
        with self.lock:
            ready = [line for ts, line in self.lines if cutoff is None or ts <= cutoff]
        return "".join(f"{line}\n" for line in ready), len(ready)


class LogUploader:
    """Uploads the logs of running builds to GCS, a few times a second."""

    def __init__(self, storage: Any, faults: Any) -> None:
        self.storage = storage
        self.faults = faults
        self.logs: dict[int, BuildLog] = {}
        self.lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="cloudbuild-logs").start()

    def watch(self, log: BuildLog) -> None:
        if log.bucket is None:
            return
        with self.lock:
            self.logs[id(log)] = log

    def finish(self, log: BuildLog) -> None:
        """The build ended: upload what is left (lines a log_delay holds back are kept back)."""
        if log.bucket is None:
            return
        with self.lock:
            self.logs.pop(id(log), None)
        self.upload(log)

    def _loop(self) -> None:
        while not self.closed.wait(FLUSH_SECONDS):
            with self.lock:
                logs = list(self.logs.values())
            for log in logs:
                try:
                    self.upload(log)
                except Exception:
                    traceback.print_exc(file=sys.stderr)

    def upload(self, log: BuildLog) -> None:
        """Upload the log when it has lines the object lacks."""
        if self.storage is None or log.bucket is None:
            return
        with log.upload_lock:
            text, count = log.text(time.time() - self.faults.seconds("log_delay"))
            if count == log.uploaded:
                return
            blob = self.storage.bucket(log.bucket).blob(log.object_name)
            blob.upload_from_string(text, content_type="text/plain; charset=utf-8")
            log.uploaded = count

    def close(self) -> None:
        self.closed.set()
