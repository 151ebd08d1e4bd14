"""Azure ML's log lines: the job's user log files (run history), read at a bounded rate.

A job's log files are read at most every LOG_DETAILS_INTERVAL (besides the log-rate budget),
one bounded range of LOG_READ_MAX bytes a file and read; their list (run history details) is
refreshed at most every LOG_FILES_INTERVAL, and at the end. A finished job's last read goes on
to each file's end (its last FINAL_READ_MAX at most): it is the only read left, and the end of
a log (the traceback) is what a failure is read for.
The stored cursor holds file offsets only (and how many run warnings were relayed): a clock
reading means nothing to the triggerer on another host that resumes it, and the files' URLs
(SAS URLs on Azure) stay in memory.

A job still waiting to start has no log file, but Azure ML says in its run details why a job
sits Queued (no VM of its size to allocate: "Instances of the specified VM size are not
currently available..."). Those warnings are relayed as they appear, read once a job has waited
QUEUED_WARNINGS_AFTER and then at most every LOG_FILES_INTERVAL: a short wait costs no call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airflow_stepop.backends.azureml.launch import map_status, rank_of, user_logs
from airflow_stepop.backends.ratelimit import TokenBucket

LOG_DETAILS_INTERVAL = 5.0
LOG_FILES_INTERVAL = 60.0
LOG_READ_MAX = 1 << 20  # bytes of one log file per call
FINAL_READ_MAX = 16 * LOG_READ_MAX  # a finished job's last read of one file: its last 16 MiB
QUEUED_WARNINGS_AFTER = 60.0  # seconds a job waits to start before its warnings are read
WARNINGS_MAX = 10  # run warnings relayed a job (each at most WARNING_CHARS characters)
WARNING_CHARS = 1000


class LogRelay:
    """A poll group's log reads: each job's log file URLs, when they were listed and read (on
    this process's clock)."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[dict[str, str], float]] = {}  # job -> (URLs, when)
        self._read: dict[str, float] = {}  # job -> last log read
        self._waiting: dict[str, float] = {}  # job -> when it was first seen waiting to start
        self._warned: dict[str, float] = {}  # job -> last read of its run warnings

    def ended(self, name: str, details: dict[str, Any]) -> None:
        """Run history's details of an ended job: its final list of log files."""
        self._files[name] = (user_logs(details), time.monotonic())

    def forget(self, name: str) -> None:
        """No trigger watches job ``name`` any more."""
        self._files.pop(name, None)
        self._read.pop(name, None)
        self._waiting.pop(name, None)
        self._warned.pop(name, None)

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
        warned = (cursor or {}).get("warnings")
        cursor = {"files": dict((cursor or {}).get("files") or {}),
                  "warnings": warned if isinstance(warned, int) else 0}  # fmt: skip
        final = state is not None and map_status(state).terminal
        now = time.monotonic()
        if state is None:
            return [], cursor
        if not final and map_status(state).state == "pending":
            return await self._warnings(name, cursor, now, client=client, limiter=limiter)
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
            read, offsets[path] = await read_file(
                client(), files[path], offsets.get(path, 0), final=final
            )
            prefix = f"{rank_of(path)}: " if len(files) > 1 else ""
            lines.extend(prefix + line for line in read)
        cursor["files"] = offsets
        return lines, cursor

    async def _warnings(
        self,
        name: str,
        cursor: dict[str, Any],
        now: float,
        *,
        client: Callable[[], Any],
        limiter: Callable[[], TokenBucket],
    ) -> tuple[list[str], Any]:
        """The run warnings of job ``name`` not relayed yet, while it waits to start: why it
        is still Queued. Read once it has waited QUEUED_WARNINGS_AFTER (on this process's
        clock), then at most every LOG_FILES_INTERVAL, a log token each."""
        since = self._waiting.setdefault(name, now)
        last = self._warned.get(name)
        due = since + QUEUED_WARNINGS_AFTER if last is None else last + LOG_FILES_INTERVAL
        if now < due or cursor["warnings"] >= WARNINGS_MAX or not limiter().try_acquire():
            return [], cursor
        self._warned[name] = now
        found = (await client().run_details(name)).get("warnings")
        messages = [
            str(w.get("message"))[:WARNING_CHARS]
            for w in (found if isinstance(found, list) else [])[:WARNINGS_MAX]
            if isinstance(w, dict) and w.get("message")
        ]
        lines = [f"Azure ML: {m}" for m in messages[cursor["warnings"] :]]
        cursor["warnings"] = max(cursor["warnings"], len(messages))
        return lines, cursor


async def read_file(client: Any, url: str, offset: int, *, final: bool) -> tuple[list[str], int]:
    """The whole lines of one log file past ``offset``, and the offset after them.

    A running job's file: one range of LOG_READ_MAX (a line still being written waits for its
    end; the rest waits for the next read). A finished job's: range after range to the end, so
    its last lines (the traceback) always arrive; when more than FINAL_READ_MAX is left, the
    read skips to the last FINAL_READ_MAX and says how much it left out.
    """
    lines: list[str] = []
    skipped_from: int | None = None
    while True:
        data, length = await client.read_log(url, offset, LOG_READ_MAX)
        if final and length is not None and length - offset > FINAL_READ_MAX + 1:
            # from the byte before the last FINAL_READ_MAX: a newline there starts a line
            skipped_from, offset = offset, length - FINAL_READ_MAX - 1
            continue
        full = len(data) == LOG_READ_MAX  # more may follow
        end = data.rfind(b"\n") + 1 if full or not final else len(data)
        if end == 0 and full:  # one line longer than a read: pass it on in pieces
            end = len(data)
        begin = 0
        if skipped_from is not None:  # drop the rest of the line the skip landed in
            begin = min(data.find(b"\n") + 1, end)
            left_out = offset + begin - skipped_from
            lines.append(f"[... {left_out} bytes of this log left out: a finished job's last "
                         f"read relays its last {FINAL_READ_MAX >> 20} MiB ...]")  # fmt: skip
            skipped_from = None
        lines.extend(data[begin:end].decode(errors="replace").splitlines())
        offset += end
        if not (final and full):
            return lines, offset
