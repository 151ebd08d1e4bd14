"""SageMaker's log lines from CloudWatch Logs, read within a small call budget.

CloudWatch Logs' account-wide quotas are low, so a training job's streams are read sparingly:
no call while the job is being provisioned; DescribeLogStreams when the job (re)enters its
Training phase (new streams), else at most once per LOG_STREAMS_INTERVAL; one GetLogEvents per
stream per LOG_EVENTS_INTERVAL, each one only with a token of the caller's budget. The cursor
(one nextForwardToken per stream) is plain JSON, so another triggerer can resume it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from airflow_stepop.backends.sagemaker.job import LOG_GROUP, PENDING_SECONDARY, error_code

LOG_STREAMS_INTERVAL = 60.0
LOG_EVENTS_INTERVAL = 2.0
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
    job has ended; past ``FINAL_PAGES`` pages of one stream, a line says where the rest is).
    ``allowed()`` takes a token of the log budget before each call: none left
    stops the read where it is. Lines of a multi-instance job carry their host's name.
    """
    cursor = dict(cursor or {"streams": {}, "listed": 0.0, "read": 0.0, "phase": ""})
    now = time.time()  # wall time: the cursor may be resumed by another triggerer process
    if not final and phase in ("", *PENDING_SECONDARY):
        cursor["phase"] = phase  # provisioning (again): new streams may follow
        return [], cursor
    if not final and now - cursor["read"] < LOG_EVENTS_INTERVAL:
        return [], cursor
    cursor["read"] = now
    lines: list[str] = []
    client = await open_client()
    streams: dict[str, str | None] = dict(cursor["streams"])
    if (
        final
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
    for name in sorted(streams):
        token = streams[name]
        for _ in range(FINAL_PAGES if final else 1):
            kwargs: dict[str, Any] = {
                "logGroupName": LOG_GROUP,
                "logStreamName": name,
                "startFromHead": True,
            }
            if token:
                kwargs["nextToken"] = token
            if not allowed():
                break
            answer = await client.get_log_events(**kwargs)
            events = answer.get("events", [])
            # a stream is <job>/<host>-<epoch>, e.g. algo-2-1700000000: each line says its host
            prefix = f"{name.split('/', 1)[1].rsplit('-', 1)[0]}: " if len(streams) > 1 else ""
            lines.extend(prefix + event["message"] for event in events)
            next_token = answer.get("nextForwardToken")
            done = not events or next_token == token
            token = next_token or token
            if done:
                break
        else:  # every page read was full
            if final:
                lines.append(
                    f"[stepop] The log stream {name} has more lines than the task log takes "
                    f"({FINAL_PAGES} pages); the rest is in CloudWatch Logs, {LOG_GROUP}."
                )
        streams[name] = token
    cursor["streams"] = streams
    return lines, cursor
