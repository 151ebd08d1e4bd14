"""Worker time in execute() with warm caches, against its floor, in a task-like process.

execute() on the worker packages the callable (or finds its bundle in the cache), uploads the
code bundle (once per content), writes the inputs and the spec, starts the job and defers. The
floor is what no implementation can avoid: writing the same bytes at the same depth (the run
directory's layout) and starting a process. A second baseline, the contract floor, adds what
any step operator with this one's guarantees must also do: read its settings from Airflow's
config, take the input's digest (every artifact read is verified against it), keep a record of
the job (a retry re-attaches to it) and write the task-log line. The target is read against the
floor; the contract floor shows how much of the rest is our own code.

Every side runs in a child forked from one parent, as Airflow's supervisor forks each task
process. The parent holds what the Task Runner has imported before it parses the DAG file
(``airflow.sdk.execution_time.task_runner``). Each child then parses, untimed, as the Task
Runner does after the fork: our operator module, the user's module, numpy, the operator object,
and the garbage that left collected. (Until 2026-11-23 the parent parsed before forking, so
every object of the parse a child touched cost it a copied page, which a real task process,
having built those objects itself, never pays; that charged our side, which touches the most,
about 5-10 ms more than the floor.) Bytecode caches exist for every module, as an installed
Airflow and provider have. What a child spends on our side is therefore what execute() adds to
a real task: importing our worker-side modules, finding the code bundle, staging the inputs and
the spec, submitting the job (a supervisor process), its task-log line and the deferral. "Warm
caches": an earlier task (the warm-up sample, in its own child) has uploaded the bundle and
left the on-disk bundle cache; nothing an earlier sample computed in memory survives, as in
Airflow, where each task is a new process. The sides alternate, sample after sample (the
machine may be shared), and a child leaves only when its job (or the floor's process) has
ended, so no sample pays for what an earlier one started.

By default the step is a module function the job imports by name; ``--by-value`` steps a
function defined in the DAG, as ``@task.local_step`` functions usually are, which travels
pickled by value (each task pickles it to compare with the cached bundle's). ``--same-process``
runs every sample in this process instead, after two warm-up calls (what repeated calls in one
process, e.g. ``dag.test()``, cost). Prints the medians and our ratio to each floor (no
target since 2026-11-29: the floor is below what a step must do, and the milliseconds left sit
in a task process that takes a second to start; ``turnaround.py`` measures what a user waits
for). In task-like processes a fourth side times execute() in a child
that has imported, untimed, the modules execute() imports (the warm-up sample names them): the
difference is what importing our worker-side code costs a task process.
``python -X importtime`` on this script shows what each child imports.

    .venv/bin/python bench/execute_overhead.py [--runs 20] [--same-process] [--by-value] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dags_examples"))

# --quick: a smoke run (the same lines, figures of no weight): two samples of each side
QUICK = {"runs": 2}
QUICK_HELP = f"a smoke run of a few seconds: {QUICK}; the figures mean nothing"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--same-process", action="store_true")
    parser.add_argument(
        "--by-value",
        action="store_true",
        help="a step function defined in the DAG (as @task.local_step ones are): pickled",
    )
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    options = parser.parse_args()
    if options.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        options = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="stepop-bench-"))
    # Bytecode caches, as an installed Airflow and provider have (private; the parent's imports
    # and the warm-up sample write them): a module compiled from source is no per-task cost.
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(work / "pycache")
    os.environ["AIRFLOW_HOME"] = str(work / "home")
    os.environ["AIRFLOW__STEPOP__ARTIFACT_ROOT"] = f"file://{work}/artifacts"
    os.environ["AIRFLOW__STEPOP__LOCAL_JOBS_DIR"] = str(work / "jobs")

    # What the Task Runner has imported before it parses the DAG file (Airflow's supervisor has
    # imported some of it before it forks the task process): held by the parent, shared.
    import airflow.sdk.execution_time.task_runner  # noqa: F401
    from airflow.sdk import conf
    from airflow.sdk.bases.operator import ExecutorSafeguard
    from airflow.sdk.exceptions import TaskDeferred

    parsed: dict[str, Any] = {}  # what the DAG file's parse built, in this process

    def parse() -> Any:
        """The DAG file's parse, which the Task Runner does in the task process after the fork:
        our operator module, the user's module, numpy, the operator object. Every side's child
        does it before its timed part (so all sides start from the same state), and collects
        the garbage it left (a cost of the parse, whichever side would trip it)."""
        if not parsed:
            import numpy as np
            from stepop_example import model

            from airflow_stepop import LocalStepOperator

            def train(data: Any) -> Any:  # defined in the DAG: it travels pickled by value
                return model.train(data, epochs=1)

            parsed["operator"] = LocalStepOperator(
                task_id="train",
                python_callable=train if options.by_value else model.train,
                op_args=[np.zeros((1000, 33), "float32")],
            )
            gc.collect()
        return parsed["operator"]

    def context(run_id: str) -> dict:
        ti = SimpleNamespace(
            dag_id="bench",
            run_id=run_id,
            task_id="train",
            map_index=-1,
            try_number=1,
            start_date=None,
            xcom_push=lambda **kwargs: None,
        )
        return {"ti": ti}

    # what the Task Runner passes: execute() is not being called from outside a task
    runner = {"LocalStepOperator__sentinel": ExecutorSafeguard.sentinel_value}

    def execute(i: int, run: str = "run") -> dict:
        try:
            parsed["operator"].execute(context(f"{run}{i}"), **runner)
        except TaskDeferred as deferred:
            return deferred.trigger.serialize()[1]["handle"]
        raise RuntimeError("execute() returned instead of deferring")

    def wait_for_job(handle: dict | subprocess.Popen | None) -> None:
        """Outside the timed part: the next sample, of either side, must not share the machine
        with this sample's job (ours) or process (the floor's)."""
        if isinstance(handle, subprocess.Popen):
            handle.wait()
        elif handle:
            backend = parsed["operator"].make_backend()
            while not backend.status(handle).terminal:
                time.sleep(0.05)

    def in_task_process(
        run: Callable[[int], Any], i: int, imports: Sequence[str] = ()
    ) -> tuple[float, float, list[str]]:
        """One sample's wall and CPU time, by default in a forked child (a task process), and
        the modules the timed call imported. ``imports`` are imported untimed, after the parse."""
        if options.same_process:
            parse()
            before = set(sys.modules)
            start, cpu = time.perf_counter(), time.process_time()
            handle = run(i)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            wait_for_job(handle)
            return elapsed, cpu, sorted(set(sys.modules) - before)
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: time one call, report it, wait for its job, leave
            os.close(reader)
            try:
                parse()  # untimed: the task process parses the DAG file before execute()
                for module in imports:
                    importlib.import_module(module)
                before = set(sys.modules)
                start, cpu = time.perf_counter(), time.process_time()
                handle = run(i)
                elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
                imported = sorted(set(sys.modules) - before)
                os.write(writer, json.dumps([elapsed, cpu, imported]).encode())
                os.close(writer)
                wait_for_job(handle)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
            os._exit(0)
        os.close(writer)
        with os.fdopen(reader) as pipe:
            report = pipe.read()
        if os.waitpid(pid, 0)[1] != 0 or not report:
            raise SystemExit(f"a sample failed in its process (see above): {run.__name__}")
        elapsed, cpu, imported = json.loads(report)
        return elapsed, cpu, imported

    # The imports above leave a full garbage collection due, which a child's first allocations
    # would run (over every object the parent made, copying its pages after the fork): a cost
    # of the imports, paid here, whichever side would trip it.
    gc.collect()
    # an earlier task: uploads the bundle, fills the disk cache; names the modules execute()
    # imports in a task process (in one process, the modules its first call imported)
    worker_modules = in_task_process(execute, -1)[2]
    if options.same_process:
        in_task_process(execute, -2)  # and this process has built it once

    bundle = next((work / "artifacts" / "code").glob("*.zip")).read_bytes()
    spec = next((work / "artifacts").rglob("spec.json")).read_bytes()
    inputs = next((work / "artifacts").rglob("arg0.npy")).read_bytes()

    def floor(i: int) -> subprocess.Popen:
        """The same bytes at the same depth (the run directory's layout), and a process."""
        target = work / "floor" / "bench" / f"run{i}" / "train" / "-1" / "1"
        (target / "inputs").mkdir(parents=True)
        (target / "inputs" / "arg0.npy").write_bytes(inputs)
        (target / "spec.json").write_bytes(spec)
        return subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)

    def contract_floor(i: int) -> subprocess.Popen:
        """The floor plus what any step operator with our guarantees does: read its four
        settings (Airflow's config), take the input's digest (every artifact read is
        verified), keep a record of the job (a retry re-attaches) and write the task-log line."""
        for option in ("local_jobs_dir", "artifact_root", "inline_result_max_bytes"):
            conf.get("stepop", option, fallback="")
        target = work / "contract" / "bench" / f"run{i}" / "train" / "-1" / "1"
        (target / "inputs").mkdir(parents=True)
        (target / "inputs" / "arg0.npy").write_bytes(inputs)
        digest = hashlib.sha256(inputs).hexdigest()
        (target / "spec.json").write_bytes(spec.replace(b"sha256", digest.encode(), 1))
        record = work / "contract-jobs" / f"run{i}"
        record.mkdir(parents=True)
        process = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
        (record / "job.json").write_text(json.dumps({"pid": process.pid}))
        parsed["operator"].log.info("Submitted job %s", record.name)
        conf.get("stepop", "poll_interval", fallback="")
        return process

    def execute_imported(i: int) -> dict:
        """execute() in a task process that has already imported what execute() imports."""
        return execute(i, "imported")

    ours, floors, contracts, imported = [], [], [], []
    sides = [(execute, ours, []), (floor, floors, []), (contract_floor, contracts, [])]
    if not options.same_process:  # in one process, every sample after the first is this side
        sides.append((execute_imported, imported, worker_modules))
    for i in range(options.runs):  # each round in another order: no side always runs first
        for run, samples, imports in sides[i % len(sides) :] + sides[: i % len(sides)]:
            samples.append(in_task_process(run, i, imports))

    def median_ms(samples: list[tuple[float, float, list[str]]], index: int) -> float:
        return statistics.median(sample[index] for sample in samples) * 1000

    mode = "one process" if options.same_process else "a forked task-like process each"
    mode += "; callable pickled by value" if options.by_value else "; callable imported by name"
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {mode}")
    print(f"bundle {len(bundle)} bytes, spec {len(spec)} bytes, input {len(inputs)} bytes")
    print(f"{options.runs} samples each; wall time (CPU time, which other tenants disturb less)")
    rows = [
        ("execute() median, warm caches", ours),
        ("floor (write bytes + spawn)", floors),
        ("contract floor (+ settings, digest, record, log)", contracts),
    ]
    if imported:
        print(f"execute() imports {len(worker_modules)} modules in a task process")
        rows.append(("execute(), those modules imported before", imported))
    for label, samples in rows:
        print(
            f"{label + ':':50s}{median_ms(samples, 0):7.1f} ms ({median_ms(samples, 1):.1f} ms CPU)"
        )
    ratios = [
        ("execute/floor", ours, floors, "; no target: see turnaround.py"),
        ("execute/contract floor", ours, contracts, ""),
    ]
    if imported:
        ratios.append(("execute, modules imported/floor", imported, floors, ""))
        ratios.append(("execute, modules imported/contract floor", imported, contracts, ""))
    for label, side, base, target in ratios:
        wall = median_ms(side, 0) / median_ms(base, 0)
        cpu = median_ms(side, 1) / median_ms(base, 1)
        print(f"{'ratio ' + label + ':':50s}{wall:7.2f}x ({cpu:.2f}x CPU{target})")
    print("execute() target: < 2 s")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
