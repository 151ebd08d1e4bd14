"""A private Airflow deployment for benchmarks, and task instances deferred as a worker does.

PostgreSQL (``scripts/postgres.sh``) and an AIRFLOW_HOME, a DAG of N mapped steps serialized by
``airflow dags reserialize``, one dag run from Airflow's own ``create_dagrun``, and for each task
instance what a worker does up to its defer (the Execution API's ``run``, the operator's staging,
``backend.submit``, its trigger, the Execution API's ``defer`` with the task runner's message):
the rows are those a real defer writes. ``Triggerer`` runs ``airflow triggerer`` and reads its
CPU time. Used by ``bench/many_jobs.py``.
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
OPERATORS = {
    "sagemaker": "airflow_stepop.operators.sagemaker.SageMakerStepOperator",
    "vertex": "airflow_stepop.operators.vertex.VertexStepOperator",
    "azureml": "airflow_stepop.operators.azureml.AzureMLStepOperator",
    "kubernetes": "airflow_stepop.operators.kubernetes.KubernetesStepOperator",
    "local": "airflow_stepop.operators.local.LocalStepOperator",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


QUIET = SimpleNamespace(info=lambda *args, **kwargs: None)  # a logger that says nothing


def wait(what: str, check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (answer := check()):
        if time.monotonic() > deadline:
            sys.exit(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(every)
    return answer


# ---- the deployment: PostgreSQL, AIRFLOW_HOME, DAG, triggerer ---------------------------------


@contextlib.contextmanager
def postgres(work: Path) -> Iterator[str]:
    script = str(ROOT / "scripts" / "postgres.sh")
    up = subprocess.run([script, "up", str(work / "pg"), str(_free_port())],
                        capture_output=True, text=True)  # fmt: skip
    if up.returncode:
        sys.exit(f"scripts/postgres.sh up failed:\n{up.stderr}")
    try:
        yield up.stdout.strip()
    finally:
        subprocess.run([script, "down", str(work / "pg")], check=False, capture_output=True)


def airflow_env(work: Path, url: str, poll: float) -> dict[str, str]:
    """The configuration every process of this deployment shares (bench and triggerer)."""
    from cryptography.fernet import Fernet

    home = work / "airflow"
    (home / "dags").mkdir(parents=True, exist_ok=True)
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
        "AIRFLOW__CORE__FERNET_KEY": Fernet.generate_key().decode(),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW__STEPOP__POLL_INTERVAL": f"{poll:g}",
    }


DAG_FILE = '''"""{n} mapped {kind} steps (bench/many_jobs.py)."""
import pendulum
from airflow.sdk import DAG

from {module} import {operator}


def step(i):
    return i


STEP_KWARGS = {kwargs!r}

with DAG("{dag_id}", schedule=None, start_date=pendulum.datetime(2026, 1, 1), catchup=False):
    {operator}.partial(task_id="step", python_callable=step, **STEP_KWARGS).expand(
        op_args=[[i] for i in range({n})]
    )
'''


def write_dag(home: Path, kind: str, n: int, kwargs: dict[str, Any]) -> str:
    module, operator = OPERATORS[kind].rsplit(".", 1)
    dag_id = f"stepop_many_{kind}"
    text = DAG_FILE.format(n=n, kind=kind, module=module, operator=operator, kwargs=kwargs,
                           dag_id=dag_id)  # fmt: skip
    (home / "dags" / f"{dag_id}.py").write_text(text)
    return dag_id


def airflow(env: dict[str, str], *args: str) -> None:
    done = subprocess.run([str(BIN / "airflow"), *args], env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"airflow {' '.join(args)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


class Triggerer:
    """``airflow triggerer --capacity N`` in its own session; CPU of its process tree."""

    def __init__(self, env: dict[str, str], capacity: int, log: Path) -> None:
        import psutil

        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "airflow"), "triggerer", "--capacity", str(capacity)],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.ps = psutil.Process(self.proc.pid)
        self.ended: dict[int, float] = {}  # CPU seconds of children seen, by pid

    def cpu(self) -> tuple[float, float]:
        """(supervisor, trigger runner and other children) CPU seconds so far."""
        import psutil

        times = self.ps.cpu_times()
        for child in self.ps.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                t = child.cpu_times()
                self.ended[child.pid] = t.user + t.system
        return times.user + times.system, sum(self.ended.values())

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


# ---- the task instances: a dag run, then run + submit + defer per step -----------------------


def create_run(dag_id: str) -> tuple[str, list[Any]]:
    """A dag run of the serialized DAG (its mapped task instances), queued as a scheduler would."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.sdk import timezone
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType
    from sqlalchemy import select, update

    now = timezone.utcnow()
    run_id = f"bench__{now:%Y%m%dT%H%M%S}"
    with create_session() as session:
        dag = DBDagBag().get_latest_version_of_dag(dag_id, session=session)
        assert dag is not None, f"{dag_id} was not serialized"
        dag.create_dagrun(run_id=run_id, logical_date=now, data_interval=(now, now),
                          run_after=now, run_type=DagRunType.MANUAL,
                          triggered_by=DagRunTriggeredByType.TEST, state=DagRunState.RUNNING,
                          session=session)  # fmt: skip
        session.flush()
        session.execute(
            update(TI).where(TI.dag_id == dag_id, TI.run_id == run_id)
            .values(state=TaskInstanceState.QUEUED, try_number=1, queued_dttm=now)
        )  # fmt: skip
        tis = session.execute(
            select(TI.id, TI.map_index).where(TI.dag_id == dag_id, TI.run_id == run_id)
            .order_by(TI.map_index)
        ).all()  # fmt: skip
    return run_id, [SimpleNamespace(id=t.id, map_index=t.map_index) for t in tis]


class Worker:
    """What a worker does for one step up to its defer, with Airflow's and the step's code."""

    def __init__(
        self, dag_id: str, run_id: str, operator: Callable[[int], Any], submitter: Any
    ) -> None:
        from airflow.jobs.triggerer_job_runner import TriggerRunnerSupervisor

        self.dag_id, self.run_id = dag_id, run_id
        # map index -> the step's operator, built with the DAG file's arguments for that index
        self.operator = operator
        self.submitter = submitter  # the backend that submits (the local timer for local)
        self.backend = operator(0).make_backend()  # the one the trigger is built from
        self.api = TriggerRunnerSupervisor.make_client(None)  # type: ignore[arg-type]
        self.lock = threading.Lock()

    def __call__(self, ti: Any) -> None:
        from airflow.sdk import timezone
        from airflow.sdk.exceptions import TaskDeferred
        from airflow.sdk.execution_time.task_runner import _defer_task

        from airflow_stepop.operators.job_request import encode_request
        from airflow_stepop.operators.task_identity import task_identity

        with self.lock:
            self.api.task_instances.start(ti.id, os.getpid(), timezone.utcnow())
        identity = SimpleNamespace(dag_id=self.dag_id, run_id=self.run_id, task_id="step",
                                   map_index=ti.map_index, try_number=1, id=ti.id)  # fmt: skip
        context = {"ti": identity}  # no task state store: the names of dag, run, task and map
        operator = self.operator(ti.map_index)
        step = task_identity(context)
        staging = encode_request(operator, context, step, self.backend)
        request = operator._prepare(context, step, staging)
        handle = {**self.submitter.submit(request), "submitted_at": time.time()}
        trigger = operator._trigger(self.backend, handle)
        deferred = TaskDeferred(trigger=trigger, method_name="execute_complete")
        message, _ = _defer_task(deferred, identity, QUIET)
        with self.lock:
            self.api.task_instances.defer(ti.id, message)


def still_deferred(dag_id: str, run_id: str) -> int:
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(
            select(func.count()).select_from(TI).where(
                TI.dag_id == dag_id, TI.run_id == run_id, TI.state == TaskInstanceState.DEFERRED
            )
        )  # fmt: skip


def events(dag_id: str, run_id: str) -> dict[str, int]:
    """What the fired triggers told the task instances (their event's status)."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.sdk.serde import deserialize
    from airflow.utils.session import create_session
    from sqlalchemy import select

    out: collections.Counter[str] = collections.Counter()
    with create_session() as session:
        for state, kwargs in session.execute(
            select(TI.state, TI.next_kwargs).where(TI.dag_id == dag_id, TI.run_id == run_id)
        ):
            event = (deserialize(kwargs) if kwargs else {}).get("event") or {}
            out[f"task instance {state}, event {event.get('status')}"] += 1
    return dict(out)


def assigned_triggers() -> int:
    """Trigger rows a triggerer has taken (running them)."""
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session
    from sqlalchemy import func, select

    with create_session() as session:
        return session.scalar(
            select(func.count()).select_from(Trigger).where(Trigger.triggerer_id.is_not(None))
        )  # fmt: skip
