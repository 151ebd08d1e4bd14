"""Azure ML's log lines: the job's user log files (run history), read at a bounded rate.

A job's log files are read at most every LOG_DETAILS_INTERVAL (besides the log-rate budget);
their list (run history details) is refreshed at most every LOG_FILES_INTERVAL, and at the end.
The stored cursor holds file offsets only: a clock reading means nothing to the triggerer on
another host that resumes it, and the files' URLs (SAS URLs on Azure) stay in memory.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow_stepop.backends.azureml_launch import map_status, rank_of, user_logs
from airflow_stepop.backends.ratelimit import TokenBucket

LOG_DETAILS_INTERVAL = 5.0
LOG_FILES_INTERVAL = 60.0
LOG_READ_MAX = 1 << 20  # bytes of one log file per call


class LogRelay:
    """A poll group's log reads: each job's log file URLs, when they were listed and read (on
    this process's clock)."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[dict[str, str], float]] = {}  # job -> (URLs, when)
        self._read: dict[str, float] = {}  # job -> last log read

    def ended(self, name: str, details: dict[str, Any]) -> None:
        """Run history's details of an ended job: its final list of log files."""
        self._files[name] = (user_logs(details), time.monotonic())

    def forget(self, name: str) -> None:
        """No trigger watches job ``name`` any more."""
        self._files.pop(name, None)
        self._read.pop(name, None)

    async def read(
        self,
        name: str,
        state: str | None,
        cursor: Any,
        *,
        client: Callable[[], Any],
        limiter: Callable[[], TokenBucket],
    ) -> tuple[list[str], Any]:
        """New lines of job ``name`` (last status ``state``) since ``cursor``, and the next
        cursor. ``client`` and ``limiter`` are called only when a read is due."""
        cursor = {"files": dict((cursor or {}).get("files") or {})}
        final = state is not None and map_status(state).terminal
        now = time.monotonic()
        if state is None or (not final and map_status(state).state == "pending"):
            return [], cursor
        last = self._read.get(name)
        if not final and last is not None and now - last < LOG_DETAILS_INTERVAL:
            return [], cursor
        bucket = limiter()

        def token() -> bool:
            # a finished job's last read takes none: no task waits on other jobs' logs
            return final or bucket.try_acquire()

        files, listed = self._files.get(name, ({}, 0.0))
        if not files or now - listed >= LOG_FILES_INTERVAL:  # at the end astatus listed them
            if not token():
                return [], cursor
            files = user_logs(await client().run_details(name))
            self._files[name] = (files, now)
        self._read[name] = now
        offsets = dict(cursor["files"])
        lines: list[str] = []
        for path in sorted(files):
            if not token():
                break
            offset = offsets.get(path, 0)
            data = (await client().read_log(files[path], offset))[:LOG_READ_MAX]
            complete = data.rfind(b"\n") + 1  # a line still being written waits for its end
            if final:
                complete = len(data)
            offsets[path] = offset + complete
            prefix = f"{rank_of(path)}: " if len(files) > 1 else ""
            lines.extend(
                prefix + line for line in data[:complete].decode(errors="replace").splitlines()
            )
        cursor["files"] = offsets
        return lines, cursor
