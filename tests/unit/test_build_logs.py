"""A build's log reaches the task log whole, a bounded read at a time: AWS CodeBuild's
CloudWatch Logs stream (pages) and Cloud Build's log object (byte ranges)."""

from __future__ import annotations

import asyncio
from typing import Any

from airflow_stepop.backends.log_lines import more_waiting
from airflow_stepop.backends.sagemaker import codebuild
from airflow_stepop.backends.sagemaker.codebuild import CodeBuildBuilder
from airflow_stepop.backends.vertex import cloud_build
from airflow_stepop.backends.vertex.cloud_build import CloudBuildBuilder
from airflow_stepop.triggers.log_drain import relay_round

HANDLE = {"job_id": "project:0c1d", "log_group": "/aws/codebuild/project", "log_uri": "gs://b/l"}


class Stream:
    """CloudWatch Logs' GetLogEvents over ``pages`` pages of two lines each."""

    def __init__(self, pages: int) -> None:
        self.pages = pages
        self.calls = 0

    async def get_log_events(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        assert kwargs["logStreamName"] == "0c1d" and kwargs["startFromHead"]
        page = int(kwargs.get("nextToken") or 0)
        if page >= self.pages:
            return {"events": [], "nextForwardToken": str(page)}
        events = [{"message": f"line {page}.{i}"} for i in range(2)]
        return {"events": events, "nextForwardToken": str(page + 1)}


def _relay(builder: Any, *, final: bool) -> list[str]:
    shown: list[str] = []

    async def show(lines: list[str], cursor: Any) -> None:
        shown.extend(lines)

    async def read(cursor: Any) -> Any:
        return await builder.alogs(HANDLE, cursor)

    asyncio.run(relay_round(read, show, None, final=final))
    return shown


def test_a_finished_codebuild_builds_log_is_relayed_whole_a_few_pages_a_read(monkeypatch):
    builder = CodeBuildBuilder(project="project")
    stream = Stream(pages=3 * codebuild.PAGES_PER_READ + 1)

    async def get(kind: str) -> Any:
        return stream

    monkeypatch.setattr(builder._clients, "get", get)
    builder._ended.add(HANDLE["job_id"])
    lines = _relay(builder, final=True)

    assert lines == [f"line {p}.{i}" for p in range(stream.pages) for i in range(2)]
    lines, cursor = asyncio.run(builder.alogs(HANDLE, None))
    assert len(lines) == 2 * codebuild.PAGES_PER_READ and more_waiting(cursor)


def test_a_finished_cloud_builds_log_is_relayed_whole_a_bounded_range_a_read(monkeypatch):
    builder = CloudBuildBuilder(project_id="p", location="us-central1")
    log = b"".join(b"step line %d\n" % i for i in range(1000))
    reads: list[int] = []
    monkeypatch.setattr(cloud_build, "LOG_READ_BYTES", 1000)

    def read_log(uri: str, offset: int) -> bytes:
        reads.append(offset)
        return log[offset : offset + cloud_build.LOG_READ_BYTES + 1]

    monkeypatch.setattr(builder, "_read_log", read_log)
    builder._ended.add(HANDLE["job_id"])
    lines = _relay(builder, final=True)

    assert lines == [f"step line {i}" for i in range(1000)]
    assert len(reads) > 10  # in pieces, never the whole object at once
