"""``@task.sagemaker_step(...)``: a TaskFlow function run by SageMakerStepOperator."""

from __future__ import annotations

from airflow_stepop.decorators.base import StepDecoratedOperator, step_task_decorator
from airflow_stepop.operators.sagemaker import SageMakerStepOperator


class SageMakerStepDecoratedOperator(StepDecoratedOperator, SageMakerStepOperator):
    custom_operator_name = "@task.sagemaker_step"


sagemaker_step_task = step_task_decorator(SageMakerStepDecoratedOperator)
