"""The shared poller: many waiting triggers, one batched status call per round."""

from __future__ import annotations

import asyncio
import time
from typing import ClassVar

import pytest

from airflow_stepop.backends.base import JobStatus, StepBackend
from airflow_stepop.triggers.poller import poller_for
from airflow_stepop.triggers.step_job import StepJobTrigger
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


def test_two_triggers_watching_one_job_both_get_its_state():
    """A cleared try's trigger and the retry that re-attached to its job wait side by side."""
    backend = ListingBackend(listed={"job-1"})

    async def ask():
        poller = poller_for("tests.ListingBackend.one_job", backend)
        due = time.monotonic() + 0.05
        both = (poller.status({"job_id": "job-1"}, due) for _ in range(2))
        return await asyncio.wait_for(asyncio.gather(*both), 30)  # a hang guard, not a timing

    answers = asyncio.run(ask())
    assert [a.state for a in answers] == ["running", "running"]
    assert backend.list_calls == 1


class SucceedingBackend(TriggerSideBackend):
    """Jobs that have succeeded; every instance records, in ``made``, what was asked of it."""

    made: ClassVar[list[SucceedingBackend]] = []

    def __init__(self) -> None:
        self.prepared = 0
        self.forgotten: list[str] = []
        self.closed = 0
        SucceedingBackend.made.append(self)

    def prepare_async(self):
        self.prepared += 1  # a cloud backend opens its async clients here

    def forget(self, handle):
        self.forgotten.append(handle["job_id"])

    async def aclose(self):
        self.closed += 1

    async def astatus(self, handle):
        return JobStatus("succeeded", details={"described": True})

    async def astatuses(self, handles):
        return {h["job_id"]: JobStatus("succeeded") for h in handles}


def _trigger(job_id: str, tmp_path) -> StepJobTrigger:
    return StepJobTrigger(
        backend_path=f"{__name__}.SucceedingBackend",
        backend_kwargs={},
        handle={"job_id": job_id, "run_uri": tmp_path.as_uri()},
        poll_interval=0.01,
    )


def test_only_the_poll_group_s_own_backend_is_prepared_and_each_job_forgotten_once(
    tmp_path, monkeypatch
):
    """Each trigger builds a backend to find its poll group; only the poller's is prepared
    (opens clients), so no trigger leaves clients unclosed, and the shared backend forgets a
    job once no trigger watches it."""
    monkeypatch.setattr(SucceedingBackend, "made", [])
    monkeypatch.setattr("airflow_stepop.triggers.step_job.LAST_LINES_GRACE_SECONDS", 0)

    async def watch_all():
        triggers = [_trigger(job, tmp_path) for job in ("job-a", "job-a", "job-b")]
        watching = asyncio.gather(*(anext(t.run()) for t in triggers))
        return await asyncio.wait_for(watching, 30)  # a hang guard, not a timing

    events = asyncio.run(watch_all())
    assert [e.payload["status"] for e in events] == ["succeeded"] * 3
    made = SucceedingBackend.made
    assert len(made) == 3  # one per trigger, to find its poll group
    shared = [b for b in made if b.prepared]
    assert [b.prepared for b in shared] == [1]
    assert sorted(shared[0].forgotten) == ["job-a", "job-b"]
    assert shared[0].closed == 1


@pytest.mark.parametrize(
    ("state", "running_since", "expected"),
    [
        ("pending", None, "pending, 1m05s since submit, on ml.g5.xlarge x 2, about $0 so far"),
        ("running", 3600.0, "running, 1m05s since submit, on ml.g5.xlarge x 2, about $2.0000 so far"),  # noqa: E501
        ("succeeded", 60.0, "succeeded, 1m05s since submit, on ml.g5.xlarge x 2, about $0.0333 so far"),  # noqa: E501
        # a second at $2/h is $0.00056; a twentieth of one is not "$0.0000"
        ("running", 0.05, "running, 1m05s since submit, on ml.g5.xlarge x 2, about <$0.0001 so far"),  # noqa: E501
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
    progress.seen_running = running_since is not None
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


def test_a_resumed_trigger_leaves_out_the_cost_of_a_job_that_ended_before_it_polled():
    """Its predecessor saw the job running; the job ended while no triggerer ran. The time
    since then is not running time: the billing line has the cost."""
    from airflow_stepop.triggers.progress import Progress

    handle = {"job_id": "j-t1", "submitted_at": 1000.0, "price_per_hour": 2.0}
    progress = Progress(handle, log=None, running_since=1010.0)
    assert progress.line(JobStatus("succeeded"), now=9000.0) == (
        "Job j-t1: succeeded, 2h13m since submit"
    )


def test_a_job_queued_for_capacity_says_since_when_and_shows_each_change():
    """Queued from the first poll: since submit. A job that becomes queued later (a pending
    job then told to wait in the service's queue) is shown at once, since that poll."""
    from airflow_stepop.triggers.progress import Progress

    class Lines(list):
        def info(self, line):
            self.append(line)

    lines = Lines()
    progress = Progress({"job_id": "j", "submitted_at": 1_800_000_000.0}, lines)
    progress.update(JobStatus("pending", queued=True), now=1_800_000_005.0)
    progress.update(JobStatus("pending", queued=True), now=1_800_000_010.0)
    progress.update(JobStatus("running"), now=1_800_000_100.0)
    assert lines == [
        "Job j: pending, 5s since submit, queued for capacity since 2027-01-15 08:00:00 UTC",
        "Job j: running, 1m40s since submit",
    ]
    later = Lines()
    progress = Progress({"job_id": "j", "submitted_at": 1_800_000_000.0}, later)
    progress.update(JobStatus("pending"), now=1_800_000_001.0)
    progress.update(JobStatus("pending", queued=True), now=1_800_000_002.0)
    assert later[-1].endswith("queued for capacity since 2027-01-15 08:00:02 UTC")


def test_why_a_job_waits_is_shown_at_once_and_again_when_it_changes():
    """A pod no node can take: the scheduler's message reaches the task log at the poll that
    saw it, and its next message too, without waiting for the minute's repeat."""
    from airflow_stepop.triggers.progress import Progress

    class Lines(list):
        def info(self, line):
            self.append(line)

    lines = Lines()
    progress = Progress({"job_id": "j", "submitted_at": 1000.0}, lines)
    gpu = "Unschedulable: 0/2 nodes are available: 1 Insufficient nvidia.com/gpu."
    for now, status in [
        (1, JobStatus("pending")),
        (2, JobStatus("pending", reason=gpu)),
        (3, JobStatus("pending", reason=gpu)),
        (4, JobStatus("pending", reason="Unschedulable: 0/2 nodes: 2 Insufficient cpu.")),
        (9, JobStatus("running")),
        (12, JobStatus("failed", reason="Error: exit code 1")),
    ]:
        progress.update(status, now=1000.0 + now)
    assert lines == [
        "Job j: pending, 1s since submit",
        f"Job j: pending, 2s since submit, {gpu}",
        "Job j: pending, 4s since submit, Unschedulable: 0/2 nodes: 2 Insufficient cpu.",
        "Job j: running, 9s since submit",
        "Job j: failed, 12s since submit",  # a failure's reason is the error's, not this line's
    ]
