"""DAG parse cost: ten @task.local_step steps against the same DAG of ten plain @task.

The DAG processor parses files over and over, so declaring a step must not load a cloud SDK,
the docker client or anything heavy. Prints the median import time of each DAG file (fresh
interpreter per sample, Airflow already imported in both), the extra cost and ratio, and any
heavy module the step DAG loaded. Target: under 0.2 s extra.

    .venv/bin/python bench/parse_cost.py [--samples 7]
"""

from __future__ import annotations

import argparse
import json
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
        @task{decorator}(task_id=f"step_{{i}}")
        def step(x=None):
            return x

        current = step(previous) if previous is not None else step()
        previous = current

bench_{kind}()
"""

PROBE = """
import json, sys, time, runpy
import airflow.sdk  # both DAGs pay for Airflow; we measure what comes on top
before = set(sys.modules)
start = time.perf_counter()
runpy.run_path(sys.argv[1])
elapsed = time.perf_counter() - start
heavy = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in {
    "docker", "boto3", "botocore", "aiobotocore", "google", "azure", "numpy", "pandas",
    "pyarrow", "cloudpickle", "s3fs", "gcsfs", "adlfs"})
print(json.dumps({"seconds": elapsed, "heavy": heavy}))
"""


def write_dags(directory: Path) -> dict[str, Path]:
    files = {}
    for kind, decorator, extra in (
        ("plain", "", ""),
        ("steps", ".local_step", "import airflow_stepop  # noqa: F401"),
    ):
        path = directory / f"bench_{kind}.py"
        path.write_text(
            textwrap.dedent(DAG_TEMPLATE).format(kind=kind, decorator=decorator, extra_import=extra)
        )
        files[kind] = path
    return files


def measure(path: Path, samples: int) -> tuple[float, list[str]]:
    times, heavy = [], []
    for _ in range(samples):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=True
        )
        result = json.loads(out.stdout.strip().splitlines()[-1])
        times.append(result["seconds"])
        heavy = result["heavy"]
    return statistics.median(times), heavy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=7)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = write_dags(Path(tmp))
        plain, _ = measure(files["plain"], options.samples)
        steps, heavy = measure(files["steps"], options.samples)
    print(f"plain @task DAG (10 tasks):        {plain * 1000:8.1f} ms")
    print(f"@task.local_step DAG (10 steps):   {steps * 1000:8.1f} ms")
    print(f"extra per DAG file:                {(steps - plain) * 1000:8.1f} ms (target < 200 ms)")
    print(f"ratio steps/plain:                 {steps / plain:8.2f}x")
    print(f"heavy modules loaded by the steps: {heavy or 'none'}")


if __name__ == "__main__":
    main()
