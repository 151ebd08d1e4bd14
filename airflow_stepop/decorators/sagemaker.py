"""``@task.sagemaker_step(...)``: a TaskFlow function run by SageMakerStepOperator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_stepop.operators.sagemaker import SageMakerStepOperator


class _SageMakerStepDecoratedOperator(DecoratedOperator, SageMakerStepOperator):
    custom_operator_name = "@task.sagemaker_step"

    def __init__(self, *, python_callable, op_args=None, op_kwargs=None, **kwargs) -> None:
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            kwargs_to_upstream={
                "python_callable": python_callable,
                "op_args": op_args,
                "op_kwargs": op_kwargs,
            },
            **kwargs,
        )


def sagemaker_step_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Run the decorated function as a SageMaker training job."""
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_SageMakerStepDecoratedOperator,
        **kwargs,
    )
