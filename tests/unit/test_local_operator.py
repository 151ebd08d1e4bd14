"""LocalStepOperator's artifact root: refused when the DAG declares the step, or before any
upload when it comes from the configuration; its jobs' own runtime limit."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from types import SimpleNamespace

import fsspec
import pytest
from airflow.sdk import DAG
from airflow.sdk.bases.operator import ExecutorSafeguard

from airflow_stepop import LocalStepOperator
from airflow_stepop.settings import SettingsError


@pytest.mark.parametrize(
    ("root", "problem"),
    [
        ("s3://bucket/x", "is not a local directory"),
        ("gs://bucket/x", "is not a local directory"),
        ("stepop-artifacts", "is not an absolute local path"),
        ("file://data/stepop", "is not an absolute local path"),  # would write to /stepop
    ],
)
def test_a_root_the_jobs_cannot_read_is_refused_when_the_step_is_declared(root, problem):
    with pytest.raises(SettingsError) as refused, DAG("wrong_root", schedule=None):
        LocalStepOperator(task_id="t", python_callable=dict, artifact_root=root)
    message = str(refused.value)
    assert f"LocalStepOperator(task_id='t').artifact_root={root!r} {problem}" in message
    assert "file:// URL or an absolute path such as 'file:///data/stepop'" in message
    assert "[stepop] sagemaker_artifact_root" in message


def test_the_decorator_refuses_it_at_parse_time():
    from airflow.sdk import dag, task

    with pytest.raises(
        SettingsError, match=r"@task.local_step\(task_id=.step.\).artifact_root='s3://bucket/x'"
    ):

        @dag(schedule=None)
        def wrong():
            @task.local_step(artifact_root="s3://bucket/x")
            def step():
                return 1

            step()

        wrong()


@pytest.mark.parametrize(
    "root", ["file:///data/stepop", "file://localhost/data/stepop", "/data/stepop"]
)
def test_local_roots_are_accepted(root):
    with DAG("local_root", schedule=None):
        op = LocalStepOperator(task_id="t", python_callable=dict, artifact_root=root)
    assert op.step_artifact_root() == root


def test_a_configured_remote_root_is_refused_before_anything_is_uploaded(monkeypatch, tmp_path):
    from airflow.sdk.io.fs import _register_filesystems

    # a remote filesystem in this process, registered with Airflow as a provider's would be
    memory = fsspec.filesystem("memory")
    monkeypatch.setitem(_register_filesystems(), "memory", lambda conn_id, options: memory)
    root = f"memory://stepop-{uuid.uuid4().hex[:8]}/x"
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", root)
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    op = LocalStepOperator(task_id="t", python_callable=json.dumps, op_args=[1])
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)

    with pytest.raises(SettingsError, match=rf"\[stepop\] artifact_root='{root}' is not a local"):
        op.execute({"ti": ti}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    assert not memory.exists(root.split("://", 1)[1])  # no code bundle, no spec
    assert not (tmp_path / "jobs").exists()  # and no job


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        (
            "POLL_INTERVAL",
            "-1",
            "[stepop] poll_interval='-1' (AIRFLOW__STEPOP__POLL_INTERVAL) must",
        ),
        ("LOG_CALLS_PER_SECOND", "0", "[stepop] log_calls_per_second='0'"),
        ("POLL_INTERVAL", "nan", "[stepop] poll_interval='nan'"),  # no wait is ever shorter
        ("LIST_CALLS_PER_SECOND", "inf", "[stepop] list_calls_per_second='inf'"),
        ("INLINE_RESULT_MAX_BYTES", "64k", "[stepop] inline_result_max_bytes='64k'"),
        ("RESUME_HOLD_SECONDS", "-5", "[stepop] resume_hold_seconds='-5'"),
        ("END_FROM_TRIGGER", "maybe", "[stepop] end_from_trigger='maybe'"),
        ("LOCAL_JOBS_DIR", "relative/jobs", "[stepop] local_jobs_dir='relative/jobs'"),
    ],
)
def test_a_wrong_option_is_refused_before_a_job_starts(
    monkeypatch, tmp_path, option, value, problem
):
    """Read after the submit (poll_interval) or only by the triggerer (log_calls_per_second),
    a wrong value would leave a job started and then stopped, or watched by nobody."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv(f"AIRFLOW__STEPOP__{option}", value)
    op = LocalStepOperator(task_id="t", python_callable=json.dumps, op_args=[1])
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)

    with pytest.raises(ValueError) as refused:
        op.execute({"ti": ti}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    assert str(refused.value).startswith(problem)
    assert not (tmp_path / "jobs").exists() and not (tmp_path / "relative").exists()  # no job
    assert not (tmp_path / "artifacts").exists()  # nothing staged


@pytest.mark.parametrize(
    ("arguments", "limit"),
    [
        ({}, None),  # no deadline: the job runs as long as it takes
        ({"execution_timeout": timedelta(minutes=10)}, 900),  # the deadline plus 5 minutes
        ({"max_runtime": timedelta(hours=1)}, 3600),
        ({"max_runtime": 60, "execution_timeout": timedelta(minutes=10)}, 60),  # as given
    ],
)
def test_a_jobs_own_runtime_limit(arguments, limit):
    with DAG("limits", schedule=None):
        op = LocalStepOperator(task_id="t", python_callable=dict, **arguments)
    assert op.make_backend().max_runtime_s == limit


def test_a_wrong_max_runtime_is_refused_at_parse_time():
    with pytest.raises(SettingsError) as refused, DAG("limits", schedule=None):
        LocalStepOperator(task_id="t", python_callable=dict, max_runtime="1h")
    assert (
        "LocalStepOperator(task_id='t').max_runtime='1h' must be a timedelta or whole seconds"
        in str(refused.value)
    )


def test_arguments_the_callable_cannot_take_are_refused_at_parse():
    """The job would fail on them only after its submit (on a cloud, after its machine's start);
    ``@task`` refuses such a call itself, the classic operator did not."""

    def train(x, epochs=1):
        return x

    with pytest.raises(SettingsError) as err:
        LocalStepOperator(task_id="t", python_callable=train, op_kwargs={"y": 1})
    # the unknown name, not the missing argument it was perhaps meant to be
    assert str(err.value).startswith(
        "LocalStepOperator(task_id='t'): train(x, epochs=1) cannot be called with op_args=[], "
        "op_kwargs={'y': 1} (got an unexpected keyword argument 'y')"
    )
    with pytest.raises(SettingsError, match=r"\(missing a required argument: 'x'\)"):
        LocalStepOperator(task_id="t", python_callable=train, op_kwargs={"epochs": 2})
    with pytest.raises(SettingsError, match="too many positional arguments"):
        LocalStepOperator(task_id="t", python_callable=train, op_args=[1, 2, 3])
    LocalStepOperator(task_id="t", python_callable=train, op_args=[1], op_kwargs={"epochs": 2})


def test_a_parameter_named_like_a_context_value_needs_no_argument_at_parse():
    """It is filled when the task runs, as @task fills it."""

    def train(x, ds, params):
        return x

    with DAG("context_parameters", schedule=None):
        op = LocalStepOperator(task_id="t", python_callable=train, op_args=[1])
    assert op.op_args == [1]
    with pytest.raises(SettingsError, match="cannot be called with"):
        LocalStepOperator(task_id="u", python_callable=train, op_args=[1, 2, 3, 4])


def test_resources_for_every_step_of_a_dag_go_in_default_args_as_step_resources():
    """``default_args={"resources": ...}`` would reach plain tasks too (Airflow's own
    ``Resources``); ``step_resources`` reaches only steps, and a step's own ``resources=`` wins."""
    from airflow.sdk import task

    from airflow_stepop import ResourceSettings

    shared, own = ResourceSettings(cpu_count=2), ResourceSettings(cpu_count=1)
    with DAG("shared_resources", schedule=None, default_args={"step_resources": shared}) as dag:

        @task
        def plain():
            return 1

        plain()
        LocalStepOperator(task_id="shared", python_callable=max, op_args=[1, 2])
        LocalStepOperator(task_id="own", python_callable=max, op_args=[1, 2], resources=own)
        LocalStepOperator.partial(task_id="mapped", python_callable=max, resources=own).expand(
            op_args=[[1, 2]]
        )
    assert dag.get_task("shared").resource_settings == shared
    assert dag.get_task("own").resource_settings == own
    assert dag.get_task("mapped").partial_kwargs["step_resources"] == own


def test_resource_settings_in_default_args_resources_are_refused_naming_step_resources():
    """Airflow would fail with a bare TypeError ('argument after ** must be a mapping')."""
    from airflow_stepop import ResourceSettings

    shared = ResourceSettings(gpu_count=1)
    shared_wrongly = DAG("shared_wrongly", schedule=None, default_args={"resources": shared})
    with shared_wrongly, pytest.raises(SettingsError) as refused:
        LocalStepOperator(task_id="s", python_callable=max, op_args=[1, 2])
    assert "default_args={'step_resources': ResourceSettings(gpu_count=1)}" in str(refused.value)


def test_a_misspelt_step_key_in_default_args_is_refused():
    """Airflow drops a default_args key no operator takes; step_resource would vanish unread."""
    from airflow_stepop import ResourceSettings

    misspelt = {"step_resource": ResourceSettings(gpu_count=1), "step_id": "s-1"}  # EMR's is fine
    with DAG("misspelt", schedule=None, default_args=misspelt), pytest.raises(SettingsError) as e:
        LocalStepOperator(task_id="s", python_callable=max, op_args=[1, 2])
    assert str(e.value).startswith(
        "default_args['step_resource'] is not a step argument, and Airflow would drop it unread; "
        "steps take default_args['step_resources']"
    )
