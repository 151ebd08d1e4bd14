"""The Airflow context a step's parameters may name, as its job can receive it.

A plain ``@task`` gets a context value for each parameter named like one (``ds``, ``params``,
``ti``). A step's job runs without Airflow (often without pendulum), so a step gets the values
that are plain data, as ``PythonVirtualenvOperator`` does: text as it is, dates as
standard-library ``datetime``\\ s (with a fixed UTC offset), ``params`` as a dict. A parameter
named after a value that lives in the worker (``ti``, ``dag_run``, ``conn``) is refused with
what to pass instead, since the job could never have it.
"""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Collection, Mapping
from typing import Any

from airflow_stepop.setting_values import SettingsError

# Plain text (the task SDK's context has no try_number or test_mode: a template gives those).
_TEXT = frozenset(
    {
        "ds",
        "ds_nodash",
        "partition_key",
        "run_id",
        "task_instance_key_str",
        "ts",
        "ts_nodash",
        "ts_nodash_with_tz",
    }
)
# pendulum DateTimes or None (the prev_*_success ones are lazy proxies), sent as datetime.
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
SENDABLE_KEYS = _TEXT | _DATES | {"params", "task_reschedule_count"}


def open_parameters(
    function: Callable[..., Any], op_args: Collection[Any], op_kwargs: Mapping[str, Any]
) -> dict[str, inspect.Parameter]:
    """The parameters a keyword could fill that no argument (nor a partial's own) fills."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: it names no context
        return {}
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    taken = {p.name for p in parameters[: len(op_args)] if p.kind in positional}
    taken.update(op_kwargs)
    taken.update(getattr(function, "keywords", None) or {})  # a functools.partial's
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: p for p in parameters if p.kind in by_keyword and p.name not in taken}


def context_arguments(
    owner: str,
    function: Callable[..., Any],
    op_args: Collection[Any],
    op_kwargs: Mapping[str, Any],
    context: Mapping[str, Any],
) -> dict[str, Any]:
    """The keyword arguments the step gets from ``context``: one per parameter named like a
    sendable value that no argument fills. ``**kwargs`` gets none: a step's ``**hp`` is its
    own (a ``Model(**hp)`` would choke on a dozen context values)."""
    open_names = open_parameters(function, op_args, op_kwargs)
    worker_only = sorted(open_names.keys() & (set(context) - SENDABLE_KEYS))
    if worker_only:
        name = worker_only[0]
        raise SettingsError(
            f"{owner}: the step's parameter {name!r} is named like Airflow's context value "
            f"{name!r}, which lives in the Airflow worker and cannot be sent to a step's job. "
            "Pass what the step needs from it as an argument instead (e.g. "
            "op_kwargs={'try_number': '{{ ti.try_number }}'}), or rename the parameter. A step "
            f"is given these context values by name: {', '.join(sorted(SENDABLE_KEYS))}."
        )
    given = {}
    for key in sorted(SENDABLE_KEYS & open_names.keys()):
        if key in context:
            given[key] = _plain(key, context[key])
        elif open_names[key].default is inspect.Parameter.empty:
            given[key] = None  # as @task gives it: this run has none (no logical date, no ds)
    return given


def _plain(key: str, value: Any) -> Any:
    """The value as data the job unpickles with the standard library alone."""
    if key == "params":
        return dict(value) if value is not None else {}
    if key in _DATES:  # a lazy proxy of None is no datetime
        return _standard_datetime(value) if isinstance(value, dt.datetime) else None
    if key in _TEXT:
        return None if value is None else str(value)
    return value if isinstance(value, int) else None


def without_pendulum(value: Any) -> Any:
    """``value`` with Airflow's pendulum dates and durations (``{{ logical_date }}`` rendered
    natively, ``macros.datetime``) as the standard library's, in lists, tuples and dicts too:
    pickled as they are, they would not unpickle in a job without pendulum. Anything else is
    kept as it is (a pandas Timestamp is a datetime of its own)."""
    kind = type(value)
    if kind in (list, tuple):
        items = [without_pendulum(item) for item in value]
        changed = any(new is not old for new, old in zip(items, value, strict=True))
        return kind(items) if changed else value
    if kind is dict:
        pairs = [(without_pendulum(k), without_pendulum(v)) for k, v in value.items()]
        changed = any(
            k is not old_k or v is not old_v
            for (k, v), (old_k, old_v) in zip(pairs, value.items(), strict=True)
        )
        return dict(pairs) if changed else value
    if not kind.__module__.startswith("pendulum"):
        return value
    if isinstance(value, dt.datetime):
        return _standard_datetime(value)
    if isinstance(value, dt.date):
        return dt.date(value.year, value.month, value.day)
    if isinstance(value, dt.time):
        return dt.time(value.hour, value.minute, value.second, value.microsecond)
    if isinstance(value, dt.timedelta):
        return dt.timedelta(seconds=value.total_seconds())
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
