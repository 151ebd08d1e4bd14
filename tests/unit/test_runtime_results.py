"""What the runtime says of a step's result in the job's log (relayed into the task log)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from airflow_stepop.packaging.staging import StepIdentity, stage_step
from airflow_stepop.runtime.storage import Storage
from tests.step_modules import step_module


@pytest.fixture
def result_steps(tmp_path, monkeypatch):
    """Steps importable by name (no Airflow import in their module)."""
    yield from step_module(
        tmp_path,
        monkeypatch,
        "result_steps",
        """
            import numpy as np

            class Model:
                pass

            def sklearn_metrics():
                return {"accuracy": 0.9, "f1": np.float64(0.87), "n": 100}

            def dated_metrics():
                import datetime, decimal
                return {"accuracy": 0.9, "cost": decimal.Decimal("1.25"),
                        "trained_at": datetime.datetime(2026, 11, 24, 12, 0)}

            def diverged_metrics():
                return {"epochs": 3, "loss": float("nan")}

            def listed() -> dict:
                return [1, 2]

            def plain_metrics():
                return {"accuracy": 0.9, "f1": 0.87, "n": 100}

            def model():
                return Model()

            def model_and_score():
                return {"model": Model(), "score": np.float64(0.87)}

            def large_scores():
                return [0.5] * 20_000 + [np.float64(1.0)]  # over 64 KiB as JSON too
        """,
    )


def _run(tmp_path, function) -> tuple[str, dict]:
    storage = Storage()
    staged = stage_step(
        function, [], {}, root=f"file://{tmp_path}/root",
        step=StepIdentity("dag", "run", function.__name__, -1, 1), storage=storage,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    process = subprocess.run(
        [sys.executable, "-m", "airflow_stepop.runtime", staged.spec_uri],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr
    return process.stdout, storage.read_json(staged.run_uri + "/result.json")["outputs"]


@pytest.mark.parametrize(
    ("step", "said"),
    [
        # sklearn's scores are numpy scalars: one in a dict of metrics makes the whole dict a
        # pickle, and a plain task downstream fails on metrics['f1'] with no word of why
        ("sklearn_metrics", "return_value['f1'] is a numpy.float64, which is not JSON, so a "
         "plain task gets a reference to .load(). Return float(...) or int(...) of it"),
        # a plain task's XCom takes a datetime or a Decimal; a step's inline result is JSON
        ("dated_metrics", "return_value['cost'] is a decimal.Decimal, which is not JSON, so a "
         "plain task gets a reference to .load(). Return float(...) or str(...) of it"),
        ("diverged_metrics", "return_value['loss'] is nan, which JSON has no value for, so a "
         "plain task gets a reference to .load(). Return None in its place"),
    ],
)  # fmt: skip
def test_a_nearly_json_result_that_is_pickled_says_which_value_and_the_fix(
    tmp_path, result_steps, step, said
):
    log, outputs = _run(tmp_path, getattr(result_steps, step))

    assert outputs["ref"]["materializer"] == "cloudpickle"
    assert (
        f"[stepop] return_value comes back as an ArtifactRef (pickled), not inline: {said} to "
        "keep the result inline."
    ) in log


@pytest.mark.parametrize("step", ["plain_metrics", "model", "model_and_score", "large_scores"])
def test_json_and_objects_meant_as_pickles_come_back_without_a_word(tmp_path, result_steps, step):
    log, _ = _run(tmp_path, getattr(result_steps, step))

    assert "comes back as an ArtifactRef" not in log


def test_a_list_where_a_dict_annotation_promised_one_names_the_annotation(tmp_path, result_steps):
    """Airflow infers multiple_outputs=True from ``-> dict``: the user never wrote it."""
    storage = Storage()
    staged = stage_step(
        result_steps.listed, [], {}, root=f"file://{tmp_path}/root", multiple_outputs=True,
        step=StepIdentity("dag", "run", "listed", -1, 1), storage=storage,
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    subprocess.run(
        [sys.executable, "-m", "airflow_stepop.runtime", staged.spec_uri],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    error = storage.read_json(staged.run_uri + "/error.json")
    assert error["message"] == (
        "multiple_outputs=True needs the function to return a dict with str keys, got list. "
        "Airflow also sets it from a '-> dict' return annotation: fix the annotation or the value."
    )
