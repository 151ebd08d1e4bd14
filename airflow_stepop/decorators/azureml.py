"""``@task.azureml_step(...)``: a TaskFlow function run by AzureMLStepOperator."""

from __future__ import annotations

from airflow_stepop.decorators.base import StepDecoratedOperator, step_task_decorator
from airflow_stepop.operators.azureml import AzureMLStepOperator


class AzureMLStepDecoratedOperator(StepDecoratedOperator, AzureMLStepOperator):
    custom_operator_name = "@task.azureml_step"


azureml_step_task = step_task_decorator(AzureMLStepDecoratedOperator)
