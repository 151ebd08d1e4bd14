"""Worker time in execute() with warm caches, against its floor.

execute() on the worker packages the callable, uploads the bundle (once per content), writes
the inputs and the spec, starts the job and defers. The floor is what no implementation can
avoid: writing the same bytes and starting a process. Prints both medians and their ratio.

    .venv/bin/python bench/execute_overhead.py [--runs 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dags_examples"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    options = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="stepop-bench-"))
    os.environ["AIRFLOW_HOME"] = str(work / "home")
    os.environ["AIRFLOW__STEPOP__ARTIFACT_ROOT"] = f"file://{work}/artifacts"
    os.environ["AIRFLOW__STEPOP__LOCAL_JOBS_DIR"] = str(work / "jobs")

    import numpy as np
    from airflow.sdk.exceptions import TaskDeferred
    from stepop_example import model

    from airflow_stepop import LocalStepOperator

    operator = LocalStepOperator(
        task_id="train", python_callable=model.train, op_args=[np.zeros((1000, 33), "float32")]
    )

    def context(i: int) -> dict:
        ti = SimpleNamespace(
            dag_id="bench",
            run_id=f"run{i}",
            task_id="train",
            map_index=-1,
            try_number=1,
            start_date=None,
            xcom_push=lambda **kwargs: None,
        )
        return {"ti": ti}

    def execute(i: int) -> float:
        start = time.perf_counter()
        with contextlib.suppress(TaskDeferred):
            operator.execute(context(i))
        return time.perf_counter() - start

    execute(-1)  # warm caches: imports, the bundle already uploaded
    ours = [execute(i) for i in range(options.runs)]

    bundle = next((work / "artifacts" / "code").glob("*.zip")).read_bytes()
    spec = next((work / "artifacts").rglob("spec.json")).read_bytes()
    inputs = next((work / "artifacts").rglob("arg0.npy")).read_bytes()

    def floor(i: int) -> float:
        start = time.perf_counter()
        target = work / "floor" / str(i)
        target.mkdir(parents=True)
        (target / "arg0.npy").write_bytes(inputs)
        (target / "spec.json").write_bytes(spec)
        subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
        return time.perf_counter() - start

    floors = [floor(i) for i in range(options.runs)]
    ours_ms, floor_ms = statistics.median(ours) * 1000, statistics.median(floors) * 1000
    print(f"bundle {len(bundle)} bytes, spec {len(spec)} bytes, input {len(inputs)} bytes")
    print(f"execute() median, warm caches:    {ours_ms:8.1f} ms  (target < 2000 ms)")
    print(f"floor (write bytes + spawn):      {floor_ms:8.1f} ms")
    print(f"ratio execute/floor:              {ours_ms / floor_ms:8.2f}x")
    subprocess.run(["pkill", "-f", str(work)], check=False)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
