"""A step whose image a service builds: the trigger follows the build, then creates the job.

The builder and the backend here are in-memory services the trigger rebuilds from their import
paths, as the triggerer does; the trigger, its poller, log relay and kill are the real ones.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, ClassVar

import pytest

from airflow_stepop.backends.base import JobNameTakenError, JobStatus, StepBackend
from airflow_stepop.backends.image_build import ImageBuilder
from airflow_stepop.backends.outcome import StepFailedError, before_job_failure
from airflow_stepop.triggers.step_job import StepJobTrigger

_groups = itertools.count()


class Builds(ImageBuilder):
    """Builds that end as ``outcome`` says after ``polls`` polls; logs two lines."""

    name = "Fake Build"
    archive_kind = "zip"
    first_poll_seconds = 0.01
    outcome: ClassVar[str] = "succeeded"
    polls: ClassVar[int] = 2
    seen: ClassVar[dict[str, int]] = {}
    stopped: ClassVar[list[str]] = []

    def __init__(self, group: str = "") -> None:
        self.group = group

    def serialize(self) -> dict[str, Any]:
        return {"group": self.group}

    def start(self, plan, source_uri, folder_uri):
        raise NotImplementedError

    def image_of(self, handle):
        raise NotImplementedError

    def handle_of(self, build_id, folder_uri):
        raise NotImplementedError

    def stop(self, handle):
        self.stopped.append(handle["job_id"])

    async def astatus(self, handle):
        build = handle["job_id"]
        if build in self.stopped:
            return JobStatus("stopped", "the build was stopped")
        self.seen[build] = self.seen.get(build, 0) + 1
        if self.seen[build] < self.polls:
            return JobStatus("running")
        return JobStatus(self.outcome, None if self.outcome == "succeeded" else "step 0 failed")

    async def alogs(self, handle, cursor):
        if cursor:
            return [], cursor
        return ["Step #0: ERROR: No matching distribution found for nosuchpkg==9"], 1

    async def astop(self, handle):
        self.stopped.append(handle["job_id"])


class Jobs(StepBackend):
    """Jobs created from a prepared body; they succeed at their first poll."""

    first_poll_seconds = 0.01
    created: ClassVar[list[dict[str, Any]]] = []
    refuse: ClassVar[Exception | None] = None

    def __init__(self, group: str = "") -> None:
        self.group = group

    def serialize(self):
        return {"group": self.group}

    def create(self, body):
        if self.refuse is not None:
            raise self.refuse
        self.created.append(body)
        return {"job_id": body["name"], "run_uri": body["run_uri"]}

    def find_active(self, task_key):
        return None

    def job_record(self, job_id):
        raise NotImplementedError

    def stop(self, handle):
        raise NotImplementedError

    async def astatus(self, handle):
        return JobStatus("succeeded", details={"ran": True})

    async def alogs(self, handle, cursor):
        return [], cursor

    async def astop(self, handle):
        return None


@pytest.fixture(autouse=True)
def fresh_services():
    Builds.outcome, Builds.polls = "succeeded", 2
    Builds.seen, Builds.stopped = {}, []
    Jobs.created, Jobs.refuse = [], None


def _trigger(tmp_path, joined: bool = False) -> StepJobTrigger:
    group = f"g{next(_groups)}"
    run_uri = str(tmp_path / "run")
    build = {"job_id": "build-1", "run_uri": run_uri, "image": "reg/env:abc", "builder": "Fake"}
    if joined:  # another task started it
        build["joined"] = True
    return StepJobTrigger(
        backend_path=f"{__name__}.Jobs",
        backend_kwargs={"group": group},
        handle=build,
        poll_interval=0.05,
        image_build={
            "builder_path": f"{__name__}.Builds",
            "builder_kwargs": {"group": group},
            "handle": build,
        },  # fmt: skip
        prepared={"name": "job-1", "run_uri": run_uri},
    )


def _event(trigger: StepJobTrigger) -> dict[str, Any]:
    async def first():
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(first())


def test_the_job_is_created_once_the_build_succeeded_and_then_followed(tmp_path):
    event = _event(_trigger(tmp_path))

    assert Builds.seen["build-1"] >= 2  # followed to its end before anything was created
    assert Jobs.created == [{"name": "job-1", "run_uri": str(tmp_path / "run")}]
    assert event["status"] == "succeeded" and "phase" not in event
    assert event["handle"]["job_id"] == "job-1"  # the task resumes with the job's handle


def test_a_failed_build_ends_the_step_before_any_job_with_the_builds_reason_and_log(tmp_path):
    Builds.outcome = "failed"
    event = _event(_trigger(tmp_path))

    assert Jobs.created == []
    assert event["phase"] == "image" and event["status"] == "failed"
    error = before_job_failure(event)
    assert isinstance(error, StepFailedError)
    message = str(error)
    assert "reg/env:abc was not built" in message and "step 0 failed" in message
    assert "No job was created" in message
    assert "No matching distribution found for nosuchpkg==9" in message  # the build's log tail


def test_a_job_name_held_by_another_try_hands_the_create_back_to_the_worker(tmp_path):
    Jobs.refuse = JobNameTakenError("job-1", "another-try")
    event = _event(_trigger(tmp_path))

    assert event["status"] == "name_taken" and event["phase"] == "create"
    assert "belongs to another try" in event["reason"]


def test_a_create_the_service_refuses_fails_the_step_saying_the_image_was_built(tmp_path):
    Jobs.refuse = ValueError("instance type ml.x.large is not offered")
    event = _event(_trigger(tmp_path))

    assert event["phase"] == "create" and event["status"] == "failed"
    assert "was built" in str(before_job_failure(event))
    assert "ml.x.large is not offered" in str(before_job_failure(event))


def test_a_users_kill_during_the_build_stops_the_build_not_a_job(tmp_path):
    Builds.polls = 10**6  # runs until stopped
    trigger = _trigger(tmp_path)
    _kill_while_building(trigger)
    assert Builds.stopped == ["build-1"]
    assert Jobs.created == []


async def _first(trigger):
    async for event in trigger.run():
        return event


def _kill_while_building(trigger: StepJobTrigger) -> None:
    """A user's kill once the trigger follows the build: its run cancelled, then on_kill."""

    async def kill():
        running = asyncio.ensure_future(_first(trigger))
        while not Builds.seen.get("build-1"):
            await asyncio.sleep(0.01)
        running.cancel()
        await trigger.on_kill()

    asyncio.run(kill())


def test_the_tasks_deadline_during_the_build_stops_the_build_and_times_the_task_out(tmp_path):
    Builds.polls = 10**6  # runs until stopped
    trigger = _trigger(tmp_path)
    trigger.time_left = 0.3  # what was left of execution_timeout at the deferral
    event = _event(trigger)

    assert event["status"] == "timeout" and event["phase"] == "image"
    assert Builds.stopped == ["build-1"] and Jobs.created == []
    error = before_job_failure(event)
    assert type(error).__name__ == "AirflowTaskTimeout"
    assert "reg/env:abc was not built" in str(error)


def test_a_build_other_tasks_wait_for_goes_on_past_this_tasks_kill_and_deadline(tmp_path):
    """A task that joined another's build (a mapped task, a retry) stops nothing of theirs."""
    Builds.polls = 10**6
    trigger = _trigger(tmp_path, joined=True)
    trigger.time_left = 0.3
    event = _event(trigger)
    assert event["status"] == "timeout" and Builds.stopped == []

    trigger = _trigger(tmp_path, joined=True)
    _kill_while_building(trigger)
    assert Builds.stopped == []
