"""A finished SageMaker job's last log read: all of a stream, or a line saying where the rest is."""

from __future__ import annotations

import asyncio

from airflow_stepop.backends.sagemaker import logs as sagemaker_logs


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
    client = _CloudWatch(pages)

    async def open_client():
        return client

    lines, _ = asyncio.run(
        sagemaker_logs.read_new_lines(
            open_client, "job-1", None, final=True, phase="Completed", allowed=lambda: True
        )
    )
    return lines


def test_a_finished_job_s_stream_is_read_to_its_end():
    assert _final_read(sagemaker_logs.FINAL_PAGES - 1) == [
        f"line {n}" for n in range(sagemaker_logs.FINAL_PAGES - 1)
    ]


def test_a_stream_longer_than_the_task_log_takes_says_where_the_rest_is():
    lines = _final_read(sagemaker_logs.FINAL_PAGES + 10)
    assert lines[:-1] == [f"line {n}" for n in range(sagemaker_logs.FINAL_PAGES)]
    assert "job-1/algo-1-1700000000 has more lines" in lines[-1]
    assert "CloudWatch Logs, /aws/sagemaker/TrainingJobs" in lines[-1]
