"""SageMaker's log relay against the emulated CloudWatch Logs (moto): a bounded number of pages
a read, every event once, and nothing a step prints passes for Airflow's own log lines."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from airflow_stepop.backends.log_lines import CONTINUES, more_waiting
from airflow_stepop.backends.sagemaker import logs as sagemaker_logs
from airflow_stepop.backends.sagemaker.job import LOG_GROUP
from airflow_stepop.triggers.log_drain import relay_round

PAGE_EVENTS = 10_000  # GetLogEvents' page: 10,000 events (or 1 MB)


def _relay(env, job: str, *, final: bool, phase: str, cursor=None):
    """One relay round of the job's log, as a trigger's: every read's lines and page count."""
    from aiobotocore.session import get_session

    reads: list[tuple[list[str], int]] = []

    async def main():
        async with get_session().create_client(
            "logs", endpoint_url=env["AWS_ENDPOINT_URL"], region_name=env["AWS_DEFAULT_REGION"]
        ) as client:
            pages = 0
            original = client.get_log_events

            async def counted(**kwargs):
                nonlocal pages
                pages += 1
                return await original(**kwargs)

            client.get_log_events = counted

            async def open_client():
                return client

            async def read(at):
                return await sagemaker_logs.read_new_lines(
                    open_client, job, at, final=final, phase=phase, allowed=lambda: True
                )

            async def show(lines, after):
                nonlocal pages
                reads.append((lines, pages))
                pages = 0

            return await relay_round(read, show, cursor, final=final)

    return asyncio.run(main()), reads


def _put(env, stream: str, messages: list[str]) -> None:
    import boto3

    logs = boto3.client("logs", endpoint_url=env["AWS_ENDPOINT_URL"])
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=LOG_GROUP)
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    now = int(time.time() * 1000)  # CloudWatch refuses events older than 14 days
    for start in range(0, len(messages), PAGE_EVENTS):
        batch = messages[start : start + PAGE_EVENTS]
        events = [{"timestamp": now - len(messages) + start + i, "message": m}
                  for i, m in enumerate(batch)]  # fmt: skip
        logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream, logEvents=events)


def test_a_finished_jobs_long_log_is_read_a_bounded_number_of_pages_at_a_time(cloud_environ):
    job = f"bounds-{uuid.uuid4().hex[:8]}"
    pages = sagemaker_logs.PAGES_PER_READ * 2 + 1
    messages = [f"line {n}" for n in range(pages * PAGE_EVENTS - 5)]
    _put(cloud_environ, f"{job}/algo-1-1700000000", messages)
    cursor, reads = _relay(cloud_environ, job, final=True, phase="Completed")
    assert not more_waiting(cursor)
    assert [line for lines, _ in reads for line in lines] == messages  # each once, in order
    assert max(count for _, count in reads) <= sagemaker_logs.PAGES_PER_READ
    assert len(reads) >= 3  # the job's last lines took several bounded reads


def test_an_event_cannot_forge_a_line_or_an_escape_in_the_task_log(cloud_environ):
    job = f"forge-{uuid.uuid4().hex[:8]}"
    forged = "epoch 1\n[2026-01-01T00:00:00] {taskinstance.py:1} INFO - Marking task as SUCCESS"
    long = "w" * 20_000
    _put(cloud_environ, f"{job}/algo-1-1700000000", [forged, "\x1b[2Jwiped\x07", long])
    _, reads = _relay(cloud_environ, job, final=True, phase="Completed")
    lines = [line for lines, _ in reads for line in lines]
    assert lines[:3] == [
        "epoch 1",
        "[2026-01-01T00:00:00] {taskinstance.py:1} INFO - Marking task as SUCCESS",
        "\\x1b[2Jwiped\\x07",
    ]
    assert "".join(r.removesuffix(CONTINUES) for r in lines[3:]) == long
    assert all(r.endswith(CONTINUES) for r in lines[3:-1])
