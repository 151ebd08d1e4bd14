"""The step cache (``cache=True``): a hit's worker time against a miss's, and an unchanged
re-run of the example pipeline.

1. **One step, hit vs miss** (local backend). The step of ``execute_overhead.py`` (the example's
   ``model.train`` imported by name, a ``--rows`` x 33 float32 array as its input) with
   ``cache=True``. Each sample runs in a child forked from one parent that holds what the Task
   Runner has imported before it parses the DAG file, and parses first, untimed, as a task
   process does (``execute_overhead.py`` says why). Three kinds of sample, in turn:

   * a miss's ``execute()``: the key is new (another ``cache_version`` each sample, the same
     bytes), so it looks the key up, uploads the inputs and the spec (the code bundle is in the
     store already: warm caches), starts the job and defers; untimed after it, the child runs
     the trigger until the job's event;
   * that miss's ``execute_complete()``, in a task process of its own as after a deferral: it
     reads the result and keeps the cache entry. A miss holds a worker slot for both;
   * a hit's ``execute()``: the key of a warm-up miss that completed, in a fresh process (a
     re-run of the same step): it encodes the step locally to take the key, verifies the entry
     (the job's record, its spec, the result's artifacts' stamps) and returns the result.

   Per side: median wall and CPU seconds, jobs made (job records in the local jobs directory),
   and what the worker moved through the artifact store (``Storage``'s writes and reads in the
   task process, counted by object and byte; the job's own writes are not the worker's).

2. **The example pipeline re-run unchanged** (``dags_examples/train_pipeline.py``, local
   backend): ``airflow dags test stepop_train_pipeline`` as ``make demo`` runs it, twice, in a
   private AIRFLOW_HOME with the cache on for the deployment (``[stepop] cache``, as
   ``AIRFLOW__STEPOP__CACHE=True``). Per run: the task tries (four tasks; more is a retry, which
   the example allows once, after 10 s), the jobs made (the second run must make none), the
   cache hits its task log reports, the command's wall time (what a user waits for, with the
   CLI's start and the DAG's parse) and the DAG run's own (its start and end dates, which
   include ``dag.test()`` starting its in-process API server), and the ratios. ``--samples N``
   runs a copy of the file whose ``prepare()`` makes N samples instead of its 400 000 (the
   quick mode does).

    .venv/bin/python bench/step_cache.py [--runs 10] [--rows 1000] [--samples N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "dags_examples"
PIPELINE = EXAMPLES / "train_pipeline.py"
DAG_ID = "stepop_train_pipeline"
sys.path.insert(0, str(EXAMPLES))

# --quick: a smoke run (the same lines, figures of no weight): one sample of each side, and the
# pipeline's data 100 times smaller
QUICK = {"runs": 1, "samples": 4000}
QUICK_HELP = f"a smoke run of about 30 s: {QUICK}; the figures mean nothing"


# ---- 1. one step: a hit's execute() against a miss's execute() and execute_complete() -------


class StateStore(dict):
    """The task state store of one task instance (``get``, ``set``): kept across its deferral."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value


def count_store_io() -> dict[str, int]:
    """From now on in this process, tally the objects and bytes that pass through ``Storage``
    (every worker-side write and read of the artifact store goes through it)."""
    from airflow_stepop.runtime import storage as storage_module
    from airflow_stepop.runtime import values
    from airflow_stepop.runtime.storage import Storage

    tally = dict.fromkeys(("written", "written_bytes", "read", "read_bytes"), 0)

    def size(path: Path) -> int:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size

    def wrote(count: Callable[..., int], original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            moved = count(*args, **kwargs)  # before: a local publish moves its source away
            answer = original(*args, **kwargs)
            if answer is not False:  # create_new found something there: nothing written
                tally["written"] += 1
                tally["written_bytes"] += moved
            return answer

        return wrapper

    def read(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            data = original(*args, **kwargs)
            tally["read"] += 1
            tally["read_bytes"] += len(data)
            return data

        return wrapper

    def downloaded(original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: Storage, uri: str, target: Path) -> Any:
            answer = original(self, uri, target)
            tally["read"] += 1
            tally["read_bytes"] += size(target)
            return answer

        return wrapper

    Storage.write_bytes = wrote(lambda self, uri, data: len(data), Storage.write_bytes)
    Storage.create_new = wrote(lambda self, uri, data: len(data), Storage.create_new)
    Storage.put = wrote(lambda self, source, uri: size(source), Storage.put)
    Storage.read_bytes = read(Storage.read_bytes)
    Storage.read_bounded = read(Storage.read_bounded)
    Storage.download = downloaded(Storage.download)
    # a local root's inputs are moved into place from the scratch directory, not put
    values.publish_local = wrote(lambda source, target: size(source), values.publish_local)
    assert storage_module.Storage is Storage
    return tally


def one_step(options: argparse.Namespace, work: Path) -> None:
    # What the Task Runner has imported before it parses the DAG file: held by the parent.
    import airflow.sdk.execution_time.task_runner  # noqa: F401
    from airflow.sdk.bases.operator import ExecutorSafeguard
    from airflow.sdk.exceptions import TaskDeferred

    parsed: dict[str, Any] = {}
    runner = {"LocalStepOperator__sentinel": ExecutorSafeguard.sentinel_value}
    jobs_dir = work / "jobs"

    def parse(version: str) -> Any:
        """The DAG file's parse in the task process: the step, its input, ``cache=True``.
        ``cache_version`` makes a new key per miss with the same bytes to stage."""
        import numpy as np
        from stepop_example import model

        from airflow_stepop import LocalStepOperator

        parsed["operator"] = LocalStepOperator(
            task_id="train",
            python_callable=model.train,
            op_args=[np.zeros((options.rows, 33), "float32")],
            cache=True,
            cache_version=version,
        )
        gc.collect()
        return parsed["operator"]

    def context(run_id: str, store: StateStore) -> dict[str, Any]:
        ti = SimpleNamespace(
            dag_id="bench_cache",
            run_id=run_id,
            task_id="train",
            map_index=-1,
            try_number=1,
            id=f"ti-{run_id}",
            start_date=None,
            xcom_push=lambda **kwargs: None,
        )
        return {"ti": ti, "task_state_store": store}

    def jobs() -> int:
        return sum(1 for _ in jobs_dir.glob("*/job.json")) if jobs_dir.is_dir() else 0

    def in_task_process(
        version: str, timed: Callable[[Any], Any], after: Callable[[Any], Any] | None = None
    ) -> dict[str, Any]:
        """One sample in a forked child: parse (untimed), then ``timed(operator)`` with the
        artifact store's traffic counted; ``after`` (untimed) gets what it returned and adds
        to the report. The child leaves when its job has ended."""
        reader, writer = os.pipe()
        made_before = jobs()
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            try:
                operator = parse(version)
                tally = count_store_io()
                before = set(sys.modules)
                start, cpu = time.perf_counter(), time.process_time()
                answer = timed(operator)
                elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
                imported = [m for m in set(sys.modules) - before if m.startswith("airflow_stepop")]
                report = {"wall": elapsed, "cpu": cpu, "ours_imported": len(imported), **tally}
                if after is not None:
                    report.update(after(answer))
                os.write(writer, json.dumps(report).encode())
                os.close(writer)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        os.close(writer)
        with os.fdopen(reader) as pipe:
            text = pipe.read()
        if os.waitpid(pid, 0)[1] != 0 or not text:
            raise SystemExit(f"a sample failed in its process (see above): {timed.__name__}")
        report = json.loads(text)
        report["jobs"] = jobs() - made_before
        return report

    def miss(version: str, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """A miss's execute() (until its deferral), then its execute_complete() in a task
        process of its own, given the event its trigger fired."""
        store = StateStore()

        def execute(operator: Any) -> Any:
            try:
                operator.execute(context(run_id, store), **runner)
            except TaskDeferred as deferred:
                return deferred.trigger
            raise RuntimeError("a miss's execute() returned instead of deferring")

        def until_the_event(trigger: Any) -> dict[str, Any]:
            from airflow_stepop.operators.image_wait import first_event

            event = asyncio.run(first_event(trigger))
            return {"event": event, "store": dict(store)}

        started = in_task_process(version, execute, until_the_event)
        if started["event"].get("status") != "succeeded":
            raise SystemExit(f"the miss's job did not succeed: {started['event']}")

        def execute_complete(operator: Any) -> Any:
            return operator.execute_complete(
                context(run_id, StateStore(started["store"])), started["event"]
            )

        return started, in_task_process(version, execute_complete)

    def hit(version: str, run_id: str) -> dict[str, Any]:
        def execute(operator: Any) -> Any:
            try:
                return operator.execute(context(run_id, StateStore()), **runner)
            except TaskDeferred:
                raise SystemExit("a hit's execute() deferred: the step cache missed") from None

        return in_task_process(version, execute)

    gc.collect()  # the parent's imports left a collection due (execute_overhead.py says why)
    miss("warm", "warm-up")  # uploads the bundle, fills the bundle cache, keeps the entry
    sides: dict[str, list[dict[str, Any]]] = {"execute": [], "complete": [], "hit": []}
    for i in range(options.runs):  # alternated, each first in turn: the machine may be shared
        for kind in ("hit", "miss") if i % 2 else ("miss", "hit"):
            if kind == "hit":
                sides["hit"].append(hit("warm", f"hit{i}"))
            else:
                started, completed = miss(f"miss{i}", f"miss{i}")
                sides["execute"].append(started)
                sides["complete"].append(completed)
    sides["slot"] = [
        {k: a[k] + b[k] for k in a if isinstance(a[k], (int, float))}
        for a, b in zip(sides["execute"], sides["complete"], strict=True)
    ]

    def median(side: str, key: str) -> float:
        return statistics.median(sample[key] for sample in sides[side])

    print(f"== 1. one step, hit vs miss (local backend): {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}; {options.runs} samples each, a forked "
          f"task-like process each; input {options.rows}x33 float32")  # fmt: skip
    print(f"{'':42s}{'worker s (CPU)':>17s}{'jobs':>6s}{'uploaded':>18s}{'read':>16s}")
    rows = [
        ("miss: execute() until its deferral", "execute"),
        ("miss: execute_complete() after it", "complete"),
        ("miss: worker slot in all", "slot"),
        ("hit: execute(), the result returned", "hit"),
    ]
    for label, side in rows:
        print(
            f"{label:42s}{median(side, 'wall'):8.3f} ({median(side, 'cpu'):.3f})"
            f"{median(side, 'jobs'):6.0f}"
            f"{median(side, 'written'):6.0f} obj {median(side, 'written_bytes'):7.0f} B"
            f"{median(side, 'read'):5.0f} obj {median(side, 'read_bytes'):6.0f} B"
        )
    print(f"our modules each imported (a fresh task process): a miss's execute() "
          f"{median('execute', 'ours_imported'):.0f}, its execute_complete() "
          f"{median('complete', 'ours_imported'):.0f}, a hit's execute() "
          f"{median('hit', 'ours_imported'):.0f}")  # fmt: skip
    for label, base in [("hit/miss execute()", "execute"), ("hit/miss worker slot", "slot")]:
        wall = median("hit", "wall") / median(base, "wall")
        cpu = median("hit", "cpu") / median(base, "cpu")
        print(f"{'ratio ' + label + ':':42s}{wall:8.2f}x ({cpu:.2f}x CPU)")


# ---- 2. the example pipeline, run twice unchanged with [stepop] cache on --------------------


def the_pipeline(options: argparse.Namespace, work: Path) -> None:
    dags = EXAMPLES
    if options.samples is not None:  # a copy of the example with less data
        dags = work / "dags"
        dags.mkdir()
        text, found = re.subn(r"\bprepare\(\s*[\d_]+\s*\)", f"prepare({options.samples})",
                              PIPELINE.read_text())  # fmt: skip
        if found != 1:
            sys.exit(f"--samples: {PIPELINE} has no single `prepare(<number>)` call to change")
        (dags / PIPELINE.name).write_text(text)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")},
        "AIRFLOW_HOME": str(work / "pipeline-home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__STEPOP__CACHE": "True",  # [stepop] cache: the deployment caches every step
        "AIRFLOW__STEPOP__LOCAL_JOBS_DIR": str(work / "pipeline-jobs"),
        # the DAG's own module (Airflow puts the DAGs folder on the path; a copy's is elsewhere)
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])),
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    migrated = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True)
    if migrated.returncode:
        sys.exit(f"airflow db migrate failed:\n{migrated.stdout[-3000:]}{migrated.stderr[-3000:]}")
    jobs_dir = work / "pipeline-jobs"

    def jobs() -> int:
        return sum(1 for _ in jobs_dir.glob("*/job.json")) if jobs_dir.is_dir() else 0

    runs = []
    for n in (1, 2):
        before = jobs()
        start = time.perf_counter()
        done = subprocess.run([airflow, "dags", "test", DAG_ID], env=env,
                              capture_output=True, text=True)  # fmt: skip
        wall = time.perf_counter() - start
        log = done.stdout + done.stderr
        (work / f"pipeline-run{n}.log").write_text(log)
        finished = re.search(
            r"DagRun Finished: .*?run_start_date=([^,]+), run_end_date=([^,]+),.*?state=(\w+)",
            log,
        )
        if done.returncode or not finished or finished[3] != "success":
            sys.exit(f"run {n} of {DAG_ID} did not succeed (exit status {done.returncode}):\n"
                     f"{log[-6000:]}")  # fmt: skip
        start_date, end_date = (datetime.fromisoformat(finished[i]) for i in (1, 2))
        runs.append({"wall": wall, "dag_run": (end_date - start_date).total_seconds(),
                     "jobs": jobs() - before,
                     "hits": log.count("Step cache hit: returning the result"),
                     "tries": log.count("[DAG TEST] starting task_id=")})  # fmt: skip

    first, second = runs
    data = "its own data" if options.samples is None else f"prepare({options.samples})"
    print(f"== 2. {PIPELINE.relative_to(ROOT)} ({data}), local backend, [stepop] cache = True, "
          "`airflow dags test` twice, unchanged")  # fmt: skip
    print(f"{'':28s}{'task tries':>11s}{'jobs':>6s}{'cache hits':>12s}{'command s':>11s}"
          f"{'DAG run s':>11s}")  # fmt: skip
    for label, run in [("first run", first), ("second run, unchanged", second)]:
        print(f"{label:28s}{run['tries']:11d}{run['jobs']:6d}{run['hits']:12d}{run['wall']:11.2f}"
              f"{run['dag_run']:11.2f}")  # fmt: skip
    print(f"jobs made by the unchanged re-run: {second['jobs']} of {first['jobs']} "
          f"(target 0{'' if second['jobs'] == 0 else ': NOT MET'})")  # fmt: skip
    print(f"{'ratio second/first, command:':42s}{second['wall'] / first['wall']:8.2f}x")
    print(f"{'ratio second/first, DAG run:':42s}{second['dag_run'] / first['dag_run']:8.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="samples of each side (part 1)")
    parser.add_argument("--rows", type=int, default=1000, help="rows of the step's input")
    parser.add_argument("--samples", type=int, default=None,
                        help="the pipeline's prepare() size (default: the file's own)")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    options = parser.parse_args()
    if options.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        options = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="stepop-bench-"))
    # bytecode caches, as an installed Airflow and provider have (private, as execute_overhead's)
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(work / "pycache")
    os.environ["AIRFLOW_HOME"] = str(work / "home")
    os.environ["AIRFLOW__STEPOP__ARTIFACT_ROOT"] = f"file://{work}/artifacts"
    os.environ["AIRFLOW__STEPOP__LOCAL_JOBS_DIR"] = str(work / "jobs")
    os.environ["AIRFLOW__STEPOP__POLL_INTERVAL"] = "0.2"  # part 1's untimed waits for its jobs
    try:
        one_step(options, work)
        the_pipeline(options, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
