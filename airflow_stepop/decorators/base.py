"""TaskFlow support shared by every step operator: ``@task.<service>_step(...)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory


class StepDecoratedOperator(DecoratedOperator):
    """Put before a step operator class: the decorated function becomes its python_callable.

    Its template fields are the step operator's (``image_uri``, ``environment``, ...) as well
    as ``op_args`` and ``op_kwargs``: ``DecoratedOperator``, first in the class's bases, would
    otherwise hide the step operator's, and ``@task.<service>_step(image_uri="{{ ... }}")``
    would go out unrendered.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = (field for base in cls.__bases__ for field in base.template_fields)
        cls.template_fields = tuple(dict.fromkeys(fields))

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


def step_task_decorator(
    decorated_operator_class: type[StepDecoratedOperator],
) -> Callable[..., TaskDecorator]:
    """The ``@task.<name>`` function of a step operator (what get_provider_info registers)."""

    def decorator(
        python_callable: Callable[..., Any] | None = None,
        multiple_outputs: bool | None = None,
        **kwargs: Any,
    ) -> TaskDecorator:
        from airflow_stepop.operators.arguments import rename_step_resources

        return task_decorator_factory(
            python_callable=python_callable,
            multiple_outputs=multiple_outputs,
            decorated_operator_class=decorated_operator_class,
            **rename_step_resources(kwargs),  # so that .expand() keeps them (see partial())
        )

    decorator.__doc__ = f"Run the decorated function as {decorated_operator_class.__name__} does."
    return decorator
