"""The operator's failover loop (``operators/capacity.py``): which attempt runs which machine
type, what survives into another process (a retry, the task's resume after its deferral), and
the failure when every type was refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_stepop.backends.base import JobRequest, MachineChoice
from airflow_stepop.operators.capacity import CapacityFailover, NoCapacityLeftError

CHOICES = (MachineChoice("small", 1.0), MachineChoice("medium", 2.0), MachineChoice("large", 4.0))


class Store(dict):
    def set(self, key, value):
        self[key] = value


class Step(CapacityFailover):
    """What of an operator the loop uses: a log, its argument, and ``_start`` (recorded)."""

    def __init__(self, attempts=None):
        self.log = SimpleNamespace(warning=lambda *a: self.lines.append(a[0] % a[1:]))
        self.lines: list[str] = []
        self.capacity_attempts = attempts
        self.started: list[str] = []

    def _start(self, context, identity, backend, fresh=True):
        request = JobRequest(job_name="dag-fit-abc-t1", task_key="dag/run/fit/-1/i", spec_uri="",
                             run_uri="", code_uri="")  # fmt: skip
        self.started.append(self._attempt_request(context, backend, request))
        return "deferred"


def _context(store):
    ti = SimpleNamespace(try_number=1, dag_id="dag", run_id="run", task_id="fit", map_index=-1)
    return {"ti": ti, "task_state_store": store}


@pytest.fixture(autouse=True)
def _identity(monkeypatch):
    from airflow_stepop.operators import task_identity

    monkeypatch.setattr(task_identity, "task_identity", lambda context: None)


BACKEND = SimpleNamespace(machine_choices=lambda: CHOICES)


def test_each_refusal_starts_the_next_type_under_a_name_of_its_own():
    step, store = Step(), Store()
    step._reset_attempts(_context(store))
    assert step._fail_over(_context(store), BACKEND, "CapacityError: none") == "deferred"
    [request] = step.started
    assert request.machine == "medium" and request.job_name.endswith("-t1-a2")
    assert step.lines == ["No capacity for small: CapacityError: none. Trying medium (about "
                          "$2.00/h): attempt 2 of 3"]  # fmt: skip


def test_another_process_goes_on_from_the_attempt_the_store_keeps():
    store = Store()
    Step()._fail_over(_context(store), BACKEND, "no small")  # this try's first process
    later = Step()  # the task resumed after its deferral, or a retry that re-attached
    later._fail_over(_context(store), BACKEND, "no medium")
    assert later.started[0].machine == "large"
    with pytest.raises(NoCapacityLeftError) as failed:
        Step()._fail_over(_context(store), BACKEND, "no large")
    assert str(failed.value).endswith("- small: no small\n- medium: no medium\n- large: no large")


def test_capacity_attempts_bounds_the_list_and_says_how_many_more_fit():
    store = Store({"stepop_capacity": {"attempt": 1, "tried": [["small", "no small"]]}})
    with pytest.raises(NoCapacityLeftError, match=r"after 2 attempt\(s\) \(1 more fit: raise"):
        Step(attempts=2)._fail_over(_context(store), BACKEND, "no medium")


def test_a_fresh_start_begins_at_the_top_again():
    store = Store({"stepop_capacity": {"attempt": 2, "tried": [["small", "x"], ["medium", "y"]]}})
    step = Step()
    step._reset_attempts(_context(store))
    step._start(_context(store), None, BACKEND)
    assert step.started[0].machine == "small" and step.started[0].job_name == "dag-fit-abc-t1"
