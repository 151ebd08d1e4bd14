"""A NaN, infinite, negative or huge number that reaches the triggerer never freezes its event
loop nor makes a wait unbounded.

The operator refuses such values when it takes them; these are the ones that reach a trigger
anyway (a trigger stored by an older version, a kwarg edited in the database, a backend's own
constant). The loop is shared by every deferred task: before, ``poll_interval=nan`` made the
poller spin without yielding, and ``inf`` doubled the wait between polls without a cap.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import threading
import time

import pytest
from structlog.testing import capture_logs

from airflow_stepop.backends.base import JobStatus
from airflow_stepop.triggers.poller import poller_for
from airflow_stepop.triggers.progress import Progress
from airflow_stepop.triggers.step_job import StepJobTrigger
from tests.unit.backend_doubles import TriggerSideBackend
from tests.unit.test_step_job_trigger import (
    START,
    Poller,
    RunningBackend,
    _watch,
    clock,  # noqa: F401 - a fixture
)

NAN, INF = float("nan"), float("inf")
POLLS = 6  # polls each real-loop test waits for: 0.01, 0.02, 0.04, ... 0.32 s apart


class InstantBackend(TriggerSideBackend):
    """A job that is always running, answered without ever suspending: a poller or trigger
    that does not itself wait on the loop between two polls spins with it."""

    polls: list[float] = []

    async def astatus(self, handle):
        InstantBackend.polls.append(time.monotonic())
        return JobStatus("running")


class NanFirstPoll(InstantBackend):
    first_poll_seconds = NAN


def _on_a_real_loop(main, seconds: float = 10.0):
    """Run ``main()`` on a real event loop in a thread; a loop that froze past ``seconds`` is
    stopped (an exception raised in its thread) and the test fails saying so."""
    outcome: dict = {}

    def runner():
        try:
            outcome["value"] = asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=runner, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(SystemExit)
        )
        thread.join(5)
        pytest.fail(f"the event loop froze: no answer within {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


async def _polls_while_counting_ticks(trigger: StepJobTrigger) -> tuple[int, list[float]]:
    """Run ``trigger`` until its job was polled ``POLLS`` times; meanwhile another task counts
    how often the loop let it run (``sleep(0)``: it asks for nothing but a turn)."""
    InstantBackend.polls = []
    watching = asyncio.ensure_future(anext(trigger.run()))
    ticks = 0
    while len(InstantBackend.polls) < POLLS:
        if watching.done():
            raise AssertionError(f"the trigger ended: {watching.result().payload}")
        await asyncio.sleep(0)
        ticks += 1
    watching.cancel()
    await asyncio.gather(watching, return_exceptions=True)
    return ticks, InstantBackend.polls


def _trigger(tmp_path, backend: type = InstantBackend, **kwargs) -> StepJobTrigger:
    handle = {"job_id": "dag-task-t1", "run_uri": tmp_path.as_uri()}
    return StepJobTrigger(
        backend_path=f"{__name__}.{backend.__name__}",
        backend_kwargs={},
        handle=handle,
        **kwargs,
    )


@pytest.mark.parametrize("poll_interval", [NAN, INF, -1.0, 0.0, 1e300, "5"])
def test_a_trigger_given_a_bad_poll_interval_yields_to_other_tasks_and_polls_at_bounds(
    tmp_path, poll_interval
):
    ticks, polls = _on_a_real_loop(
        lambda: _polls_while_counting_ticks(_trigger(tmp_path, poll_interval=poll_interval))
    )
    gaps = [b - a for a, b in zip(polls, polls[1:], strict=False)]
    assert min(gaps) >= 0.009  # one round per first_poll_seconds (0.01) at the most
    assert ticks > POLLS  # the loop served the other task between polls


def test_a_backend_whose_first_poll_seconds_is_nan_still_waits_between_rounds(tmp_path):
    ticks, polls = _on_a_real_loop(
        lambda: _polls_while_counting_ticks(_trigger(tmp_path, NanFirstPoll, poll_interval=0.05))
    )
    assert min(b - a for a, b in zip(polls, polls[1:], strict=False)) >= 0.009
    assert ticks > POLLS


@pytest.mark.parametrize("due", [NAN, -INF])
def test_the_poller_answers_a_due_that_is_not_a_time_at_once_and_keeps_yielding(due):
    """A trigger's ``due`` of NaN or -inf is a poll now: answered by one round, after which
    the poller waits on the loop instead of running empty rounds."""

    async def main():
        InstantBackend.polls = []
        poller = poller_for("tests.InstantBackend", InstantBackend(), "group")
        handle = {"job_id": "job"}
        await poller.attach(handle)
        try:
            first = await asyncio.wait_for(poller.status(handle, due), 5)
            second = await asyncio.wait_for(poller.status(handle, due), 5)
        finally:
            await poller.detach(handle)
        return first, second, poller.rounds

    first, second, rounds = _on_a_real_loop(main)
    assert first.state == second.state == "running"
    assert rounds == 2
    gap = InstantBackend.polls[1] - InstantBackend.polls[0]
    assert gap >= 0.009  # rounds stay first_poll_seconds apart


def test_an_infinite_poll_interval_polls_at_least_once_an_hour(clock, tmp_path):  # noqa: F811
    """``inf`` doubled the wait without a cap (a job ending after a day was seen a day late):
    the wait grows to the longest poll interval and stays there."""
    backend = RunningBackend(clock)
    poller = Poller(backend, clock)
    trigger = StepJobTrigger(
        backend_path="tests.RunningBackend",
        backend_kwargs={},
        handle={"job_id": "dag-task-t1", "run_uri": tmp_path.as_uri()},
        poll_interval=INF,
        deadline=START + 5 * 3600.0,  # as the previous version stored it
    )
    event = asyncio.run(_watch(trigger, poller))
    assert event.payload["status"] == "timeout"
    gaps = [b - a for a, b in zip(poller.rounds, poller.rounds[1:], strict=False)]
    assert max(gaps) == pytest.approx(3600.0)  # the longest poll interval
    assert backend.stopped_at == [pytest.approx(START + 5 * 3600.0)]


@pytest.mark.parametrize(
    ("kwargs", "attribute", "expected", "said"),
    [
        ({"poll_interval": NAN}, "poll_interval", 5.0, "poll_interval=nan is not a number"),
        ({"poll_interval": INF}, "poll_interval", 3600.0, "poll_interval=inf is outside"),
        ({"resume_hold": INF}, "resume_hold", 600.0, "resume_hold=inf is outside 0..600"),
        ({"resume_hold": -5}, "resume_hold", 0.0, "resume_hold=-5 is outside 0..600"),
        ({"time_left": NAN}, "time_left", 0.0, "time_left=nan is not a number"),
        ({"time_left": 1e12}, "time_left", 366 * 86400.0, "time_left=1000000000000.0 is"),
        ({"deadline": NAN}, "deadline", None, "deadline=nan is not a time: no deadline"),
    ],
)
def test_a_stored_number_out_of_range_is_clamped_and_said_in_the_task_log(
    tmp_path, kwargs, attribute, expected, said
):
    trigger = _trigger(tmp_path, **kwargs)
    assert getattr(trigger, attribute) == expected
    assert trigger.serialize()[1].get(attribute) == expected  # it round-trips clamped
    InstantBackend.polls = []

    async def first_poll():
        watching = asyncio.ensure_future(anext(trigger.run()))
        while not InstantBackend.polls and not watching.done():
            await asyncio.sleep(0)
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)

    with capture_logs() as logs:
        _on_a_real_loop(first_poll)
    warnings = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert any(said in line and "dag-task-t1" in line for line in warnings), warnings
    assert math.isfinite(trigger.poll_interval)


class Lines:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, line: str) -> None:
        self.lines.append(line)


@pytest.mark.parametrize(
    ("submitted_at", "running_since"), [(NAN, "soon"), (INF, -INF), (-INF, NAN), (None, INF)]
)
def test_progress_from_times_that_are_not_finite_still_shows_its_line(submitted_at, running_since):
    """``submitted_at`` comes from the worker, ``running_since`` from a file in the run
    directory (which the job can write): before, ``nan`` or a string there ended the trigger
    with a ValueError or a TypeError, the job then followed by nobody."""
    log = Lines()
    handle = {"job_id": "j", "submitted_at": submitted_at, "price_per_hour": 2.0}
    progress = Progress(handle, log, running_since=running_since)
    progress.update(JobStatus("running"))
    progress.update(JobStatus("succeeded"))
    assert log.lines[0].startswith("Job j: running, 0s since submit, about ")
    assert log.lines[1].startswith("Job j: succeeded, 0s since submit, about ")


@pytest.mark.parametrize(
    ("submitted_ago", "expected"),
    [
        (3.0, 2.0),  # a triggerer's pick-up took 3 s: the first poll comes 2 s on
        (60.0, 0.0),  # a trigger resumed long after the submit polls at once
        (-30.0, 5.0),  # the worker's clock ahead of this one: never more than the wait
        (None, 5.0),  # a handle without the submit's time (an older release's)
        (NAN, 5.0),
        (INF, 5.0),
    ],
)
def test_the_first_poll_is_due_first_poll_seconds_after_the_submit(
    tmp_path, submitted_ago, expected
):
    trigger = _trigger(tmp_path)
    if submitted_ago is None:
        trigger.handle.pop("submitted_at", None)
    elif math.isfinite(submitted_ago):
        trigger.handle["submitted_at"] = time.time() - submitted_ago
    else:
        trigger.handle["submitted_at"] = submitted_ago
    assert trigger._first_poll_in(5.0) == pytest.approx(expected, abs=0.5)
