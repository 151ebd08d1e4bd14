"""``@task.kubernetes_step(...)``: a TaskFlow function run by KubernetesStepOperator."""

from __future__ import annotations

from airflow_stepop.decorators.base import StepDecoratedOperator, step_task_decorator
from airflow_stepop.operators.kubernetes import KubernetesStepOperator


class KubernetesStepDecoratedOperator(StepDecoratedOperator, KubernetesStepOperator):
    custom_operator_name = "@task.kubernetes_step"


kubernetes_step_task = step_task_decorator(KubernetesStepDecoratedOperator)
