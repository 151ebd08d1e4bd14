"""The step trigger's deadline: the task's execution_timeout stops the job within a poll round.

The trigger reads the time through its module's ``time``; these tests give it a clock that only
moves when the trigger waits (for a poll round or a back-off), so where each round falls is
exact whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from airflow_stepop.backends.base import JobStatus
from airflow_stepop.backends.log_lines import CONTINUES, relayed_lines
from airflow_stepop.triggers import job_log_relay, relay_cursor, step_job, user_kill
from airflow_stepop.triggers.poller import poller_for
from airflow_stepop.triggers.relay_cursor import CursorStore
from airflow_stepop.triggers.step_job import StepJobTrigger
from tests.unit.backend_doubles import TriggerSideBackend

START = 1_900_000_000.0  # wall-clock seconds when the trigger starts


class Clock:
    """``time.time`` and ``time.monotonic`` that move only when the trigger waits."""

    def __init__(self) -> None:
        self.elapsed = 0.0

    def time(self) -> float:
        return START + self.elapsed

    def monotonic(self) -> float:
        return self.elapsed

    def until(self, due: float) -> None:
        self.elapsed = max(self.elapsed, due)


class RunningBackend(TriggerSideBackend):
    """A job that runs until stopped; records when it was stopped (wall clock)."""

    first_poll_seconds = 0.25

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.stopped_at: list[float] = []

    async def astop(self, handle):
        self.stopped_at.append(self.clock.time())

    async def astatus(self, handle):
        return JobStatus("stopped" if self.stopped_at else "running")


class Poller:
    """The poll group's poller as the trigger sees it: a round at each ``due``, never sooner,
    and (like ``JobPoller``) never sooner than ``first_poll_seconds`` after the previous one."""

    def __init__(self, backend: RunningBackend, clock: Clock, error: Exception | None = None):
        self.backend = backend
        self.clock = clock
        self.error = error
        self.dues: list[float] = []
        self.rounds: list[float] = []

    async def status(self, handle, due):
        if len(self.dues) >= 100:
            raise AssertionError(f"still polling after 100 rounds; dues {self.dues[:12]}...")
        self.dues.append(due)
        if self.rounds:
            due = max(due, self.rounds[-1] + self.backend.first_poll_seconds)
        self.clock.until(due)
        self.rounds.append(self.clock.monotonic())
        if self.error is not None:
            raise self.error
        return JobStatus("running")


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(step_job, "time", clock)
    monkeypatch.setattr(job_log_relay, "time", clock)  # the trigger's relay half
    monkeypatch.setattr(user_kill, "time", clock)  # and its kill half
    return clock


def _trigger(tmp_path, *, deadline: float | None, poll_interval: float = 5.0) -> StepJobTrigger:
    handle = {"job_id": "dag-task-t1", "run_uri": tmp_path.as_uri(), "submitted_at": START}
    return StepJobTrigger(
        backend_path="tests.RunningBackend",
        backend_kwargs={},
        handle=handle,
        poll_interval=poll_interval,
        deadline=deadline,
    )


def _watch(trigger: StepJobTrigger, poller) -> Any:
    return trigger._watch(poller, CursorStore(trigger.handle, None))


def test_a_deadline_between_two_polls_stops_the_job_at_the_deadline_not_a_poll_later(
    clock, tmp_path
):
    """8 s timeout, 5 s poll interval: rounds at 0.25, 0.75, 1.75, 3.75, 7.75 s, then the wait
    to the next (12.75 s) is cut to the deadline: the job was stopped ~5 s late before."""
    backend = RunningBackend(clock)
    poller = Poller(backend, clock)
    event = asyncio.run(_watch(_trigger(tmp_path, deadline=START + 8.0), poller))
    assert event.payload["status"] == "timeout"
    assert poller.dues == pytest.approx([0.25, 0.75, 1.75, 3.75, 7.75, 8.0])
    assert backend.stopped_at == [pytest.approx(START + 8.0)]


def test_a_poll_round_spaced_past_the_deadline_stops_the_job_then(clock, tmp_path):
    """A poll interval shorter than the service's round spacing (0.3 s, 5 s): the first round
    comes at the poll interval, the next ones 5 s apart; the round after 15.3 s comes at
    20.3 s, past the 18 s deadline though the trigger asked for 15.6 s; the job is stopped
    then, not a round later."""
    backend = RunningBackend(clock)
    backend.first_poll_seconds = 5.0
    poller = Poller(backend, clock)
    trigger = _trigger(tmp_path, deadline=START + 18.0, poll_interval=0.3)
    event = asyncio.run(_watch(trigger, poller))
    assert event.payload["status"] == "timeout"
    assert poller.rounds == pytest.approx([0.3, 5.3, 10.3, 15.3, 20.3])
    assert backend.stopped_at == [pytest.approx(START + 20.3)]


def test_a_round_of_another_trigger_before_the_deadline_does_not_stop_the_job(clock, tmp_path):
    """In a busy poll group a round runs every second (other triggers are due), and each round
    answers every waiting trigger, sooner than it asked: only a round at or after the 7.5 s
    deadline stops the job."""

    class BusyGroup(Poller):
        async def status(self, handle, due):
            self.dues.append(due)
            now = self.clock.monotonic()
            self.clock.until(min(max(due, now), math.floor(now) + 1))  # the next whole second
            self.rounds.append(self.clock.monotonic())
            return JobStatus("running")

    backend = RunningBackend(clock)
    poller = BusyGroup(backend, clock)
    event = asyncio.run(_watch(_trigger(tmp_path, deadline=START + 7.5), poller))
    assert event.payload["status"] == "timeout"
    assert poller.rounds == pytest.approx([0.25, 0.75, 1, 2, 3, 4, 5, 6, 7, 7.5])
    assert backend.stopped_at == [pytest.approx(START + 7.5)]


def test_a_trigger_resumed_past_the_deadline_stops_the_job_after_one_round(clock, tmp_path):
    backend = RunningBackend(clock)
    poller = Poller(backend, clock)
    event = asyncio.run(_watch(_trigger(tmp_path, deadline=START - 30.0), poller))
    assert event.payload["status"] == "timeout"
    assert poller.dues == [0.0] and len(backend.stopped_at) == 1


def test_a_service_that_stops_answering_still_has_its_job_stopped_at_the_deadline(
    clock, tmp_path, monkeypatch
):
    """Back-offs after failed polls (5-60 s) end at the deadline too, and a failed poll at the
    deadline stops the job: before, the trigger backed off forever while the polls failed."""

    async def sleep(delay):
        clock.until(clock.monotonic() + delay)

    monkeypatch.setattr(step_job.asyncio, "sleep", sleep)
    backend = RunningBackend(clock)
    poller = Poller(backend, clock, error=ConnectionError("the service does not answer"))
    event = asyncio.run(_watch(_trigger(tmp_path, deadline=START + 8.0), poller))
    assert event.payload["status"] == "timeout"
    assert backend.stopped_at == [pytest.approx(START + 8.0)]
    assert max(poller.dues) == pytest.approx(8.0)


def test_what_a_job_prints_while_it_stops_at_the_deadline_is_relayed(clock, tmp_path, monkeypatch):
    """A cloud's stop returns at once; the step's ``finally:`` prints during the grace period
    that follows, and the trigger follows the job until the service says it stopped."""

    async def sleep(delay):
        clock.until(clock.monotonic() + delay)

    class SlowToStop(RunningBackend):
        async def astatus(self, handle):
            if self.stopped_at and clock.time() - self.stopped_at[0] >= 3:
                return JobStatus("stopped")
            return JobStatus("running")

        async def alogs(self, handle, cursor):
            if self.stopped_at and clock.time() - self.stopped_at[0] >= 2 and not cursor:
                return ["saving a checkpoint in finally:"], {"read": True}
            return [], cursor

    monkeypatch.setattr(step_job.asyncio, "sleep", sleep)
    backend = SlowToStop(clock)
    event = asyncio.run(_watch(_trigger(tmp_path, deadline=START + 8.0), Poller(backend, clock)))
    assert event.payload["status"] == "timeout"
    assert event.payload["log_tail"] == ["saving a checkpoint in finally:"]


def test_a_triggerer_restarting_while_the_job_stops_resumes_after_the_lines_it_relayed(
    clock, tmp_path, monkeypatch
):
    """The stop's lines (a ``finally:`` saving a checkpoint) move the saved cursor as the job's
    other lines do: a trigger resumed meanwhile neither repeats them nor loses them from its
    event's tail."""

    async def sleep(delay):
        clock.until(clock.monotonic() + delay)

    class StopsSlowly(RunningBackend):
        async def astatus(self, handle):
            stopped = self.stopped_at and clock.time() - self.stopped_at[0] >= 10
            return JobStatus("stopped" if stopped else "running")

        async def alogs(self, handle, cursor):
            if self.stopped_at and not cursor:
                return ["saving a checkpoint in finally:"], {"read": True}
            return [], cursor

    monkeypatch.setattr(step_job.asyncio, "sleep", sleep)
    monkeypatch.setattr(relay_cursor, "time", clock)
    asyncio.run(_watch(_trigger(tmp_path, deadline=START + 8.0), Poller(StopsSlowly(clock), clock)))

    resumed = CursorStore({"job_id": "dag-task-t1", "run_uri": tmp_path.as_uri()}, None)
    assert asyncio.run(resumed.load()) == {"read": True}
    assert resumed.tail == ["saving a checkpoint in finally:"]


def test_a_resumed_trigger_s_event_carries_the_lines_its_predecessor_relayed(tmp_path):
    """The job printed its last words, the triggerer was restarted, then the job was killed
    (out of memory, say): the failure's message still shows those words."""
    import json

    class DiesQuietly(TriggerSideBackend):
        async def astatus(self, handle):
            return JobStatus("failed", reason="killed", details={"exit_code": 137})

        async def alogs(self, handle, cursor):
            return [], cursor  # nothing past the saved cursor

    class Immediate:
        backend = DiesQuietly()

        async def status(self, handle, due):
            return await self.backend.astatus(handle)

    (tmp_path / "relay-dag-task-t1.json").write_text(json.dumps({
        "job_id": "dag-task-t1", "cursor": 7, "tail": ["allocating 90GiB"], "running_since": None
    }))  # fmt: skip
    trigger = _trigger(tmp_path, deadline=None)
    event = asyncio.run(_watch(trigger, Immediate()))
    assert event.payload["status"] == "failed"
    assert event.payload["log_tail"] == ["allocating 90GiB"]


def test_without_a_deadline_the_wait_grows_to_the_poll_interval(clock, tmp_path):
    class Ends(Poller):
        async def status(self, handle, due):
            await super().status(handle, due)
            if len(self.dues) < 8:
                return JobStatus("running")
            return JobStatus("succeeded", details={"billable_seconds": 30})

    backend = RunningBackend(clock)
    poller = Ends(backend, clock)
    event = asyncio.run(_watch(_trigger(tmp_path, deadline=None), poller))
    assert event.payload["status"] == "succeeded" and backend.stopped_at == []
    waits = [b - a for a, b in zip([0.0, *poller.dues], poller.dues, strict=False)]
    assert waits == pytest.approx([0.25, 0.5, 1, 2, 4, 5, 5, 5])


class ListingBackend(RunningBackend):
    first_poll_seconds = 0.01

    def __init__(self) -> None:
        super().__init__(Clock())
        self.listed: list[list[str]] = []

    async def astatuses(self, handles):
        self.listed.append([h["job_id"] for h in handles])
        return {h["job_id"]: JobStatus("running") for h in handles}


def test_the_poller_runs_a_round_for_a_trigger_due_before_the_others():
    """A trigger whose wait was cut to its deadline gets its round then, although the other
    triggers of its poll group wait a whole poll interval (the poller wakes for it)."""
    backend = ListingBackend()

    async def ask():
        poller = poller_for("tests.ListingBackend.deadline", backend)
        later = asyncio.ensure_future(poller.status({"job_id": "late"}, time.monotonic() + 3600))
        await asyncio.sleep(0)  # the poller now sleeps until the late trigger is due
        soon = poller.status({"job_id": "soon"}, time.monotonic() + 0.05)
        answer = await asyncio.wait_for(soon, 60)  # a hang guard, not a timing
        later.cancel()
        return poller, answer

    poller, answer = asyncio.run(ask())
    assert answer.state == "running" and poller.rounds == 1
    assert backend.listed == [["late", "soon"]]  # one round answers every waiting trigger


class UnreachableBackend(TriggerSideBackend):
    """A service the triggerer cannot reach for good: its connection was deleted, say."""

    def prepare_async(self):
        raise KeyError("The conn_id `aws_default` isn't defined")

    async def astatus(self, handle):
        raise AssertionError("never asked: the backend could not be prepared")


def test_a_trigger_that_cannot_reach_the_service_hands_the_job_back_to_the_task(tmp_path):
    """Raising would fail the task with no on_kill and its job running on: the event lets
    execute_complete stop the job, or leave it to a retry."""
    trigger = StepJobTrigger(
        backend_path=f"{__name__}.UnreachableBackend",
        backend_kwargs={},
        handle={"job_id": "dag-task-t1", "run_uri": tmp_path.as_uri()},
    )
    event = asyncio.run(anext(aiter(trigger.run())))
    assert event.payload["status"] == "unwatched"
    assert event.payload["reason"] == (
        'its state could not be read (KeyError: "The conn_id `aws_default` isn\'t defined")'
    )


def test_a_trigger_cancelled_by_a_stopping_triggerer_saves_where_its_relay_stopped(tmp_path):
    """The cursor is saved at most every 10 s while the job runs; a triggerer that stops
    (restart, deploy) cancels its triggers, and the one that resumes a trigger repeated up to
    those 10 s of log. Now the cancelled trigger saves its last cursor on the way out."""
    import json

    class Chatty(TriggerSideBackend):
        reads = 0

        async def astatus(self, handle):
            return JobStatus("running")

        async def alogs(self, handle, cursor):
            Chatty.reads += 1
            return [f"line {Chatty.reads}"], {"read": Chatty.reads}

    class Immediate:
        backend = Chatty()

        async def status(self, handle, due):
            await asyncio.sleep(0.01)
            return JobStatus("running")

    trigger = StepJobTrigger(
        backend_path="unused",
        backend_kwargs={},
        handle={"job_id": "dag-task-t1", "run_uri": tmp_path.as_uri()},
        poll_interval=0.01,
    )

    async def run_then_stop_the_triggerer() -> None:
        watching = asyncio.ensure_future(_watch(trigger, Immediate()))
        while Chatty.reads < 5:
            await asyncio.sleep(0.01)
        watching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watching

    asyncio.run(run_then_stop_the_triggerer())
    saved = json.loads((tmp_path / "relay-dag-task-t1.json").read_text())
    assert saved["cursor"] == {"read": Chatty.reads}


def test_a_resumed_trigger_counts_the_cost_so_far_from_when_the_job_began_running(tmp_path, capfd):
    """The first triggerer saw the job running an hour ago and saved that with its cursor:
    the one that resumes the trigger must not show the cost of the last seconds only."""
    import json
    import re

    class Running(TriggerSideBackend):
        async def astatus(self, handle):
            return JobStatus("running")

        async def alogs(self, handle, cursor):
            return [], cursor

    class Immediate:
        backend = Running()

        async def status(self, handle, due):
            await asyncio.sleep(0)
            return JobStatus("running")

    (tmp_path / "relay-dag-task-t1.json").write_text(
        json.dumps({"job_id": "dag-task-t1", "cursor": 7, "running_since": time.time() - 3600})
    )
    trigger = StepJobTrigger(
        backend_path="unused",
        backend_kwargs={},
        handle={
            "job_id": "dag-task-t1",
            "run_uri": tmp_path.as_uri(),
            "price_per_hour": 2.0,
            "submitted_at": time.time() - 3700,
        },  # fmt: skip
        poll_interval=0.01,
    )

    async def one_round_then_stop() -> None:
        watching = asyncio.ensure_future(_watch(trigger, Immediate()))
        await asyncio.sleep(0.2)
        watching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watching

    asyncio.run(one_round_then_stop())
    assert re.search(r"Job dag-task-t1: running, 1h01m since submit, about \$2\.000\d so far",
                     capfd.readouterr().out)  # fmt: skip


def test_a_very_long_line_reaches_the_task_log_in_pieces_and_the_event_cut(
    clock, tmp_path, monkeypatch
):
    """A progress bar with no newline can be megabytes: one log record of it, and an event
    carrying it in its tail (stored in Airflow's database), would be as big."""
    long_line = "".join(f"{i:>6}|" for i in range(3000))  # 21,000 characters

    class PrintsOneLongLineAndEnds(RunningBackend):
        async def alogs(self, handle, cursor):
            return ([], cursor) if cursor else (["short", long_line, ""], {"read": True})

        async def astatus(self, handle):
            return JobStatus("succeeded")

    class EndsAfterOneRound(Poller):
        async def status(self, handle, due):
            await super().status(handle, due)
            return JobStatus("succeeded")

    class TaskLog:  # the trigger's log records, as the task log gets them
        def __init__(self):
            self.records: list[str] = []

        def info(self, message, *args):
            self.records.append(message % args)

        warning = error = info

    task_log = TaskLog()
    monkeypatch.setattr(StepJobTrigger, "log", task_log)
    poller = EndsAfterOneRound(PrintsOneLongLineAndEnds(clock), clock)
    event = asyncio.run(_watch(_trigger(tmp_path, deadline=None), poller))
    assert event.payload["status"] == "succeeded"
    prefix = "[dag-task-t1] "
    pieces = [r.removeprefix(prefix) for r in task_log.records if r.startswith(prefix)]
    assert pieces[0] == "short" and pieces[-1] == ""
    assert pieces[1:-1] == relayed_lines(long_line)  # pieces of 8,000 characters at most
    assert all(piece.endswith(CONTINUES) for piece in pieces[1:-2])
    assert "".join(piece.removesuffix(CONTINUES) for piece in pieces[1:-1]) == long_line
    assert event.payload["log_tail"] == [
        "short", f"{long_line[:1000]}... (20000 more characters in the task log)", ""
    ]  # fmt: skip


class StopsWithLastWords(RunningBackend):
    """A cloud job still stopping (never ended while followed) whose ``finally:`` prints
    ``after`` seconds after the stop; its log holds ``earlier`` lines before that."""

    def __init__(self, clock: Clock, after: float, earlier: int = 0) -> None:
        super().__init__(clock)
        self.after, self.earlier = after, earlier

    async def astatus(self, handle):
        return JobStatus("running")

    async def alogs(self, handle, cursor):
        read = cursor or 0
        if read < self.earlier:
            return [f"line {i}" for i in range(read, self.earlier)], self.earlier
        stopping_for = self.clock.time() - self.stopped_at[0] if self.stopped_at else -1.0
        if read == self.earlier and stopping_for >= self.after:
            return ["saving a checkpoint in finally:"], read + 1
        return [], cursor


class TaskLog:
    """The trigger's log records, as the task log gets them."""

    def __init__(self) -> None:
        self.records: list[str] = []

    def info(self, message, *args):
        self.records.append(message % args)

    warning = error = info


def _killed(trigger: StepJobTrigger, backend: RunningBackend, poller: Any) -> None:
    """What Airflow does on a user's kill: cancel the trigger's watch, then await on_kill."""
    trigger._prepared_backend = lambda: backend

    async def kill() -> None:
        watching = asyncio.ensure_future(_watch(trigger, poller))
        while trigger._cursors is None:  # until the watch has loaded its cursor
            await asyncio.sleep(0)
        watching.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watching
        await trigger.on_kill()

    asyncio.run(kill())


@pytest.fixture
def waits(clock, monkeypatch):
    """The trigger's sleeps move the clock instead of waiting; its log is recorded."""

    real_sleep = asyncio.sleep

    async def sleep(delay):
        clock.until(clock.monotonic() + delay)
        await real_sleep(0)  # other tasks (the watch being cancelled, say) run meanwhile

    monkeypatch.setattr(step_job.asyncio, "sleep", sleep)
    task_log = TaskLog()
    monkeypatch.setattr(StepJobTrigger, "log", task_log)
    return task_log


class NoRound:
    """A poller whose first round never comes: the watch is cancelled while it waits."""

    def __init__(self, backend: RunningBackend) -> None:
        self.backend = backend

    async def status(self, handle, due):
        await asyncio.Event().wait()


@pytest.mark.parametrize(
    ("on_kill_timeout", "relayed"), [(30, True), (10, False)], ids=["in-time", "too-late"]
)
def test_a_kill_s_relay_reads_last_just_before_airflow_s_on_kill_timeout(
    clock, waits, tmp_path, monkeypatch, on_kill_timeout, relayed
):
    """Airflow cancels ``on_kill`` at ``[triggerer] on_kill_timeout``: the relay's last read
    falls ``KILL_MARGIN_SECONDS`` before it, not at its next round, which may be past it."""
    monkeypatch.setenv("AIRFLOW__TRIGGERER__ON_KILL_TIMEOUT", str(on_kill_timeout))
    backend = StopsWithLastWords(clock, after=24.0)  # after the round at 22.75 s
    _killed(_trigger(tmp_path, deadline=None), backend, NoRound(backend))
    line = "[dag-task-t1] saving a checkpoint in finally:"
    assert (line in waits.records) is relayed
    assert clock.monotonic() == on_kill_timeout - user_kill.KILL_MARGIN_SECONDS


def test_a_resumed_trigger_killed_before_its_first_round_relays_only_the_new_lines(
    clock, waits, tmp_path
):
    """Its predecessor relayed the job's first lines and saved the cursor past them."""
    import json

    (tmp_path / "relay-dag-task-t1.json").write_text(
        json.dumps({"job_id": "dag-task-t1", "cursor": 3, "tail": ["line 2"]})
    )
    backend = StopsWithLastWords(clock, after=1.0, earlier=3)
    _killed(_trigger(tmp_path, deadline=None), backend, NoRound(backend))
    relayed = [r for r in waits.records if r.startswith("[dag-task-t1]")]
    assert relayed == ["[dag-task-t1] saving a checkpoint in finally:"]
    saved = json.loads((tmp_path / "relay-dag-task-t1.json").read_text())
    assert saved["cursor"] == 4  # a retry re-attaching to the stopping job repeats nothing
