"""``@task.vertex_step(...)``: a TaskFlow function run by VertexStepOperator."""

from __future__ import annotations

from airflow_stepop.decorators.base import StepDecoratedOperator, step_task_decorator
from airflow_stepop.operators.vertex import VertexStepOperator


class VertexStepDecoratedOperator(StepDecoratedOperator, VertexStepOperator):
    custom_operator_name = "@task.vertex_step"


vertex_step_task = step_task_decorator(VertexStepDecoratedOperator)
