"""The shared poller: many waiting triggers, one batched status call per round."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_stepop.backends.base import JobStatus, StepBackend
from airflow_stepop.triggers.poller import poller_for
from tests.unit.backend_doubles import TriggerSideBackend


class ListingBackend(TriggerSideBackend):
    """A service whose List call answers for the jobs in ``listed`` only."""

    def __init__(self, listed: set[str], failing: bool = False) -> None:
        self.listed = listed
        self.failing = failing
        self.list_calls = 0
        self.describes: list[str] = []

    async def astatus(self, handle):
        self.describes.append(handle["job_id"])
        return JobStatus("succeeded", details={"described": True})

    async def astatuses(self, handles):
        self.list_calls += 1
        if self.failing:
            raise ConnectionError("the service does not answer")
        return {h["job_id"]: JobStatus("running") for h in handles if h["job_id"] in self.listed}


async def _ask_all(backend: StepBackend, names: list[str]) -> list[JobStatus]:
    poller = poller_for("tests.ListingBackend", backend)
    due = time.monotonic() + 0.05
    return await asyncio.gather(*(poller.status({"job_id": n}, due) for n in names))


def test_a_hundred_waiting_jobs_cost_one_list_call_and_a_describe_for_each_unlisted_one():
    backend = ListingBackend(listed={f"job-{i}" for i in range(98)})
    answers = asyncio.run(_ask_all(backend, [f"job-{i}" for i in range(100)]))
    assert backend.list_calls == 1
    assert sorted(backend.describes) == ["job-98", "job-99"]
    assert [a.state for a in answers].count("running") == 98
    assert answers[99].details == {"described": True}


def test_a_failed_batch_reaches_every_waiting_trigger():
    backend = ListingBackend(listed=set(), failing=True)

    async def ask():
        poller = poller_for("tests.ListingBackend", backend)
        due = time.monotonic()
        return await asyncio.gather(
            *(poller.status({"job_id": n}, due) for n in ("a", "b")), return_exceptions=True
        )

    answers = asyncio.run(ask())
    assert all(isinstance(a, ConnectionError) for a in answers)
    assert backend.list_calls == 1


def test_one_poll_group_shares_one_poller_and_its_backend_within_a_loop():
    backend = ListingBackend(listed={"a"})

    async def two_pollers():
        first = poller_for("tests.ListingBackend", backend)
        same = poller_for("tests.ListingBackend", ListingBackend(listed=set()))
        return first, same

    first, same = asyncio.run(two_pollers())
    assert first is same and same.backend is backend


@pytest.mark.parametrize(
    ("state", "running_since", "expected"),
    [
        ("pending", None, "pending, 1m05s since submit, on ml.g5.xlarge x 2, about $0.0000 so far"),
        ("running", 3600.0, "running, 1m05s since submit, on ml.g5.xlarge x 2, about $2.0000 so far"),  # noqa: E501
        ("succeeded", 60.0, "succeeded, 1m05s since submit, on ml.g5.xlarge x 2, about $0.0333 so far"),  # noqa: E501
        # ended between two polls, never seen running: no cost rather than a wrong $0
        ("succeeded", None, "succeeded, 1m05s since submit, on ml.g5.xlarge x 2"),
    ],
)  # fmt: skip
def test_a_progress_line_shows_state_elapsed_machine_and_cost_so_far(
    state, running_since, expected
):
    from airflow_stepop.triggers.progress import Progress

    handle = {"job_id": "j-t1", "submitted_at": 1000.0, "machine": "ml.g5.xlarge x 2",
              "price_per_hour": 2.0}  # fmt: skip
    progress = Progress(handle, log=None)
    progress.running_since = None if running_since is None else 1065.0 - running_since
    assert progress.line(JobStatus(state), now=1065.0) == f"Job j-t1: {expected}"


def test_progress_is_logged_on_each_change_and_at_most_once_a_minute_otherwise():
    from airflow_stepop.triggers.progress import Progress

    class Lines(list):
        def info(self, line):
            self.append(line)

    lines = Lines()
    progress = Progress({"job_id": "j", "submitted_at": 0.0}, lines)
    for now, state in [(1, "pending"), (2, "pending"), (3, "running"), (30, "running"),
                       (64, "running"), (70, "succeeded")]:  # fmt: skip
        progress.update(JobStatus(state), now=float(now))
    assert [line.split(",")[0] for line in lines] == [
        "Job j: pending", "Job j: running", "Job j: running", "Job j: succeeded"
    ]  # fmt: skip
