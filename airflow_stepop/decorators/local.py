"""``@task.local_step(...)``: a TaskFlow function run by LocalStepOperator."""

from __future__ import annotations

from airflow_stepop.decorators.base import StepDecoratedOperator, step_task_decorator
from airflow_stepop.operators.local import LocalStepOperator


class LocalStepDecoratedOperator(StepDecoratedOperator, LocalStepOperator):
    custom_operator_name = "@task.local_step"


local_step_task = step_task_decorator(LocalStepDecoratedOperator)
