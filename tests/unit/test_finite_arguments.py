"""Every number an operator takes is finite and within a stated range, refused when the DAG is
parsed with the argument, the value and the range: a NaN poll interval froze the triggerer's
event loop that every deferred task shares (its wait never yielded), an infinite one never
polled again."""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.sdk import DAG

from airflow_stepop import (
    AzureMLStepOperator,
    LocalStepOperator,
    SageMakerStepOperator,
    VertexStepOperator,
)
from airflow_stepop.settings import SettingsError

OPERATORS = {
    "local": (LocalStepOperator, {}),
    "sagemaker": (
        SageMakerStepOperator,
        {"image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1"},
    ),
    "vertex": (VertexStepOperator, {"image_uri": "us-central1-docker.pkg.dev/p/r/t:1"}),
    "azureml": (AzureMLStepOperator, {"image_uri": "myregistry.azurecr.io/t:1"}),
}
NAN, INF = float("nan"), float("inf")
ABSURD = [10**12, 1e300, 10**400]  # 10**400 is no float: an int compared without one
WRONG = [NAN, INF, -INF, -1, 0, True, *ABSURD]
# (kind, argument, the range the refusal states, what its other arguments need)
NUMBERS = [
    *((kind, "poll_interval", "from 0.1 to 3600", {}) for kind in OPERATORS),
    ("local", "max_runtime", "takes 1..31536000 s", {}),
    ("sagemaker", "max_runtime", "takes 1..2419200 s", {}),
    ("vertex", "max_runtime", "takes 1..", {}),
    ("azureml", "max_runtime", "takes 1..2592000 s", {}),
    ("sagemaker", "max_wait", "takes 1..4838400 s", {"spot": True}),
    ("sagemaker", "keep_alive", "takes 0..3600 s", {}),
    ("sagemaker", "instance_count", "from 1 to 100", {}),
    ("sagemaker", "volume_size_gb", "from 1 to 16384", {}),
    ("vertex", "replica_count", "from 1 to ", {}),
    ("vertex", "boot_disk_size_gb", "from 100 to 64000", {}),
    ("azureml", "instance_count", "from 1 to 100", {}),
    ("azureml", "processes_per_instance", "from 1 to 64", {}),
]


def _op(kind: str, **arguments: object) -> object:
    cls, given = OPERATORS[kind]
    with DAG(f"numbers_{kind}", schedule=None):
        return cls(task_id="t", python_callable=dict, **given, **arguments)


def _cases():
    for kind, argument, stated, extra in NUMBERS:
        for value in WRONG:
            if argument == "keep_alive" and value == 0 and value is not True:
                continue  # no warm pool: SageMaker's own 0
            yield pytest.param(
                kind, argument, value, stated, extra, id=f"{kind}-{argument}-{value}"
            )


@pytest.mark.parametrize(("kind", "argument", "value", "stated", "extra"), _cases())
def test_a_number_that_is_not_finite_and_in_range_is_refused_at_parse(
    kind, argument, value, stated, extra
):
    with pytest.raises(SettingsError) as refused:
        _op(kind, **{argument: value}, **extra)
    said = str(refused.value)
    assert f".{argument}={value!r}" in said
    assert stated in said


@pytest.mark.parametrize("kind", sorted(OPERATORS))
@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10**6, 0.01, 1e-300])
def test_a_poll_interval_outside_its_range_names_the_range(kind, value):
    """Before: NaN, inf and a million seconds passed (only ``<= 0`` was refused)."""
    with pytest.raises(SettingsError) as refused:
        _op(kind, poll_interval=value)
    assert str(refused.value) == (
        f"{OPERATORS[kind][0].__name__}(task_id='t').poll_interval={value!r} must be a finite "
        "number of seconds from 0.1 to 3600, e.g. 30."
    )


@pytest.mark.parametrize("kind", sorted(OPERATORS))
@pytest.mark.parametrize("value", [0.1, 2.5, 30, 3600])
def test_a_poll_interval_within_its_range_is_taken(kind, value):
    assert _op(kind, poll_interval=value).poll_interval == value


@pytest.mark.parametrize("kind", sorted(OPERATORS))
def test_durations_within_the_services_bounds_are_taken(kind):
    _op(kind, max_runtime=timedelta(hours=2))
    _op(kind, max_runtime=7200)


def test_a_dag_file_with_a_nan_poll_interval_fails_its_import_naming_it(tmp_path):
    """The DAG never reaches a triggerer: its import error names the task and the range."""
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "nan_poll.py").write_text(
        "from airflow.sdk import dag, task\n\n\n"
        "@dag(schedule=None)\n"
        "def nan_poll():\n"
        "    @task.local_step(poll_interval=float('nan'))\n"
        "    def train():\n"
        "        return 1\n\n"
        "    train()\n\n\n"
        "nan_poll()\n"
    )
    bag = DagBag(dag_folder=str(tmp_path))
    (error,) = bag.import_errors.values()
    assert "@task.local_step(task_id='train').poll_interval=nan must be a finite number of " in (
        error
    )
    assert "seconds from 0.1 to 3600" in error
    assert "nan_poll" not in bag.dags
