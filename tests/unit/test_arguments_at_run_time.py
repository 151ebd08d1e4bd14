"""Arguments only the running task can check, refused before anything is uploaded and named: a
connection id that Airflow does not have, a template that rendered empty."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.sdk.bases.operator import ExecutorSafeguard

from airflow_stepop import AzureMLStepOperator, SageMakerStepOperator, VertexStepOperator
from airflow_stepop.settings import SettingsError

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1.0"
TI = SimpleNamespace(dag_id="d", run_id="r", task_id="t", map_index=-1, try_number=1)


class Unreached(RuntimeError):
    """The operator went on past the connection check (to its backend)."""


@pytest.mark.parametrize(
    ("operator", "argument", "extra"),
    [
        (SageMakerStepOperator, "aws_conn_id", {"instance_type": "ml.m5.large", "image_uri": ECR}),
        (VertexStepOperator, "gcp_conn_id", {"machine_type": "n1-standard-4", "image_uri": "i:1"}),
        (
            AzureMLStepOperator,
            "azureml_conn_id",
            {"instance_type": "Standard_DS3_v2", "image_uri": "i:1"},
        ),
    ],
)
def test_a_connection_airflow_does_not_have_is_named_with_its_argument(
    operator, argument, extra, monkeypatch
):
    """Before: Airflow's "The conn_id ... isn't defined" from deep in a cloud SDK, after the
    code bundle was uploaded; on SageMaker the amazon provider ran the job on the worker's own
    credentials instead."""
    monkeypatch.setattr(operator, "make_backend", lambda self: (_ for _ in ()).throw(Unreached()))
    op = operator(task_id="t", python_callable=dict, **extra, **{argument: "prod_typo"})
    with pytest.raises(SettingsError) as refused:
        op.execute(
            {"ti": TI}, **{f"{operator.__name__}__sentinel": ExecutorSafeguard.sentinel_value}
        )
    assert str(refused.value) == (
        f"{operator.__name__}(task_id='t').{argument}='prod_typo': Airflow has no connection "
        "with that id. "
        "Create it (Admin > Connections, `airflow connections add prod_typo ...`, or the "
        f"environment variable AIRFLOW_CONN_PROD_TYPO), or pass {argument}= the id of one that "
        "exists."
    )


def test_a_connection_that_exists_passes(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_GCP_PROD", '{"conn_type": "google_cloud_platform"}')
    monkeypatch.setattr(
        VertexStepOperator, "make_backend", lambda self: (_ for _ in ()).throw(Unreached())
    )
    op = VertexStepOperator(task_id="t", python_callable=dict, image_uri="img:1",
                            machine_type="n1-standard-4", gcp_conn_id="gcp_prod")  # fmt: skip
    with pytest.raises(Unreached):
        op.execute({"ti": TI}, VertexStepOperator__sentinel=ExecutorSafeguard.sentinel_value)


@pytest.mark.parametrize("conn_id", ["aws_default", None])
def test_sagemaker_without_aws_default_uses_the_ambient_credentials_as_airflow_does(
    conn_id, monkeypatch
):
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
    monkeypatch.setattr(
        SageMakerStepOperator, "make_backend", lambda self: (_ for _ in ()).throw(Unreached())
    )
    op = SageMakerStepOperator(task_id="t", python_callable=dict, image_uri=ECR,
                               instance_type="ml.m5.large", aws_conn_id=conn_id)  # fmt: skip
    with pytest.raises(Unreached):
        op.execute({"ti": TI}, SageMakerStepOperator__sentinel=ExecutorSafeguard.sentinel_value)


@pytest.mark.parametrize(
    ("operator", "argument", "extra"),
    [
        (SageMakerStepOperator, "image_uri", {"instance_type": "ml.m5.large"}),
        (SageMakerStepOperator, "role", {"instance_type": "ml.m5.large", "image_uri": ECR}),
        (VertexStepOperator, "image_uri", {"machine_type": "n1-standard-4"}),
        (AzureMLStepOperator, "image_uri", {"instance_type": "Standard_DS3_v2"}),
    ],
)
def test_a_template_that_rendered_empty_is_named(operator, argument, extra, monkeypatch):
    """``image_uri="{{ var.value.image }}"`` with the Variable empty: before, 'steps need
    image_uri= or docker=', as if the argument had not been given."""
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", '{"conn_type": "aws"}')
    monkeypatch.setenv(
        "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT", '{"conn_type": "google_cloud_platform"}'
    )
    monkeypatch.setenv("AIRFLOW_CONN_AZUREML_DEFAULT", '{"conn_type": "azure_ml"}')
    monkeypatch.setattr(operator, "make_backend", lambda self: (_ for _ in ()).throw(Unreached()))
    op = operator(task_id="t", python_callable=dict, **{argument: "{{ var.value.x }}", **extra})
    setattr(op, argument, "")  # as render_template_fields leaves it
    with pytest.raises(SettingsError) as refused:
        op.execute(
            {"ti": TI}, **{f"{operator.__name__}__sentinel": ExecutorSafeguard.sentinel_value}
        )
    assert str(refused.value) == (
        f"{operator.__name__}(task_id='t').{argument} is '' after its template was rendered: "
        "the Variable, "
        f"param or XCom it reads is empty. Give that a value, or leave {argument}= out."
    )


def test_an_environment_value_rendered_to_a_non_text_is_text_or_named():
    """Native rendering turns "{{ params.layers | tojson }}" back into a list: it is JSON."""
    import datetime

    from airflow_stepop.operators.arguments import rendered_environment

    native = {"N": 9, "ON": True, "X": "x", "LAYERS": [64, 32], "HP": {"opt": "adam"}}
    assert rendered_environment("S", native) == {
        "N": "9",
        "ON": "True",
        "X": "x",
        "LAYERS": "[64, 32]",
        "HP": '{"opt": "adam"}',
    }
    assert rendered_environment("S", {"PAIR": ["EUR", "USD"]}) == {"PAIR": '["EUR", "USD"]'}
    with pytest.raises(SettingsError) as refused:
        rendered_environment("@task.local_step", {"DAY": datetime.date(2026, 1, 2)})
    assert str(refused.value).startswith(
        "@task.local_step.environment['DAY'] rendered to a date ('2026-01-02'); an environment "
        "variable is text."
    )


def test_op_args_a_template_that_rendered_to_text_is_refused_with_native_rendering_named(
    monkeypatch,
):
    """``op_args="{{ params.pair }}"`` is taken at parse, as PythonOperator takes it; without
    ``render_template_as_native_obj`` it renders to the text of a list."""
    from airflow_stepop import LocalStepOperator

    monkeypatch.setattr(
        LocalStepOperator, "make_backend", lambda self: (_ for _ in ()).throw(Unreached())
    )
    op = LocalStepOperator(task_id="t", python_callable=max, op_args="{{ params.pair }}")
    op.op_args = "[3, 4]"  # as Airflow renders it without native rendering
    with pytest.raises(SettingsError) as refused:
        op.execute({"ti": TI}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)
    assert str(refused.value).startswith(
        "LocalStepOperator(task_id='t').op_args='[3, 4]' must be a list"
    )
    assert "unless the DAG sets render_template_as_native_obj=True" in str(refused.value)


def test_arguments_rendered_from_an_upstream_output_are_bound_to_the_callable(monkeypatch):
    from airflow.sdk import DAG, task

    from airflow_stepop import LocalStepOperator

    def train(x, epochs=1):
        return x

    monkeypatch.setattr(
        LocalStepOperator, "make_backend", lambda self: (_ for _ in ()).throw(Unreached())
    )
    with DAG("upstream_arguments", schedule=None):

        @task
        def settings():
            return {"y": 1}

        op = LocalStepOperator(task_id="t", python_callable=train, op_kwargs=settings())
    op.op_kwargs = {"y": 1}  # rendered
    with pytest.raises(SettingsError, match=r"train\(x, epochs=1\) cannot be called with"):
        op.execute({"ti": TI}, LocalStepOperator__sentinel=ExecutorSafeguard.sentinel_value)


@pytest.mark.parametrize(
    ("op_args", "op_kwargs", "surplus"),
    [
        ("{{ params.pair }}", {"epochs": 2, "epoch": 3}, "unexpected keyword argument 'epoch'"),
        ([1, 2, 3], "{{ params.settings }}", "too many positional arguments"),
    ],
)
def test_a_surplus_beside_an_argument_rendered_later_is_refused_at_parse(
    op_args, op_kwargs, surplus
):
    """One of ``op_args``/``op_kwargs`` a template: the other one is checked when the DAG is
    parsed, for what no render can fix (a name the callable lacks, too many values)."""
    from airflow_stepop import LocalStepOperator

    def train(x, epochs=1):
        return x

    with pytest.raises(SettingsError) as refused:
        LocalStepOperator(task_id="t", python_callable=train, op_args=op_args, op_kwargs=op_kwargs)
    assert surplus in str(refused.value)
    assert f"op_args={op_args!r}, op_kwargs={op_kwargs!r}" in str(refused.value)
    # what a render may still fill is not refused now
    LocalStepOperator(task_id="t2", python_callable=train, op_args="{{ params.x }}", op_kwargs={})


def test_a_secret_in_a_list_rendered_to_json_is_refused_before_its_escapes_hide_it():
    """JSON escapes a quote, a backslash or an accent, and the masker matches the raw text."""
    from airflow.sdk.log import mask_secret

    from airflow_stepop.operators.arguments import rendered_environment

    secret = 'pä55"w\\rd-stepop-9'
    mask_secret(secret)
    with pytest.raises(SettingsError, match=r"environment\['HOSTS'\] holds a value Airflow masks"):
        rendered_environment("S", {"HOSTS": ["db1", {"password": secret}]})
