"""SageMaker's log lines from CloudWatch Logs, read within a small call budget and a bound.

CloudWatch Logs' account-wide quotas are low, so a training job's streams are read sparingly:
no call while the job is being provisioned; DescribeLogStreams when the job (re)enters its
Training phase (new streams), else at most once per LOG_STREAMS_INTERVAL; one GetLogEvents per
stream per LOG_EVENTS_INTERVAL, each one only with a token of the caller's budget.
The triggerer is shared by every deferred task, so one read takes at most PAGES_PER_READ pages
(GetLogEvents answers 1 MB at most a page) across the job's streams, a running job's streams
in turn. A finished job's last lines are read on to each stream's end (its first FINAL_PAGES
pages) over as many reads as that takes: the cursor says when more waits (``more``: the
trigger reads again at once), so the triggerer holds one read's pages at a time.
The cursor (one nextForwardToken per stream, and the finished job's pages read per stream) is
plain JSON, so another triggerer can resume it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_stepop.backends.log_lines import MORE, relayed_lines
from airflow_stepop.backends.sagemaker.job import LOG_GROUP, PENDING_SECONDARY, error_code

LOG_STREAMS_INTERVAL = 60.0
LOG_EVENTS_INTERVAL = 2.0
# Pages of one read, at most: 8 MB of events (a page is 1 MB or 10,000 events at most).
PAGES_PER_READ = 8
# Records a read stops taking further pages at: a page is at most 1 MB, but a progress bar of
# short \r frames makes one record of each, and a record costs far more than its bytes.
MAX_RECORDS_PER_READ = 20_000
FINAL_PAGES = 50  # per stream, for a finished job: up to 500,000 lines into the task log


async def read_new_lines(
    open_client: Callable[[], Awaitable[Any]],
    job: str,
    cursor: dict[str, Any] | None,
    *,
    final: bool,
    phase: str,
    allowed: Callable[[], bool],
) -> tuple[list[str], dict[str, Any]]:
    """The job's new lines since ``cursor`` (None at first) and the cursor to use next.

    ``phase`` is the job's last SecondaryStatus; ``final`` reads every stream to its end (the
    job has ended; past ``FINAL_PAGES`` pages of one stream, a line says where the rest is),
    ``PAGES_PER_READ`` pages a call. ``allowed()`` takes a token of the log budget before each
    call: none left stops the read where it is. Lines of a multi-instance job carry their
    host's name.
    """
    cursor = dict(cursor or {"streams": {}, "listed": 0.0, "read": 0.0, "phase": ""})
    going_on = cursor.pop(MORE, False) is True  # a finished job's last read, not yet at its end
    now = time.time()  # wall time: the cursor may be resumed by another triggerer process
    if not final and phase in ("", *PENDING_SECONDARY):
        cursor["phase"] = phase  # provisioning (again): new streams may follow
        return [], cursor
    if not final and now - cursor["read"] < LOG_EVENTS_INTERVAL:
        return [], cursor
    cursor["read"] = now
    client = await open_client()
    # the cursor is kept where the job may write: only this job's streams are read, whatever
    # a rewritten one names (another job's log would reach this task's log)
    saved = cursor["streams"] if isinstance(cursor.get("streams"), dict) else {}
    streams: dict[str, str | None] = {
        name: token
        for name, token in saved.items()
        if isinstance(name, str)
        and name.startswith(f"{job}/")
        and isinstance(token, (str, type(None)))
    }
    if (
        (final and not going_on)
        or not streams
        or (phase == "Training" != cursor.get("phase"))  # (re)started: new streams
        or now - cursor["listed"] >= LOG_STREAMS_INTERVAL
    ):
        if not allowed():
            return [], cursor
        cursor["listed"] = now
        cursor["phase"] = phase
        try:
            answer = await client.describe_log_streams(
                logGroupName=LOG_GROUP, logStreamNamePrefix=f"{job}/"
            )
        except Exception as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return [], cursor
            raise
        for stream in answer.get("logStreams", []):
            streams.setdefault(stream["logStreamName"], None)
    lines: list[str] = []
    if final:
        read = await _final_pages(client, streams, cursor, lines, allowed)
    else:
        read = await _running_pages(client, streams, cursor, lines, allowed)
    cursor["streams"] = streams
    if final and read and set(streams) - set(cursor.get("ended", [])):
        cursor[MORE] = True
    return lines, cursor


async def _running_pages(
    client: Any,
    streams: dict[str, str | None],
    cursor: dict[str, Any],
    lines: list[str],
    allowed: Callable[[], bool],
) -> int:
    """A running job's read: one page of each stream, at most PAGES_PER_READ streams, in turn
    from the one after the stream the last read ended with. The pages read."""
    last = cursor.get("last", "")
    names = sorted(streams)
    names = [n for n in names if n > last] + [n for n in names if n <= last]
    for pages, name in enumerate(names[:PAGES_PER_READ]):
        if len(lines) >= MAX_RECORDS_PER_READ or not allowed():
            return pages
        streams[name], _ = await _page(client, name, streams[name], len(streams), lines)
        cursor["last"] = name
    return min(len(names), PAGES_PER_READ)


async def _final_pages(
    client: Any,
    streams: dict[str, str | None],
    cursor: dict[str, Any],
    lines: list[str],
    allowed: Callable[[], bool],
) -> int:
    """Part of a finished job's last read: pages of each stream to its end, PAGES_PER_READ at
    most; ``cursor["ended"]`` names the streams read to their end (or to FINAL_PAGES). The
    pages read."""
    ended: list[str] = list(cursor.get("ended", []))
    counts: dict[str, int] = dict(cursor.get("pages", {}))
    pages = 0
    for name in sorted(set(streams) - set(ended)):
        while True:
            if counts.get(name, 0) >= FINAL_PAGES:
                lines.append(
                    f"[stepop] The log stream {name} has more lines than the task log takes "
                    f"({FINAL_PAGES} pages); the rest is in CloudWatch Logs, {LOG_GROUP}."
                )
                ended.append(name)
                break
            if pages >= PAGES_PER_READ or len(lines) >= MAX_RECORDS_PER_READ or not allowed():
                cursor.update(ended=ended, pages=counts)
                return pages
            streams[name], done = await _page(client, name, streams[name], len(streams), lines)
            pages += 1
            counts[name] = counts.get(name, 0) + 1
            if done:
                ended.append(name)
                break
    cursor.update(ended=ended, pages=counts)
    return pages


async def _page(
    client: Any, name: str, token: str | None, streams: int, lines: list[str]
) -> tuple[str | None, bool]:
    """One GetLogEvents page of stream ``name`` from ``token`` into ``lines``; the next token
    and whether the stream's end was reached."""
    kwargs: dict[str, Any] = {
        "logGroupName": LOG_GROUP,
        "logStreamName": name,
        "startFromHead": True,
    }
    if token:
        kwargs["nextToken"] = token
    answer = await client.get_log_events(**kwargs)
    events = answer.get("events", [])
    # a stream is <job>/<host>-<epoch>, e.g. algo-2-1700000000: each line says its host
    prefix = f"{name.split('/', 1)[1].rsplit('-', 1)[0]}: " if streams > 1 else ""
    for event in events:
        lines.extend(relayed_lines(prefix + event["message"]))
    next_token = answer.get("nextForwardToken")
    return next_token or token, not events or next_token == token
