"""Every argument an operator takes is in its page's docs: the docs are what users write from."""

from __future__ import annotations

import inspect

import pytest

from airflow_stepop import (
    AzureMLStepOperator,
    KubernetesStepOperator,
    LocalStepOperator,
    SageMakerStepOperator,
    VertexStepOperator,
)
from tests.doc_blocks import REPO


@pytest.mark.parametrize(
    ("operator", "page"),
    [
        (SageMakerStepOperator, "docs/sagemaker.md"),
        (VertexStepOperator, "docs/vertex.md"),
        (AzureMLStepOperator, "docs/azureml.md"),
        (KubernetesStepOperator, "docs/kubernetes.md"),
        (LocalStepOperator, "README.md"),
    ],
)
def test_each_argument_of_an_operator_is_on_its_page(operator, page):
    init = vars(operator)["__init__"]
    init = getattr(init, "__wrapped__", init)  # BaseOperator's metaclass wraps each __init__
    names = [name for name in inspect.signature(init).parameters if name not in ("self", "kwargs")]
    text = (REPO / page).read_text()
    assert names and [name for name in names if f"`{name}`" not in text] == []
