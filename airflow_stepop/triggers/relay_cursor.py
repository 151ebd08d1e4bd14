"""The log relay's cursor, saved beside the job's run so a resumed trigger continues from it.

Airflow gives a trigger no state of its own that survives a triggerer restart or an HA
failover, and the run directory is already the job's: ``<run_uri>/relay-<job>.json`` holds the
backend's last cursor (JSON), with the job's last lines up to it (the tail its event carries:
a job that died without a traceback is explained by them) and when a poll first saw the job
running (for the cost so far a resumed trigger shows). While the job runs it is saved at most
every ``SAVE_SECONDS`` after lines were relayed, and only past lines handed to the task log
``SETTLE_SECONDS`` before: a line logged is not yet in the log file (the triggerer's supervisor
reads it from a socket), and a triggerer killed outright must not leave a cursor past a line
its file never got. So a resumed trigger repeats at most those seconds of log, never the whole
log, and skips no line the killed triggerer may not have written (what it wrote stays in its
own trigger log file).
The last cursor is saved when the trigger is cancelled (a triggerer stopping), and the newest
settled one after the job's last lines, before its event (a triggerer killed between the two
resumes the trigger).
Two triggers of one job (HA) write the same kind of document: harmless. Saving is best
effort: a storage error never fails the step.
The document lies where the job writes (its run directory), so loading it is bounded as every
read of the triggerer: at most ``MAX_DOCUMENT_BYTES`` are read (a larger one is ignored: the
relay starts from the top, each read bounded), and its tail's lines are shown as the task log
shows a job's lines (``log_lines.visible``), cut to ``MAX_TAIL_CHARS``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_stepop.backends.log_lines import visible
from airflow_stepop.runtime.storage import join

log = logging.getLogger(__name__)

SAVE_SECONDS = 10.0
SETTLE_SECONDS = 2.0
# A saved cursor is a few KiB (Vertex AI's, with the log entry ids of its last seconds, some
# hundreds): a document far larger is not ours, and the triggerer does not read it.
MAX_DOCUMENT_BYTES = 4 << 20
MAX_TAIL_CHARS = 2000  # a tail line as the trigger saves it is 1000 characters and a note
# Object-store clients are made per thread: one thread for every trigger's cursor keeps it one.
_IO = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stepop-relay-cursor")


async def in_io_thread(function: Any, *args: Any) -> Any:
    return await asyncio.get_running_loop().run_in_executor(_IO, function, *args)


class CursorStore:
    def __init__(self, handle: dict[str, Any], conn_id: str | None) -> None:
        self.job_id = handle["job_id"]
        self.uri = join(handle["run_uri"], f"relay-{self.job_id}.json")
        self.conn_id = conn_id
        self.saved = 0.0
        # The cursors reached by rounds that relayed lines and were not saved yet, with when
        # and the tail up to them: each is saved once its lines have settled in the task log.
        self.unsaved: collections.deque[tuple[float, Any, tuple[str, ...]]] = collections.deque()
        # the last cursor and tail given to save(), written or not
        self.latest: tuple[Any, tuple[str, ...]] = (None, ())
        # The job's last lines up to the loaded cursor: a resumed trigger's event carries the
        # lines its predecessor relayed too.
        self.tail: list[str] = []
        # When a poll first saw the job running (wall clock), kept with the cursor: a resumed
        # trigger's "cost so far" counts from it, not from its own first poll.
        self.running_since: float | None = None

    def _storage(self) -> Any:
        from airflow_stepop.artifacts.storage import worker_storage

        return worker_storage(self.conn_id)

    async def load(self) -> Any:
        """The cursor a previous trigger of this job saved, or None (start from the top)."""

        def read() -> Any:
            try:  # one call: no exists() first
                document = json.loads(self._read_bounded())
            except FileNotFoundError:
                return None
            if not isinstance(document, dict) or document.get("job_id") != self.job_id:
                return None
            since = document.get("running_since")
            self.running_since = since if isinstance(since, (int, float)) else None
            cursor, tail = document.get("cursor"), document.get("tail")
            if cursor is not None and isinstance(tail, list):  # else the relay starts afresh
                kept = [line for line in tail if isinstance(line, str)]
                self.tail = [visible(line[:MAX_TAIL_CHARS]) for line in kept]
            if cursor is not None:  # where a relay after a user's kill goes on from
                self.latest = (cursor, tuple(self.tail))
            return cursor

        try:
            cursor = await in_io_thread(read)
        except Exception as exc:
            log.warning(
                "Could not read the log cursor %s (%s); relaying from the top", self.uri, exc
            )
            return None
        if cursor is not None:
            log.info("Continuing the log relay of job %s where it stopped", self.job_id)
        return cursor

    def _read_bounded(self) -> bytes:
        """The saved document, read up to ``MAX_DOCUMENT_BYTES``; a larger one is refused."""
        return self._storage().read_bounded(self.uri, MAX_DOCUMENT_BYTES)

    async def save(self, cursor: Any, *, relayed: int, tail: Collection[str]) -> None:
        """Note the cursor a round reached and the job's last lines up to it; write the newest
        one whose lines have settled, at most every ``SAVE_SECONDS``."""
        now = time.monotonic()
        self.latest = (cursor, tuple(tail))
        if relayed:
            self.unsaved.append((now, *self.latest))
        if now - self.saved >= SAVE_SECONDS:
            await self.save_settled()

    async def save_settled(self) -> None:
        """Write the newest cursor whose lines have settled in the task log, if any is
        unsaved: also after the job's last lines, before its event goes out (a triggerer
        killed between the two resumes the trigger, which then repeats only those seconds)."""
        settled, now = None, time.monotonic()
        while self.unsaved and self.unsaved[0][0] <= now - SETTLE_SECONDS:
            settled = self.unsaved.popleft()[1:]
        if settled is not None:
            await self._write(*settled)

    async def flush(self) -> None:
        """Save the last cursor now if lines were relayed since the last save: the trigger is
        being cancelled (a triggerer stopping cleanly, which writes what it was given), and
        the one that resumes it goes on from here."""
        if self.unsaved:
            self.unsaved.clear()
            await self._write(*self.latest)

    async def _write(self, cursor: Any, tail: tuple[str, ...]) -> None:
        try:  # not ASCII-escaped: a tail in another script would take six bytes a character
            document = json.dumps({
                "job_id": self.job_id,
                "cursor": cursor,
                "tail": tail,
                "running_since": self.running_since,
            }, ensure_ascii=False)  # fmt: skip
        except (TypeError, ValueError):
            return  # a backend whose cursor is not JSON relays from the top after a restart
        self.saved = time.monotonic()
        try:
            await in_io_thread(self._storage().write_bytes, self.uri, document.encode())
        except Exception as exc:
            log.warning("Could not save the log cursor of job %s: %s", self.job_id, exc)
