"""What ``@task.<service>_step(...)`` renders: the same template fields as its operator."""

from __future__ import annotations

import pytest
from airflow.sdk import DAG, task

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1.0"
CASES = {  # decorator: (its arguments, with templates; what they render to)
    "local_step": ({"environment": {"RUN": "{{ run_id }}"}}, {"environment": {"RUN": "r1"}}),
    "sagemaker_step": (
        {
            "image_uri": "{{ params.image }}",
            "role": "{{ params.role }}",
            "environment": {"RUN": "{{ run_id }}"},
            "artifact_root": "s3://bucket/stepop",
        },
        {
            "image_uri": IMAGE,
            "role": "arn:aws:iam::123456789012:role/steps",
            "environment": {"RUN": "r1"},
        },
    ),
    "vertex_step": (
        {
            "image_uri": "{{ params.image }}",
            "environment": {"RUN": "{{ run_id }}"},
            "artifact_root": "gs://bucket/stepop",
        },  # fmt: skip
        {"image_uri": IMAGE, "environment": {"RUN": "r1"}},
    ),
    "azureml_step": (
        {
            "image_uri": "{{ params.image }}",
            "environment": {"RUN": "{{ run_id }}"},
            "artifact_root": "abfs://container/stepop",
        },  # fmt: skip
        {"image_uri": IMAGE, "environment": {"RUN": "r1"}},
    ),
}


@pytest.mark.parametrize("decorator", sorted(CASES))
def test_a_decorated_step_renders_its_operators_template_fields(decorator):
    arguments, rendered = CASES[decorator]
    params = {"image": IMAGE, "role": "arn:aws:iam::123456789012:role/steps"}
    with DAG(f"templated_{decorator}", schedule=None, params=params) as dag:

        @getattr(task, decorator)(**arguments)
        def fit(x: int):
            return x

        fit(1)
    (operator,) = dag.tasks
    operator.render_template_fields({"params": params, "run_id": "r1"})
    assert {name: getattr(operator, name) for name in rendered} == rendered
