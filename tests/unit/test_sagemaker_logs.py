"""A finished SageMaker job's last log read: all of a stream, or a line saying where the rest is."""

from __future__ import annotations

import asyncio

from airflow_stepop.backends.sagemaker import logs as sagemaker_logs
from airflow_stepop.triggers.log_drain import relay_round


class _CloudWatch:
    """One stream of ``pages`` pages of one event each, paged as GetLogEvents pages."""

    def __init__(self, pages: int) -> None:
        self.pages = pages

    async def describe_log_streams(self, **kwargs):
        return {"logStreams": [{"logStreamName": "job-1/algo-1-1700000000"}]}

    async def get_log_events(self, nextToken: str = "f/0", **kwargs):
        page = int(nextToken.split("/")[1])
        events = [{"message": f"line {page}"}] if page < self.pages else []
        return {"events": events, "nextForwardToken": f"f/{page + len(events)}"}


def _final_read(pages: int) -> list[str]:
    """A finished job's last read, as a trigger's relay round makes it: reads while more waits."""
    client = _CloudWatch(pages)
    shown: list[str] = []

    async def open_client():
        return client

    async def read(cursor):
        return await sagemaker_logs.read_new_lines(
            open_client, "job-1", cursor, final=True, phase="Completed", allowed=lambda: True
        )

    async def show(lines, cursor):
        assert len(lines) <= sagemaker_logs.PAGES_PER_READ + 1  # a read's pages at most
        shown.extend(lines)

    asyncio.run(relay_round(read, show, None, final=True))
    return shown


def test_a_finished_job_s_stream_is_read_to_its_end():
    assert _final_read(sagemaker_logs.FINAL_PAGES - 1) == [
        f"line {n}" for n in range(sagemaker_logs.FINAL_PAGES - 1)
    ]


def test_a_stream_longer_than_the_task_log_takes_says_where_the_rest_is():
    lines = _final_read(sagemaker_logs.FINAL_PAGES + 10)
    assert lines[:-1] == [f"line {n}" for n in range(sagemaker_logs.FINAL_PAGES)]
    assert "job-1/algo-1-1700000000 has more lines" in lines[-1]
    assert "CloudWatch Logs, /aws/sagemaker/TrainingJobs" in lines[-1]


def test_a_rewritten_cursor_cannot_name_another_jobs_log_stream():
    """The saved cursor lies in the run directory, which the job may write: a stream of another
    job's named there must not be read into this task's log."""
    read_streams: list[str] = []

    class Recording(_CloudWatch):
        async def get_log_events(self, logStreamName: str = "", **kwargs):
            read_streams.append(logStreamName)
            return await super().get_log_events(**kwargs)

    async def open_client():
        return Recording(1)

    forged = {"streams": {"other-team-job/algo-1-1": None, "job-1/algo-1-1700000000": None},
              "listed": 0.0, "read": 0.0, "phase": "Training"}  # fmt: skip
    asyncio.run(
        sagemaker_logs.read_new_lines(
            open_client, "job-1", forged, final=True, phase="Completed", allowed=lambda: True
        )
    )
    assert read_streams and set(read_streams) == {"job-1/algo-1-1700000000"}
