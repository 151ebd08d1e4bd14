"""Checks that every backend's argument rules share: each refusal names the argument, the value
and a valid example (``SettingsError``), at DAG parse time.

A backend module turns its operator's keyword arguments into its own job configuration with
these (e.g. ``SageMakerJobConfig.from_arguments``); operators only declare the arguments.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow_stepop.setting_values import (
    SettingsError,
    check_image_reference,
    refuse_reserved_env,
)

CONN_ID = r"^[\w.\-]+$"
# The object stores' bucket naming rules (a name outside them is refused, or retried as an error).
BUCKET_NAME = {
    "s3": (r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]",
           "S3 bucket names are 3-63 lowercase letters, digits, '.' or '-'."),
    # at most 63 between dots (so 63 in all without one), 222 in all
    "gs": (r"(?!.*[a-z0-9_-]{64})[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]",
           "GCS bucket names are 3-63 lowercase letters, digits, '-', '_' or '.' (up to 222 "
           "with dots)."),
}  # fmt: skip
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def is_templated(value: Any) -> bool:
    """A Jinja value that only gets its real value at run time: checked then, not now."""
    return isinstance(value, str) and "{{" in value


def option(name: str, value: Any, pattern: str, what: str, example: str) -> str:
    """A ``[stepop]`` option's value: no DAG's parse checked it, so it is checked where used."""
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise SettingsError(
            f"[stepop] {name}={value!r} is not {what}; set it to e.g. {example!r} (or give the "
            "step resources= or the argument itself)."
        )
    return value


def whole_number(owner: str, name: str, value: Any, *, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SettingsError(
            f"{owner}.{name}={value!r} must be a whole number from {low} to {high}."
        )
    return value


# The seconds between two polls of a job's state an operator takes. Below: a trigger polling
# faster than a service answers (the triggerer every deferred task shares would spend its loop
# on one); above: an hour, what a finished job's result may wait. The trigger clamps what it is
# given, a stored trigger included, to a range that holds this one (triggers/waits.py).
POLL_INTERVAL_S = (0.1, 3600.0)


def finite_seconds(
    owner: str, name: str, value: Any, *, low: float, high: float, example: str
) -> float:
    """A duration given as a number of seconds (an int or a float, not a bool): finite and from
    ``low`` to ``high``. NaN compares false with everything, so a check of ``<= 0`` alone lets
    it through, and a wait of NaN or inf seconds never ends, or never waits."""
    number = value if isinstance(value, numbers.Real) and not isinstance(value, bool) else None
    try:
        within = number is not None and math.isfinite(number) and low <= number <= high
    except OverflowError:  # an int too large for a float
        within = False
    if not within:
        raise SettingsError(
            f"{owner}.{name}={value!r} must be a finite number of seconds from {low:g} to "
            f"{high:g}, e.g. {example}."
        )
    return float(number)


def boolean(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(f"{owner}.{name}={value!r} must be True or False.")
    return value


def seconds(owner: str, name: str, value: Any, *, low: int, high: int, service: str) -> int:
    """A duration given as a timedelta or whole seconds, within the service's bounds."""
    if isinstance(value, timedelta):
        result = math.ceil(value.total_seconds())
    elif isinstance(value, int) and not isinstance(value, bool):
        result = value
    else:  # a float (NaN and inf among them) is refused too: the services take whole seconds
        raise SettingsError(
            f"{owner}.{name}={value!r} must be a timedelta or whole seconds, "
            f"e.g. timedelta(hours=2) or 7200; {service} takes {low}..{high} s."
        )
    if not low <= result <= high:
        raise SettingsError(
            f"{owner}.{name}={value!r} is {result} s; {service} takes {low}..{high} s."
        )
    return result


# How long a job may run past the task's execution_timeout before the service's own limit ends
# it. The trigger stops the job at the deadline itself (within a poll round, 5 s on the clouds);
# the service's limit is the backstop for when no trigger watches. Five minutes cover a
# triggerer failover (Airflow moves a dead triggerer's triggers after its 30 s health-check
# threshold), a triggerer restart and a few throttled calls, and bound what an unwatched job
# can cost past its deadline to five minutes of its machines.
RUNTIME_GRACE = timedelta(minutes=5)


def runtime_limit(execution_timeout: Any, *, high: int, otherwise: int | None) -> int | None:
    """The service's runtime limit (seconds) of a step that sets no ``max_runtime``: the task's
    ``execution_timeout`` plus ``RUNTIME_GRACE``, at most the service's ``high``; ``otherwise``
    without an ``execution_timeout``. Never the deadline itself: the service would end the job
    first, failing the task with its own reason instead of ``AirflowTaskTimeout``."""
    if not isinstance(execution_timeout, timedelta):
        return otherwise
    return min(high, max(1, math.ceil((execution_timeout + RUNTIME_GRACE).total_seconds())))


def conn_id(
    owner: str, name: str, value: Any, example: str, *, optional: bool = False
) -> str | None:
    """A connection id; ``optional``: None is allowed too (AWS: boto3's own credential chain)."""
    if value is None and optional:
        return value
    refuse_template(owner, name, value, example)
    if not isinstance(value, str) or not re.fullmatch(CONN_ID, value):
        raise SettingsError(
            f"{owner}.{name}={value!r} must be an Airflow connection id such as {example!r}."
        )
    return value


def refuse_template(owner: str, name: str, value: Any, example: str) -> None:
    """A Jinja template in an argument that is not a template field would reach the service as
    its own text: said as such, not as a value of the wrong form."""
    if is_templated(value):
        raise SettingsError(
            f"{owner}.{name}={value!r} is a template, but {name} is not rendered: the service "
            f"would get this text. Give the value itself, e.g. {example!r}."
        )


def matching(
    owner: str, name: str, value: Any, pattern: str, what: str, example: str
) -> str | None:
    """An optional string that must match ``pattern``, given as is: the arguments checked here are
    not template fields, so a Jinja template would reach the service as its own text."""
    if value is None:
        return value
    refuse_template(owner, name, value, example)
    if not isinstance(value, str) or not re.fullmatch(pattern, value):
        raise SettingsError(f"{owner}.{name}={value!r} is not {what}; use e.g. {example!r}.")
    return value


def id_list(
    owner: str,
    name: str,
    value: Any,
    pattern: str,
    example: str,
    *,
    limit: int,
    service: str,
) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise SettingsError(f"{owner}.{name}={value!r} must be a list of ids, e.g. [{example!r}].")
    for item in value:
        if not isinstance(item, str) or not re.fullmatch(pattern, item):
            raise SettingsError(
                f"{owner}.{name} has {item!r}, which is not an id like {example!r}."
            )
    if len(value) > limit:
        raise SettingsError(
            f"{owner}.{name} has {len(value)} ids; {service} takes at most {limit}."
        )
    return tuple(value)


def string_map(
    owner: str,
    name: str,
    value: Any,
    *,
    key_pattern: str,
    key_rule: str,
    value_pattern: str | None = None,
    value_rule: str = "",
    limit: int | None = None,
    limit_why: str = "",
    templated: bool = False,
) -> dict[str, str]:
    """A dict of str -> str (tags, labels) whose keys and values follow the service's rules;
    ``limit_why`` says where a ``limit`` comes from. Unless the argument is ``templated``, a
    Jinja template in it is refused: the service would get its text."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SettingsError(f"{owner}.{name}={value!r} must be a dict of str -> str.")
    if limit is not None and len(value) > limit:
        raise SettingsError(
            f"{owner}.{name} has {len(value)} entries; at most {limit} are allowed{limit_why}."
        )
    out: dict[str, str] = {}
    for key, item in value.items():
        if not templated and (is_templated(key) or is_templated(item)):
            raise SettingsError(
                f"{owner}.{name}[{key!r}]={item!r} is a template, but {name} is not rendered: "
                "the service would get this text. Give the value itself."
            )
        if not isinstance(key, str) or not re.fullmatch(key_pattern, key):
            raise SettingsError(f"{owner}.{name} has the key {key!r}; {key_rule}")
        if not isinstance(item, str) or (value_pattern and not re.fullmatch(value_pattern, item)):
            raise SettingsError(f"{owner}.{name}[{key!r}]={item!r} is refused; {value_rule}")
        out[key] = item
    return out


def environment(owner: str, value: Any) -> dict[str, str]:
    """The job's environment variables: names a shell takes, string values, none of ours. A
    number or a bool is taken as its text, as in ``DockerSettings.environment`` and as a
    template that renders to one."""
    if isinstance(value, Mapping):
        value = {k: str(v) if isinstance(v, (int, float)) else v for k, v in value.items()}
    env = string_map(
        owner, "environment", value, key_pattern=ENV_NAME,
        key_rule="names are letters, digits and _ and do not start with a digit, e.g. 'DATA_DIR'.",
        value_rule="values are strings, e.g. '1' or '{{ ds }}'.", templated=True,
    )  # fmt: skip
    refuse_reserved_env(f"{owner}.environment", env)
    return env


def _image_reference(owner: str, value: Any, example: str) -> str | None:
    if value is not None and not is_templated(value):
        check_image_reference(f"{owner}.image_uri", value, example)
    return value


def image(owner: str, image_uri: Any, docker: Any, image_repository: Any, example: str) -> None:
    """A step needs an image: ``image_uri`` (prebuilt) or ``docker=`` (built, pushed to
    ``image_repository`` when given: a repository, no tag)."""
    _image_reference(owner, image_uri, example)
    if image_uri is not None and docker is not None:
        raise SettingsError(
            f"{owner} has both image_uri={image_uri!r} and docker=: give one. image_uri= runs "
            "that image as it is; docker=DockerSettings(...) builds one (its requirements and "
            "environment would be ignored next to image_uri=)."
        )
    if image_uri is None and docker is None:
        raise SettingsError(
            f"{owner} needs an image: set image_uri= (a prebuilt image with python3) or "
            "docker=DockerSettings(parent_image=..., requirements=[...])."
        )
    if image_repository is not None:
        from airflow_stepop.images.registry import check_repository

        repository_example = example.rsplit(":", 1)[0]  # the image example, untagged
        refuse_template(owner, "image_repository", image_repository, repository_example)
        try:
            check_repository(image_repository, f"{owner}.image_repository", repository_example)
        except ValueError as exc:
            raise SettingsError(str(exc)) from exc


def artifact_root(owner: str, value: str | None, schemes: Sequence[str], example: str) -> None:
    """The operator's artifact_root, when given, must be a URL the service's jobs can read."""
    if value is None:
        return
    bucket = value.split("://", 1)[1].split("/", 1)[0] if "://" in value else ""
    if not value.startswith(tuple(f"{s}://" for s in schemes)) or not bucket:
        shown = " or ".join(f"{s}://" for s in schemes)
        raise SettingsError(
            f"{owner}.artifact_root={value!r} must be a {shown} URL with a bucket, such as "
            f"{example!r} (the service's jobs read inputs and write results there)."
        )
    scheme = value.split("://", 1)[0]
    if scheme in BUCKET_NAME and not re.fullmatch(BUCKET_NAME[scheme][0], bucket):
        raise SettingsError(
            f"{owner}.artifact_root={value!r}: {bucket!r} is not a bucket name; "
            f"{BUCKET_NAME[scheme][1]} E.g. {example!r}."
        )


MAX_FALLBACKS = 19  # machine types after the step's own: 20 attempts at most


def fallback_machines(
    owner: str,
    catalog: Callable[[], Any],
    *,
    chosen: str | None,
    named: bool,
    resources: Any,
    fallback_types: tuple[str, ...],
    pattern: str,
    what: str,
    example: str,
    resources_as: str = "resources",
) -> tuple[str, ...]:
    """The machine types a step fails over to after ``chosen`` when the service has no capacity:
    ``fallback_types`` as given (each of the service's form, fitting ``resources``), else, for a
    type chosen from ``resources`` (not ``named``), every other catalog type that fits, the
    cheapest first; a named type without ``fallback_types`` fails over to nothing. ``catalog``
    is called only then: a step that names its type and no fallbacks reads no catalog."""
    if not fallback_types and (named or resources is None):
        return ()
    machines = catalog()
    if fallback_types:
        for index, name in enumerate(fallback_types):
            matching(owner, f"fallback_types[{index}]", name, pattern, what, example)
            machines.check_explicit(name, resources, owner=owner, explicit="fallback_types",
                                   written=f"fallback_types[{index}]={name!r}",
                                   wanted=resources_as)  # fmt: skip
        repeated = sorted({n for n in fallback_types if fallback_types.count(n) > 1 or n == chosen})
        if repeated:
            raise SettingsError(
                f"{owner}.fallback_types={list(fallback_types)!r} names {repeated[0]!r} twice "
                "(or the step's own type): each type is tried once; drop the repeat."
            )
        if len(fallback_types) > MAX_FALLBACKS:
            raise SettingsError(
                f"{owner}.fallback_types has {len(fallback_types)} types; at most "
                f"{MAX_FALLBACKS} are tried after the step's own. Keep the ones you prefer."
            )
        return fallback_types
    return tuple(m.name for m in machines.fitting(resources) if m.name != chosen)[:MAX_FALLBACKS]
