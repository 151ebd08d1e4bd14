"""Many deferred steps in one real triggerer: status and log calls per poll interval, CPU share.

What is real: PostgreSQL (Debian's package, ``scripts/postgres.sh``) as Airflow's metadata
database, a private AIRFLOW_HOME (``airflow db migrate``), a DAG of N mapped steps serialized by
``airflow dags reserialize``, one dag run created by Airflow's own ``create_dagrun``, and for
each task instance what a worker does: the Execution API's ``run`` call, the step's own
staging and ``backend.submit`` (``encode_request`` and ``BaseStepOperator._prepare``, as in
``execute()``), the trigger the operator defers with (``_trigger``) and the Execution API's
``defer`` call with the message the task runner builds (``_defer_task``): the Trigger rows are
those a real defer writes. Then
one ``airflow triggerer --capacity N`` process runs every trigger until it fires
(``bench/airflow_rig.py``).

What is simulated: the jobs run no code and end when the bench says (the SageMaker, Vertex AI,
Azure ML and Kubernetes fakes' timer mode with ``STEPOP_FAKE_TIMER_END_FILE``, each fake the
bench's own, started with ``python -m cloud.<service>``; for the local backend a stand-in
interpreter from ``cloud.runner.write_local_timer``: one ``sh`` holding the job's lock and one
``cat`` of a FIFO per job), so that a thousand fit on a 2-core machine and deferring them, which
takes minutes here, does not eat into the measurement; the scheduler only through the rows it
would write (the dag run, queued task instances); no worker resumes the tasks after their
triggers fire.

Measured: service calls from the fakes' counters (sampled each second; for SageMaker the
CloudWatch Logs calls through a counting proxy on the connection's ``logs`` endpoint): status
calls (SageMaker ListTrainingJobs/DescribeTrainingJob, Vertex ListCustomJobs/GetCustomJob, Azure
ML Jobs_List/Jobs_Get, Kubernetes listBatchV1NamespacedJob and listCoreV1NamespacedPod/
readBatchV1NamespacedJob: list pages vs describes) and log calls (GetLogEvents...,
ListLogEntries, Runs_GetDetails and log file reads, readCoreV1NamespacedPodLog), and the CPU time
of the triggerer process and its children (psutil, each second). The steady state starts
``--ramp`` poll intervals after every trigger started watching its job (its trigger log says
so; the first polls come sooner) and lasts ``--steady`` seconds; then every job ends, and the
bench waits until every trigger fired.

    make cloud-up   # S3/CloudWatch Logs (moto), GCS, Azurite; the bench starts its own fakes
    .venv/bin/python bench/many_jobs.py [--backend all|sagemaker|vertex|azureml|kubernetes|local]
    .venv/bin/python bench/many_jobs.py --backend vertex --steps 200   # a quicker look
    .venv/bin/python bench/many_jobs.py --backend local --quick        # does it still run?
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.airflow_rig import (  # noqa: E402 - after the repository joined sys.path
    OPERATORS,
    Triggerer,
    Worker,
    airflow,
    airflow_env,
    assigned_triggers,
    create_run,
    events,
    postgres,
    still_deferred,
    wait,
    write_dag,
)
from bench.many_jobs_services import SERVICES, Service  # noqa: E402

# --quick: a smoke run (the same lines, figures of no weight): 4 steps, a 4 s steady state at a
# poll interval of 1 s (the cloud backends poll at most every 5 s: their figures per interval
# mean nothing then)
QUICK = {"steps": 4, "steady": 4.0, "poll": 1.0, "ramp": 1.0}
QUICK_HELP = f"a smoke run of about half a minute per backend: {QUICK}; the figures mean nothing"


def step(i: int) -> int:
    """The steps' callable (staged for every step; timer jobs never run it)."""
    return i


# ---- one backend's run: defer N steps, watch the triggerer, report ---------------------------


@dataclass
class Sample:
    at: float  # time.time()
    cpu: tuple[float, float]  # triggerer supervisor, its children (trigger runner)
    counts: dict[str, int]


def bench(service: Service, env: dict[str, str], args: argparse.Namespace, work: Path) -> None:
    from airflow.sdk.module_loading import import_string

    kind, n = service.kind, args.steps
    dag_id = write_dag(Path(env["AIRFLOW_HOME"]), kind, n, service.operator_kwargs)
    airflow(env, "dags", "reserialize")
    operator_class = import_string(OPERATORS[kind])

    def operator(map_index: int) -> Any:
        """A task instance's step operator with the DAG file's arguments, as its task process
        builds it: the callable's argument is the one the DAG maps (``op_args=[i]``), which the
        operator checks at construction as it does at a DAG's parse."""
        return operator_class(task_id="step", python_callable=step, op_args=[map_index],
                              **service.operator_kwargs)  # fmt: skip

    run_id, tis = create_run(dag_id)
    worker = Worker(dag_id, run_id, operator, service.make_submitter(operator(0)))
    triggerer = Triggerer(env, capacity=n, log=work / f"triggerer-{kind}.log")
    samples: list[Sample] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(Sample(time.time(), triggerer.cpu(), service.counts()))
            stop.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        began = time.time()
        print(f"[{kind}] {n} steps: run, stage, submit and defer each (8 threads)...", flush=True)
        worker(tis[0])  # first: clients and caches
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(worker, tis[1:]))
        deferred = time.time()
        print(f"[{kind}] deferred in {deferred - began:.0f} s; waiting for the triggerer to run "
              "them all...", flush=True)  # fmt: skip
        wait("the triggerer to take every trigger", lambda: assigned_triggers() >= n,
              timeout=600, every=min(2.0, args.poll))  # fmt: skip
        # Taken is not started: each trigger first reads its connection and builds its clients.
        logs = Path(env["AIRFLOW_HOME"]) / "logs" / f"dag_id={dag_id}"
        wait("every trigger to watch its job", lambda: watching(logs) >= n,
              timeout=600, every=min(2.0, args.poll))  # fmt: skip
        running = time.time()
        end = running + args.ramp * args.poll + args.steady
        service.release(end)  # every job ends then
        print(f"[{kind}] all {n} triggers watching their jobs {running - deferred:.0f} s later; "
              f"every job ends in {end - running:.0f} s; waiting for every trigger to fire...",
              flush=True)  # fmt: skip
        wait("every trigger to fire", lambda: still_deferred(dag_id, run_id) == 0,
              timeout=end - time.time() + 900, every=min(5.0, args.poll))  # fmt: skip
        fired = time.time()
        time.sleep(1.5)  # one more sample
    finally:
        stop.set()
        sampler.join()
        triggerer.stop()
        service.close()
    window = (running + args.ramp * args.poll, end)
    _report(service, args, samples, window, (began, deferred, running, fired),
            events(dag_id, run_id), triggerer)  # fmt: skip


def watching(logs: Path) -> int:
    """Triggers past their start-up: their task's trigger log says it waits for the job."""
    return sum(
        "Waiting for job" in path.read_text(errors="replace")
        for path in logs.rglob("*.log.trigger.*.log")
    )


def _at(samples: list[Sample], t: float) -> Sample:
    """The last sample taken at or before ``t``."""
    before = [s for s in samples if s.at <= t]
    return before[-1] if before else samples[0]


def _ops(a: Sample, b: Sample, ops: tuple[str, ...]) -> int:
    return sum(b.counts.get(op, 0) - a.counts.get(op, 0) for op in ops)


def _report(service: Service, args: argparse.Namespace, samples: list[Sample],
            window: tuple[float, float], marks: tuple[float, float, float, float],
            outcome: dict[str, int], triggerer: Triggerer) -> None:  # fmt: skip
    from airflow_stepop import config

    kind, n, poll = service.kind, args.steps, args.poll
    began, deferred, running, fired = marks
    a, b = _at(samples, window[0]), _at(samples, window[1])
    span = b.at - a.at
    print(f"\n=== {n} concurrent deferred {kind} steps in one `airflow triggerer` process "
          f"(PostgreSQL), poll_interval {poll:g} s ===")  # fmt: skip
    print(f"deferring them all: {deferred - began:.0f} s; then until every trigger watched its "
          f"job: {running - deferred:.0f} s; from the jobs' end until every trigger fired: "
          f"{fired - window[1]:.0f} s")  # fmt: skip
    print(f"outcome: {outcome}")
    if span < 2 * poll:
        print(f"steady state too short ({span:.0f} s): raise --steady")
        return
    intervals = span / poll
    print(f"steady state: {span:.0f} s = {intervals:.1f} poll intervals (from {args.ramp:g} "
          "intervals after the last trigger started to the jobs' end)")  # fmt: skip
    cpu_sup = (b.cpu[0] - a.cpu[0]) / span
    cpu_run = (b.cpu[1] - a.cpu[1]) / span
    end = samples[-1]
    total = (sum(end.cpu) - sum(samples[0].cpu)) / (end.at - samples[0].at)
    last = _at(samples, fired + 1)
    status = _ops(a, b, service.status_ops) / intervals
    logs = _ops(a, b, service.log_ops) / span
    if kind != "local":
        budget = config.get_float("log_calls_per_second")
        shares = ", ".join(
            f"{_ops(a, b, (op,)) / intervals:.1f} {op} "
            + ("describes" if op in service.final_ops else "pages")
            for op in service.status_ops
        )
        print(f"status calls per poll interval: {status:.1f} ({shares}) vs {n} for one "
              f"describe per job per interval (Airflow's operators): {100 * status / n:.2f}% "
              "(target <= 1%)")  # fmt: skip
        print(f"log calls ({', '.join(service.log_ops)}): {logs:.2f}/s vs the budget of "
              f"{budget:g}/s ([stepop] log_calls_per_second)")  # fmt: skip
        print(f"after the jobs' end: {_ops(b, last, service.final_ops)} describes (a finished "
              f"job's final facts, when its list entry lacks them: one each), "
              f"{_ops(b, last, service.log_ops)} log calls (a finished job's last read, outside "
              "the budget)")  # fmt: skip
    else:
        print(f"status calls: none, no service; the poller reads job records (local files): "
              f"{status:.1f} per poll interval for {n} jobs; log reads (output.log): "
              f"{logs:.1f}/s; after the jobs' end: {_ops(b, last, service.final_ops)} exit_code "
              "reads")  # fmt: skip
    print(f"counts: {dict(sorted(last.counts.items()))}")
    print(f"triggerer CPU, steady state: {100 * (cpu_sup + cpu_run):.1f}% of one core "
          f"(supervisor {100 * cpu_sup:.1f}%: Airflow's DB work and heartbeats; trigger runner "
          f"{100 * cpu_run:.1f}%: the triggers) (target < 10%); over the whole run "
          f"{100 * total:.1f}%")  # fmt: skip
    print(
        "real: the triggerer process, PostgreSQL, the task instances and Trigger rows, the "
        "provider's operator, staging, backend.submit and trigger; simulated: "
        + "; ".join(service.notes)
        + "; no scheduler or worker resumes the tasks after their event"
    )
    if args.keep:
        print(f"triggerer log: {triggerer.log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("all", *SERVICES), default="all")
    parser.add_argument("--steps", type=int, default=1000, help="concurrent deferred steps")
    parser.add_argument("--steady", type=float, default=180.0,
                        help="seconds of steady state measured; then every job ends")  # fmt: skip
    parser.add_argument("--poll", type=float, default=10.0, help="[stepop] poll_interval")
    parser.add_argument("--ramp", type=float, default=3.0,
                        help="poll intervals after the last trigger started before the steady "
                             "state (the first polls come sooner)")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    args = parser.parse_args()
    if args.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # cleanup runs on SIGTERM
    work = Path(tempfile.mkdtemp(prefix="stepop-many-jobs-"))
    work.chmod(0o755)  # the PostgreSQL server (user postgres when run as root) lives inside
    kinds = tuple(SERVICES) if args.backend == "all" else (args.backend,)
    try:
        with postgres(work) as url:
            env = airflow_env(work, url, args.poll)
            for kind in kinds:
                service = SERVICES[kind](work, env)
                # This process is one of the deployment's too, a quiet one.
                os.environ.update({**env, "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING"})
                if kind == kinds[0]:
                    airflow(env, "db", "migrate")
                bench(service, {**os.environ, **env}, args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"work directory kept: {work}")


if __name__ == "__main__":
    main()
