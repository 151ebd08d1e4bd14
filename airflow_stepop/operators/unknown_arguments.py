"""An argument a step operator does not take, named when the DAG file is parsed: with the
closest one it does (a typo, ``instance_typ=``), with ours for another tool's name for it
(``image=``), or with the other step operators whose argument it is (``flex_start=`` given to
SageMaker's). Airflow's own error lists such an argument without a suggestion.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseOperator

from airflow_stepop.setting_values import MACHINE_COUNT_NAMES


@functools.cache
def _parameters(owner: type) -> frozenset[str]:
    """The keyword arguments a class's own ``__init__`` names."""
    import inspect

    init = vars(owner)["__init__"]
    init = getattr(init, "__wrapped__", init)  # BaseOperator's metaclass wraps each __init__
    kinds = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    try:
        found = inspect.signature(init).parameters.values()
    except (TypeError, ValueError):  # a builtin's __init__, in a user's mixin
        return frozenset()
    return frozenset(p.name for p in found if p.kind in kinds) - {"self"}


def refuse_unknown_arguments(cls: type, kwargs: Mapping[str, Any]) -> None:
    """What reaches here goes to BaseOperator; an argument it does not take either is a typo of
    one of ours (``instance_typ=``), named with the closest argument (Airflow's own error lists
    it without a suggestion)."""
    # "_airflow_*" arguments are Airflow's own, for mapped tasks
    unknown = sorted(k for k in kwargs if k not in _parameters(BaseOperator) and k[:1] != "_")
    if not unknown:
        return
    import difflib  # only on the error path: every DAG parse passes through here

    known = set().union(*(_parameters(c) for c in cls.__mro__ if "__init__" in vars(c)))
    name = getattr(cls, "custom_operator_name", None) or cls.__name__
    if isinstance(task_id := kwargs.get("task_id"), str):
        if group := kwargs.get("task_group"):  # set by Airflow inside a TaskGroup
            task_id = group.child_id(task_id)
        name += f"(task_id={task_id!r})"
    hints = []
    for argument in unknown:
        meant = _meant(argument, known)  # another tool's name for one of ours comes first
        if not meant and (owners := _step_operators_taking(argument, cls)):
            hints.append(f"{argument}={kwargs[argument]!r} (an argument of {' and '.join(owners)}"
                         f"{_queued_capacity(cls)})")  # fmt: skip
            continue
        close = difflib.get_close_matches(argument, sorted(known), n=1)
        meant = meant or [f"{name}=" for name in close]
        hints.append(f"{argument}= (did you mean {meant[0]}?)" if meant else f"{argument}=")
    raise TypeError(
        f"{name} got arguments it does not take: {', '.join(hints)}. {_where_documented(cls)}"
    )


def _step_operators_taking(argument: str, cls: type) -> list[str]:
    """The other step operators of this package whose own arguments include ``argument``: a
    service's option given to another service's operator (``flex_start=`` on SageMaker)."""
    import importlib
    import pkgutil

    import airflow_stepop.operators as ours

    for module in pkgutil.iter_modules(ours.__path__):  # the error path: load every operator
        importlib.import_module(f"{ours.__name__}.{module.name}")
    base = next((c for c in cls.__mro__ if c.__name__ == "BaseStepOperator"), None)
    found, pending = [], list(base.__subclasses__()) if base else []
    while pending:
        other = pending.pop()
        pending.extend(other.__subclasses__())
        if (
            other.__module__.startswith(ours.__name__)
            and not issubclass(cls, other)
            and "__init__" in vars(other)
            and argument in _parameters(other)
        ):
            found.append(other.__name__)
    return sorted(set(found))


def _queued_capacity(cls: type) -> str:
    """The operator's own way to wait for capacity, named as the fix."""
    own = getattr(cls, "queued_capacity_arguments", ())  # a BaseStepOperator's
    if not own:
        return f", not of {cls.__name__}"
    return f", not of {cls.__name__}; its way to queue for capacity is {'/'.join(own)}"


def _where_documented(cls: type) -> str:
    """Where a user reads the operator's arguments: our docs for ours, its docstring for a
    step operator of another package (a backend of one's own)."""
    if cls.__module__.startswith("airflow_stepop."):
        return "See the operator's arguments in the docs (README.md, docs/<service>.md)."
    return (
        f"See the arguments of {cls.__name__} (help({cls.__name__}) in {cls.__module__}) and "
        "those every step operator takes (README.md of airflow-stepop)."
    )


def _meant(argument: str, known: set[str]) -> list[str]:
    """The argument meant by a name another tool uses for it (not a typo: no spelling is
    close), as it is written here."""
    from dataclasses import fields

    from airflow_stepop.settings import DockerSettings

    if argument in MACHINE_COUNT_NAMES:
        return [f"{name}=" for name in sorted(known & {"instance_count", "replica_count"})][:1]
    if "docker" in known:
        if argument in {f.name for f in fields(DockerSettings)}:
            return [f"docker=DockerSettings({argument}=...)"]
        if argument in {"image", "image_uri", "base_image", "python_version"}:
            return ["docker=DockerSettings(parent_image=...)"]
    return []
