"""DAG parse cost: ten @task.local_step steps against the same DAG of ten plain @task.

The DAG processor parses files over and over, so declaring a step must not load a cloud SDK,
the docker client or anything heavy. Prints the median import time of each DAG file (fresh
interpreter per sample, Airflow already imported in both; the two files alternate, sample after
sample, as the machine may be shared; CPU time beside it, which other tenants' load disturbs
less), the extra cost and ratio (target <= 1.2x), and any heavy module the step DAG loaded.
The garbage collector is frozen before the timed part, as Airflow's DAG processor freezes it
before it forks a file's parse: otherwise whichever DAG happens to cross the collector's next
threshold pays for a collection over all of Airflow's objects (about 1.5 ms here). Imports use
bytecode caches, as an installed Airflow and provider do (kept in a private
directory, warmed by one untimed sample); ``--no-bytecode`` compiles every module from source
each time instead. ``--step`` measures another step decorator (a cloud's, given the image
argument it requires and no cloud call): the target is set for ``local_step``.

    .venv/bin/python bench/parse_cost.py [--samples 15] [--no-bytecode] [--step sagemaker_step]
        [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

DAG_TEMPLATE = """
from airflow.sdk import dag, task
{extra_import}

@dag(schedule=None)
def bench_{kind}():
    previous = None
    for i in range(10):
        @task{decorator}({arguments}task_id=f"step_{{i}}")
        def step(x=None):
            return x

        current = step(previous) if previous is not None else step()
        previous = current

bench_{kind}()
"""

PROBE = """
import gc, json, sys, time, runpy
import airflow.sdk  # both DAGs pay for Airflow; we measure what comes on top
# as Airflow's DAG processor does before it forks a file's parse: what is already loaded is
# left out of the parse's garbage collections
gc.freeze()
before = set(sys.modules)
start, cpu = time.perf_counter(), time.process_time()
runpy.run_path(sys.argv[1])
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in {
    "docker", "boto3", "botocore", "aiobotocore", "google", "azure", "numpy", "pandas",
    "pyarrow", "cloudpickle", "s3fs", "gcsfs", "adlfs"})
print(json.dumps({"seconds": elapsed, "cpu": cpu, "heavy": heavy}))
"""


# what a step of each decorator needs at parse besides its function (an image, for the clouds)
STEP_ARGUMENTS = {
    "local_step": "",
    "sagemaker_step": 'image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1.0", ',
    "vertex_step": 'image_uri="us-docker.pkg.dev/my-project/train/image:1.0", ',
    "azureml_step": 'image_uri="myregistry.azurecr.io/train:1.0", ',
}

# --quick: a smoke run (the same lines, figures of no weight): two samples each side
QUICK = {"samples": 2}
QUICK_HELP = f"a smoke run of a few seconds: {QUICK}; the figures mean nothing"


def write_dags(directory: Path, step: str = "local_step") -> dict[str, Path]:
    files = {}
    for kind, decorator, arguments, extra in (
        ("plain", "", "", ""),
        ("steps", f".{step}", STEP_ARGUMENTS[step], "import airflow_stepop  # noqa: F401"),
    ):
        path = directory / f"bench_{kind}.py"
        path.write_text(
            textwrap.dedent(DAG_TEMPLATE).format(
                kind=kind, decorator=decorator, arguments=arguments, extra_import=extra
            )
        )
        files[kind] = path
    return files


def measure(path: Path, env: dict[str, str]) -> tuple[float, float, list[str]]:
    command = [sys.executable, "-c", PROBE, str(path)]
    # run beside the DAG file: `-c` puts the working directory first on sys.path
    out = subprocess.run(
        command, capture_output=True, text=True, check=True, env=env, cwd=path.parent
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["seconds"], result["cpu"], result["heavy"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--no-bytecode", action="store_true")
    parser.add_argument("--step", choices=sorted(STEP_ARGUMENTS), default="local_step")
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    options = parser.parse_args()
    if options.quick:  # its sizes become the defaults: an argument given still wins
        parser.set_defaults(**QUICK)
        options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        if options.no_bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env.pop("PYTHONPYCACHEPREFIX", None)
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = f"{tmp}/pycache"
        files = write_dags(Path(tmp), options.step)
        for path in files.values():  # untimed: writes the bytecode caches
            measure(path, env)
        times: dict[str, list[float]] = {"plain": [], "steps": []}
        cpus: dict[str, list[float]] = {"plain": [], "steps": []}
        heavy: list[str] = []
        for i in range(options.samples):
            for kind in ("plain", "steps") if i % 2 == 0 else ("steps", "plain"):
                seconds, cpu, loaded = measure(files[kind], env)
                times[kind].append(seconds)
                cpus[kind].append(cpu)
                heavy = loaded if kind == "steps" else heavy
    plain, steps = statistics.median(times["plain"]), statistics.median(times["steps"])
    plain_cpu, steps_cpu = statistics.median(cpus["plain"]), statistics.median(cpus["steps"])
    mode = "compiled from source" if options.no_bytecode else "bytecode caches"
    print(f"{options.samples} samples each, {mode}; wall time (CPU time of the import)")
    print(f"plain @task DAG (10 tasks):        {plain * 1000:8.1f} ms ({plain_cpu * 1000:.1f} ms)")
    label = f"@task.{options.step} DAG (10 steps):"
    print(f"{label:<35}{steps * 1000:8.1f} ms ({steps_cpu * 1000:.1f} ms)")
    print(f"extra per DAG file:                {(steps - plain) * 1000:8.1f} ms")
    print(
        f"ratio steps/plain:                 {steps / plain:8.2f}x ({steps_cpu / plain_cpu:.2f}x)"
        " (target <= 1.2x)"
    )
    print(f"heavy modules loaded by the steps: {heavy or 'none'}")


if __name__ == "__main__":
    main()
