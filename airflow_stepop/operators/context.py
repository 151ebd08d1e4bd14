"""The Airflow context a step's parameters may name, as its job can receive it.

A plain ``@task`` gets a context value for each parameter named like one (``ds``, ``params``,
``ti``) and the whole context in ``**kwargs``. A step's job runs without Airflow (often without
pendulum), so it gets the values that are plain data, as ``PythonVirtualenvOperator`` does:
text and numbers as they are, dates as standard-library ``datetime``\\ s (with a fixed UTC
offset), ``params`` as a dict.
A parameter named after a worker-only value (``ti``, ``dag_run``, ``conn``) is refused with
what to pass instead, since the job could never have it.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

from airflow_stepop.settings import SettingsError

# Plain text and numbers.
_AS_IS = frozenset(
    {
        "ds",
        "ds_nodash",
        "expanded_ti_count",
        "partition_key",
        "run_id",
        "task_instance_key_str",
        "task_reschedule_count",
        "test_mode",
        "try_number",
        "ts",
        "ts_nodash",
        "ts_nodash_with_tz",
    }
)
# pendulum DateTimes (or None), sent as datetime.datetime.
_DATES = frozenset(
    {
        "data_interval_end",
        "data_interval_start",
        "logical_date",
        "partition_date",
        "prev_data_interval_end_success",
        "prev_data_interval_start_success",
        "prev_end_date_success",
        "prev_start_date_success",
    }
)
SENDABLE_KEYS = _AS_IS | _DATES | {"params"}


def _worker_only_keys() -> frozenset[str]:
    from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS

    return frozenset(KNOWN_CONTEXT_KEYS) - SENDABLE_KEYS


def _parameters(
    function: Callable[..., Any], op_args: Collection[Any], op_kwargs: Mapping[str, Any]
) -> tuple[list[str], set[str], bool]:
    """The parameters a keyword could fill, the names the arguments already fill, and whether
    the function takes ``**kwargs``."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: it names no context
        return [], set(), False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    taken = {p.name for p in parameters[: len(op_args)] if p.kind in positional}
    taken.update(op_kwargs)
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [p.name for p in parameters if p.kind in by_keyword]
    return named, taken, any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)


def context_arguments(
    owner: str,
    function: Callable[..., Any],
    op_args: Collection[Any],
    op_kwargs: Mapping[str, Any],
    context: Mapping[str, Any],
) -> dict[str, Any]:
    """The keyword arguments the step gets from ``context``: one per parameter named like a
    sendable key, or every sendable key for a ``**kwargs`` step. Given arguments win."""
    named, taken, takes_all = _parameters(function, op_args, op_kwargs)
    open_names = set(named) - taken
    worker_only = sorted(open_names & _worker_only_keys())
    if worker_only:
        name = worker_only[0]
        raise SettingsError(
            f"{owner}: the step's parameter {name!r} is named like Airflow's context value "
            f"{name!r}, which lives in the Airflow worker and cannot be sent to a step's job. "
            "Pass what the step needs from it as an argument instead (e.g. "
            "op_kwargs={'try_number': '{{ ti.try_number }}'}), or rename the parameter. A step "
            f"is given these context values by name: {', '.join(sorted(SENDABLE_KEYS))}."
        )
    wanted = (SENDABLE_KEYS - taken) if takes_all else (SENDABLE_KEYS & open_names)
    return {key: _plain(key, context[key]) for key in sorted(wanted) if key in context}


def _plain(key: str, value: Any) -> Any:
    if key == "params":
        return dict(value) if value is not None else {}
    if key in _DATES and isinstance(value, dt.datetime):
        return _standard_datetime(value)
    return value


def _standard_datetime(value: dt.datetime) -> dt.datetime:
    """A pendulum DateTime as the standard library's, which unpickles without pendulum. Its
    zone becomes a fixed offset: a zone name would need a time zone database in the image."""
    offset = value.utcoffset()
    tzinfo = None if offset is None else dt.UTC if not offset else dt.timezone(offset)
    return dt.datetime(
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
        tzinfo=tzinfo,
    )
