"""DAGs the end-to-end tests run with dag.test() on the local backend."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import fault_operators
from airflow.sdk import dag, task
from step_helpers import make_array, record_pid, wait_for_file

from airflow_stepop import DockerSettings, LocalStepOperator, ResourceSettings

RESULTS = os.environ.get("STEPOP_TEST_RESULTS", "/tmp")


def _remember_failure(context):
    with open(f"{RESULTS}/failure.txt", "w") as handle:
        handle.write(f"{type(context['exception']).__name__}: {context['exception']}")


@dag(schedule=None)
def pass_big_array():
    @task.local_step(resources=ResourceSettings(cpu_count=1, memory="2GiB"))
    def prepare(megabytes: int):
        return make_array(megabytes)

    @task.local_step
    def summarize(array):
        return {"n": int(array.size), "sum": float(array.sum())}

    @task
    def check(summary, array_ref):
        import json

        array = array_ref.load()
        with open(f"{RESULTS}/check.json", "w") as handle:
            json.dump({"summary": summary, "loaded_size": int(array.size)}, handle)

    array = prepare(50)
    check(summarize(array), array)


pass_big_array()


@dag(schedule=None)
def returns_a_model_and_its_score():
    @task.local_step
    def train():
        import tempfile

        model = Path(tempfile.mkdtemp()) / "model"  # the job's own disk, gone after it
        model.mkdir()
        (model / "weights.txt").write_text("42")
        return {"model": model, "score": 0.9}

    @task.local_step
    def evaluate(trained):
        return {"weights": (trained["model"] / "weights.txt").read_text(), **trained}

    @task
    def check(trained, evaluated):
        import json

        with open(f"{RESULTS}/model.json", "w") as handle:
            json.dump(
                {
                    "model": type(trained["model"]).__name__,
                    "loaded": (trained["model"].load() / "weights.txt").read_text(),
                    "score": trained["score"],
                    "weights": evaluated["weights"],
                },
                handle,
            )

    trained = train()
    check(trained, evaluate(trained))


returns_a_model_and_its_score()


@dag(schedule=None)
def returns_a_missing_path():
    @task.local_step(on_failure_callback=_remember_failure)
    def train():
        Path("model.keras.tmp").write_bytes(b"weights")  # saved under another name
        return {"model": Path("model.keras"), "score": 0.9}

    train()


returns_a_missing_path()


@dag(schedule=None)
def step_raises():
    @task.local_step(on_failure_callback=_remember_failure)
    def explode(value: int):
        print("about to fail", flush=True)
        raise ValueError(f"bad value {value}")

    explode(42)


step_raises()


@dag(schedule=None)
def steps_set_their_task_state():
    @task.local_step
    def nothing_to_do():
        from airflow.sdk.exceptions import AirflowSkipException

        raise AirflowSkipException("no new rows today")

    @task.local_step(retries=2, retry_delay=timedelta(seconds=0))
    def bad_data():
        from airflow.sdk.exceptions import AirflowFailException

        with open(f"{RESULTS}/bad_data_tries.txt", "a") as tries:
            tries.write("try\n")
        raise AirflowFailException("the input is corrupt: retrying will not help")

    nothing_to_do()
    bad_data()


steps_set_their_task_state()


@dag(schedule=None)
def checkpoint_resumes():
    @task.local_step(retries=1, retry_delay=timedelta(seconds=0))
    def train() -> int:
        """Saves each epoch; the first try dies after epoch 3, the retry starts from there."""
        state = Path(os.environ["STEPOP_CHECKPOINT_DIR"]) / "epoch.txt"
        start = int(state.read_text()) if state.exists() else 0
        for epoch in range(start, 6):
            state.write_text(str(epoch + 1))
            if start == 0 and epoch == 2:
                raise RuntimeError("interrupted after epoch 3")
        return start

    train()


checkpoint_resumes()


@dag(schedule=None)
def mapped_steps():
    @task.local_step
    def square(x: int) -> int:
        return x * x

    @task
    def total(values):
        with open(f"{RESULTS}/total.txt", "w") as handle:
            handle.write(str(sum(values)))

    total(square.expand(x=[1, 2, 3]))


mapped_steps()


@dag(schedule=None)
def multiple_outputs_step():
    @task.local_step(multiple_outputs=True, deferrable=False)
    def split(n: int):
        return {"count": n, "items": make_array(1)[:n]}

    @task
    def check(count, items):
        with open(f"{RESULTS}/split.txt", "w") as handle:
            handle.write(f"{count} {len(items.load())} {type(items).__name__}")

    out = split(5)
    check(out["count"], out["items"])


multiple_outputs_step()


@dag(schedule=None)
def step_times_out():
    @task.local_step(execution_timeout=timedelta(seconds=5), on_failure_callback=_remember_failure)
    def sleepy():
        try:
            wait_for_file("/nonexistent/never", timeout=600)
        finally:  # the stop raises StepStopped here: what it prints reaches the task
            print("saved my checkpoint")

    sleepy()


step_times_out()


@dag(schedule=None)
def step_times_out_in_the_worker():
    @task.local_step(
        deferrable=False,
        execution_timeout=timedelta(seconds=5),
        on_failure_callback=_remember_failure,
    )
    def sleepy():
        wait_for_file("/nonexistent/never", timeout=600)

    sleepy()


step_times_out_in_the_worker()


class LosesWorkerAfterSubmit(fault_operators.LosesWorkerAfterSubmit, LocalStepOperator):
    pass


def held_step(pid_file: str, release: str) -> str:
    record_pid(pid_file)
    wait_for_file(release)
    return "done by the first job"


def _held_with_one_retry(operator: type) -> None:
    """The held step under a fault operator, with one immediate retry."""
    operator(
        task_id="held",
        python_callable=held_step,
        op_args=[f"{RESULTS}/held.pid", f"{RESULTS}/release"],
        retries=1,
        retry_delay=timedelta(seconds=0),
    )


@dag(schedule=None)
def retry_reattaches():
    _held_with_one_retry(LosesWorkerAfterSubmit)


retry_reattaches()


class ClearedWhileDeferred(fault_operators.ClearedWhileDeferred, LocalStepOperator):
    pass


@dag(schedule=None)
def cleared_while_deferred():
    _held_with_one_retry(ClearedWhileDeferred)


cleared_while_deferred()


@dag(schedule=None)
def held_until_killed():
    @task.local_step(poll_interval=0.5)
    def hold(pid_file: str):
        record_pid(pid_file)
        try:
            wait_for_file("/nonexistent/never", timeout=3600)
        finally:  # runs when the kill stops the job: its line must reach the task log
            print("held step: saving its work before it stops", flush=True)

    hold(f"{RESULTS}/held-until-killed.pid")


held_until_killed()


class KilledWhileSubmitting(fault_operators.KilledWhileSubmitting, LocalStepOperator):
    pass


class KilledBeforeSubmit(KilledWhileSubmitting):
    killed_before_submit = True


class MarkedBeforeDefer(KilledWhileSubmitting):
    held_until_marked = True


def _held_until_stopped(operator: type, pid_name: str) -> None:
    """The held step under a kill on its way to the defer; its job only ends when stopped."""
    operator(
        task_id="hold",
        python_callable=held_step,
        op_args=[f"{RESULTS}/{pid_name}.pid", "/nonexistent/never"],
    )


@dag(schedule=None)
def killed_while_submitting():
    _held_until_stopped(KilledWhileSubmitting, "killed-while-submitting")


killed_while_submitting()


@dag(schedule=None)
def killed_before_submit():
    _held_until_stopped(KilledBeforeSubmit, "killed-before-submit")


killed_before_submit()


@dag(schedule=None)
def marked_before_defer():
    _held_until_stopped(MarkedBeforeDefer, "marked-before-defer")


marked_before_defer()


BASE_IMAGE = os.environ.get("STEPOP_TEST_BASE_IMAGE", "stepop-base/python:3.11-bookworm")


@dag(schedule=None)
def container_step():
    @task.local_step
    def prepare():
        return make_array(1)

    @task.local_step(
        docker=DockerSettings(parent_image=BASE_IMAGE, environment={"STEP_FLAVOR": "container"}),
        resources=ResourceSettings(cpu_count=1, memory="1GiB"),
        environment={"HOME": "/tmp/step-home"},  # wins over the /tmp the job gets otherwise
    )
    def inspect(array):
        import sys

        return {
            "in_container": os.path.exists("/.dockerenv"),
            "flavor": os.environ.get("STEP_FLAVOR"),
            "home": os.environ.get("HOME"),
            "python": sys.executable,
            "sum": float(array.sum()),
        }

    @task
    def check(seen):
        import json

        with open(f"{RESULTS}/container.json", "w") as handle:
            json.dump(seen, handle)

    check(inspect(prepare()))


container_step()


class RecordsResources(LocalStepOperator):
    """Writes the ResourceSettings its (mapped) task got, then runs the step."""

    def execute(self, context):
        with open(f"{RESULTS}/resources-{context['ti'].map_index}.json", "w") as handle:
            import json

            json.dump(self.resource_settings.to_dict(), handle)
        return super().execute(context)


@dag(schedule=None)
def mapped_steps_with_resources():
    @task.local_step(resources=ResourceSettings(cpu_count=1, memory="1GiB"))
    def double(x: int) -> int:
        return 2 * x

    @task
    def total(values):
        with open(f"{RESULTS}/mapped-total.txt", "w") as handle:
            handle.write(str(sum(values)))

    total(double.expand(x=[1, 2]))
    RecordsResources.partial(
        task_id="classic", python_callable=abs, resources=ResourceSettings(cpu_count=2)
    ).expand(op_args=[[-1], [-2]])


mapped_steps_with_resources()


@dag(schedule=None)
def mapped_results_into_a_step():
    @task.local_step
    def square(x: int) -> int:
        return x * x

    @task.local_step
    def add_up(values) -> int:
        return sum(values)

    @task
    def keep(total):
        with open(f"{RESULTS}/mapped-into-step.txt", "w") as handle:
            handle.write(str(total))

    keep(add_up(square.expand(x=[1, 2, 3])))


mapped_results_into_a_step()


@dag(schedule=None)
def mapped_over_a_large_step_result():
    """A task mapped over a step's list result, larger than the inline limit the test sets."""

    @task.local_step
    def names() -> list[str]:
        return [letter * 60 for letter in "abc"]

    @task
    def measure(name: str) -> int:
        return len(name)

    @task
    def keep(lengths):
        with open(f"{RESULTS}/mapped-over-result.txt", "w") as handle:
            handle.write(str(sorted(lengths[:])))

    keep(measure.expand(name=names()))


mapped_over_a_large_step_result()


@dag(schedule=None)
def secret_in_environment():
    """A connection's password templated into a step's environment (the test defines it)."""

    @task.local_step(
        environment={"DB_PASSWORD": "{{ conn.stepop_test_db.password }}"},
        on_failure_callback=_remember_failure,
    )
    def connect():
        return "connected"

    connect()


secret_in_environment()


@dag(schedule=None)
def secret_as_argument():
    """A connection's password templated into a step's argument (the test defines it)."""

    @task.local_step(on_failure_callback=_remember_failure)
    def connect(settings: dict):
        return "connected"

    connect({"hosts": ["db.example"], "password": "{{ conn.stepop_test_db.password }}"})


secret_as_argument()


def scaled(factor: int, value: int) -> int:
    return factor * value


class Scaler:
    """A callable instance, as PythonOperator takes one."""

    def __init__(self, factor: int) -> None:
        self.factor = factor

    def __call__(self, value: int) -> int:
        return self.factor * value


@dag(schedule=None, render_template_as_native_obj=True, params={"n": 9, "pair": [3, 4]})
def plain_task_idioms():
    """What a plain @task or PythonOperator takes, given to steps."""
    import functools

    @task.local_step(environment={"N": "{{ params.n }}"})  # renders to the int 9
    def env_number():
        return os.environ["N"]

    @task.local_step
    async def asynchronous(x: int):
        import asyncio

        await asyncio.sleep(0)
        return x + 1

    @task.local_step(multiple_outputs=True)
    def nothing():
        return None

    @task.local_step
    def dated(ds, params=None, logical_date=None, run_id=None, **hp):
        """Named like context values, as a plain @task's parameters may be."""
        kinds = [type(logical_date).__module__, type(run_id).__name__]
        return [ds, params["n"], logical_date.date().isoformat(), kinds, sorted(hp)]

    @task.local_step
    def pair():
        return 3, "a"

    @task
    def kind(value):
        return [type(value).__name__, *value]

    @task.local_step
    def ordered(config: dict):  # a dict keeps its order both ways, as through a plain XCom
        return {"seen": [list(config), list(config["layers"])], "z": 1, "a": 2}

    @task
    def keys(value):
        return [*value["seen"], list(value)]

    @task
    def record(*values):
        import json

        with open(f"{RESULTS}/idioms.json", "w") as handle:
            json.dump(list(values), handle)

    partial = LocalStepOperator(
        task_id="partial", python_callable=functools.partial(scaled, 3), op_args=[5]
    )
    instance = LocalStepOperator(task_id="instance", python_callable=Scaler(4), op_args=[5])

    @task
    def arguments():
        return {"factor": 2, "value": 5}

    # op_kwargs an upstream task's output, op_args a template: PythonOperator takes both
    from_output = LocalStepOperator(
        task_id="from_output", python_callable=scaled, op_kwargs=arguments()
    )
    from_template = LocalStepOperator(
        task_id="from_template", python_callable=scaled, op_args="{{ params.pair }}"
    )
    steps = (env_number(), asynchronous(1), partial.output, instance.output, dated())
    config = {"rows": 1, "mean": 2.0, "layers": {"conv": 8, "bn": 8}}
    ordered_keys = keys(ordered(config))
    record(*steps, kind(pair()), from_output.output, from_template.output, ordered_keys)
    nothing()


plain_task_idioms()
