"""DAGs of the Kubernetes integration tests: steps on the emulated cluster (process mode)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow.sdk import dag, task

from airflow_stepop import KubernetesStepOperator, ResourceSettings

REGISTRY = os.environ.get("STEPOP_REGISTRY", "127.0.0.1:5000")
BASE = f"{REGISTRY}/stepop-base/python:3.11-bookworm"  # runs in a process on the fake
ELEMENTS = 29 * 1024 * 1024 // 8  # a 29 MiB float64 array


def _record(name: str, value) -> None:
    results = Path(os.environ["STEPOP_TEST_RESULTS"])
    (results / f"{name}.json").write_text(json.dumps(value))


def _record_failure(context) -> None:
    _record("failure", f"{type(context['exception']).__name__}: {context['exception']}")


def total(values) -> float:
    """The classic operator's step: any importable function."""
    return float(values.sum())


@dag(schedule=None)
def k8s_pipeline():
    @task.kubernetes_step(image_uri=BASE)
    def make_array():
        import numpy as np

        return np.arange(ELEMENTS, dtype=np.float64)

    @task.kubernetes_step(image_uri=BASE)
    def save_model(values):
        model = Path("model")
        (model / "weights").mkdir(parents=True)
        (model / "weights" / "mean.txt").write_text(str(float(values.mean())))
        (model / "config.json").write_text(json.dumps({"size": int(values.size)}))
        return model

    @task.kubernetes_step(image_uri=BASE)
    def shard(values, model, index: int):
        mean = float((model / "weights" / "mean.txt").read_text())
        part = values[index::2]
        return {"index": index, "sum": float(part.sum()), "mean": mean}

    @task
    def check(parts: list[dict], gpu_total: float, model) -> None:
        _record("check", {
            "parts": sum(p["sum"] for p in parts),
            "gpu_total": gpu_total,
            "mean": parts[0]["mean"],
            "model_files": sorted(p.name for p in model.load().iterdir()),
        })  # fmt: skip

    values = make_array()
    model = save_model(values)
    parts = shard.partial(values=values, model=model).expand(index=[0, 1])
    gpu_sum = KubernetesStepOperator(  # the classic operator, asking for one GPU
        task_id="gpu_sum",
        python_callable=total,
        op_args=[values],
        image_uri=BASE,
        resources=ResourceSettings(gpu_count=1),
    )
    check(parts, gpu_sum.output, model)


@dag(schedule=None)
def k8s_raises():
    @task.kubernetes_step(image_uri=BASE, on_failure_callback=_record_failure)
    def broken(n: int):
        raise ValueError(f"bad input {n}: expected a positive count")

    broken(-3)


@dag(schedule=None)
def k8s_signed_root():
    """Steps on another store's root (gs://, abfs://): the pods use what its signer made."""
    on_the_store = {"image_uri": BASE, "artifact_root": os.environ.get("STEPOP_TEST_SIGNED_ROOT"),
              "storage_conn_id": os.environ.get("STEPOP_TEST_SIGNED_CONN")}  # fmt: skip

    @task.kubernetes_step(**on_the_store)
    def save_model(size: int):
        import numpy as np

        model = Path("model")
        (model / "weights").mkdir(parents=True)
        np.save(model / "weights" / "w.npy", np.ones(size))
        (model / "config.json").write_text(json.dumps({"size": size}))
        return model

    @task.kubernetes_step(**on_the_store)
    def weigh(model) -> float:
        import numpy as np

        return float(np.load(model / "weights" / "w.npy").sum())

    @task
    def check(model, weight: float) -> None:
        _record("signed", {"uri": model.uri, "weight": weight})

    model = save_model(1000)
    check(model, weigh(model))


k8s_pipeline()
k8s_raises()
k8s_signed_root()
