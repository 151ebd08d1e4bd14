"""DAGs whose steps end their tasks from the triggerer (tests/e2e/test_trigger_end.py)."""

from __future__ import annotations

import json
import os
from datetime import timedelta

from airflow.sdk import dag, task

QUICK_STEPS = 100
RESULTS = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")


def _write(name: str, value: object) -> None:
    with open(f"{RESULTS}/{name}", "w") as handle:
        json.dump(value, handle)


@dag(schedule=None)
def quick_steps_at_once():
    """Many steps whose jobs end about a second after their deferral, and no retries."""

    @task.local_step
    def quick(i: int) -> int:
        print(f"quick step {i} ran")
        return i

    @task
    def total(values):
        values = list(values)
        _write("total.json", {"types": sorted({type(v).__name__ for v in values}),
                              "sum": sum(values), "count": len(values)})  # fmt: skip

    total(quick.expand(i=list(range(QUICK_STEPS))))


quick_steps_at_once()

KUBERNETES_STEPS = 20
BASE = f"{os.environ.get('STEPOP_REGISTRY', '127.0.0.1:5000')}/stepop-base/python:3.11-bookworm"


@dag(schedule=None)
def kubernetes_steps_at_once():
    """Steps as Jobs on the emulated cluster (s3:// artifacts through signed URLs), at once."""

    @task.kubernetes_step(image_uri=BASE)
    def on_the_cluster(i: int) -> int:
        print(f"kubernetes step {i} ran")
        return i * i

    @task
    def squares(values):
        _write("squares.json", sorted(values))

    squares(on_the_cluster.expand(i=list(range(KUBERNETES_STEPS))))


kubernetes_steps_at_once()


@dag(schedule=None)
def results_from_the_trigger():
    """multiple_outputs, and a plain task mapped over a step's list."""

    @task.local_step(multiple_outputs=True)
    def split(n: int):
        return {"count": n, "names": ["a", "b", "c"][:n]}

    @task.local_step
    def listed() -> list[int]:
        return [1, 2, 3]

    @task
    def square(x: int) -> int:
        return x * x

    @task
    def check(count, names, squares):
        _write("checked.json", {"count": count, "names": names, "squares": sorted(squares)})

    parts = split(2)
    check(parts["count"], parts["names"], square.expand(x=listed()))


results_from_the_trigger()


@dag(schedule=None, default_args={"retries": 1, "retry_delay": timedelta(seconds=0)})
def failures_from_the_trigger():
    """A step that fails once then succeeds on its retry, and one that skips itself."""

    @task.local_step
    def flaky(marker: str) -> str:
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise ValueError("the first try fails on purpose")
        return "the second try"

    @task.local_step
    def skipper() -> None:
        from airflow.sdk.exceptions import AirflowSkipException

        raise AirflowSkipException("nothing to do today")

    flaky(f"{RESULTS}/flaky-marker")
    skipper()


failures_from_the_trigger()


def _record_success(context) -> None:
    _write("callback.json", {"task": context["ti"].task_id})


@dag(schedule=None)
def resumes_for_its_callback():
    """A step with on_success_callback: its task resumes in a worker, which runs it."""

    @task.local_step(on_success_callback=_record_success)
    def seven() -> int:
        return 7

    seven()


resumes_for_its_callback()


def _record_failure(context) -> None:
    error = context["exception"]
    _write(f"failure-{context['ti'].task_id}.json", f"{type(error).__name__}: {error}")


@dag(schedule=None, default_args={"on_failure_callback": _record_failure})
def failure_callbacks():
    """A failure callback keeps the worker for a failure only: a success still ends from the
    trigger."""

    @task.local_step
    def fine() -> int:
        return 1

    @task.local_step
    def broken() -> None:
        raise ValueError("broken on purpose")

    fine()
    broken()


failure_callbacks()
