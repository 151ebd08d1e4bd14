"""The arguments every step operator takes: checked when the DAG file is parsed, and what
only rendering shows, when the task runs.

A wrong value fails the DAG's import with a ``SettingsError`` that names the operator as the
user wrote it, the argument, the value and a valid example; a misspelt argument is named with
the closest one the operator takes (``unknown_arguments``). After rendering, the task's
connection, the rendered environment and arguments are checked again (no empty render, no
secret shipped with the job) before anything is uploaded (``packaging/secret_checks.py``). A
service's own arguments are its backend's to check.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.packaging.secret_checks import refuse_secrets
from airflow_stepop.setting_values import SettingsError


def check_step_arguments(
    name: str,
    *,
    python_callable: Any,
    op_args: Any,
    op_kwargs: Any,
    resources: Any,
    docker: Any,
    poll_interval: Any,
    artifact_root: Any,
    resources_as: str = "resources",
) -> None:
    """Refuse a wrong value of the arguments ``BaseStepOperator`` declares (``resources_as``:
    how the user wrote ``resources``, e.g. ``default_args['step_resources']``)."""
    if not callable(python_callable):
        raise SettingsError(f"{name}.python_callable={python_callable!r} is not callable.")
    if resources is not None and not _is_setting(resources, "ResourceSettings"):
        raise SettingsError(
            f"{name}.{resources_as}={resources!r} must be a ResourceSettings, e.g. "
            "ResourceSettings(gpu_count=1, memory='16GiB')."
        )
    if docker is not None and not _is_setting(docker, "DockerSettings"):
        raise SettingsError(
            f"{name}.docker={docker!r} must be a DockerSettings, e.g. "
            "DockerSettings(parent_image='python:3.11-slim', requirements=['numpy'])."
        )
    if check.is_templated(poll_interval):
        raise SettingsError(
            f"{name}.poll_interval={poll_interval!r} is a template, but poll_interval is not "
            "rendered: it is fixed when the DAG is parsed. Give the seconds themselves, e.g. 30."
        )
    if poll_interval is not None:
        low, high = check.POLL_INTERVAL_S
        check.finite_seconds(name, "poll_interval", poll_interval, low=low, high=high, example="30")
    if artifact_root is not None and (not isinstance(artifact_root, str) or not artifact_root):
        raise SettingsError(
            f"{name}.artifact_root={artifact_root!r} must be a URL such as "
            "'file:///data/stepop', 's3://bucket/prefix' or 'gs://bucket/prefix'."
        )
    if check.is_templated(artifact_root):
        raise SettingsError(
            f"{name}.artifact_root={artifact_root!r} is a template, but artifact_root is not "
            "rendered: it names where every try's files go, so it is fixed when the DAG is "
            "parsed. Give the URL itself; each run gets its own directory under it."
        )
    if not rendered_later(op_args, op_kwargs):
        check_call_arguments(name, python_callable, op_args, op_kwargs)
        return
    # a template or an upstream output: the other one (if concrete) now, both once rendered
    args = op_args if isinstance(op_args, (list, tuple)) else ()
    kwargs = op_kwargs if isinstance(op_kwargs, Mapping) else {}
    _refuse_unbindable(name, python_callable, args, kwargs, given=(op_args, op_kwargs))


def rendered_later(op_args: Any, op_kwargs: Any) -> bool:
    """Whether either is a template string or an upstream task's output (``op_kwargs=task_a()``),
    which ``PythonOperator`` also takes: their value exists when the task runs."""
    from airflow.sdk import XComArg

    return any(check.is_templated(v) or isinstance(v, XComArg) for v in (op_args, op_kwargs))


def check_call_arguments(name: str, function: Any, op_args: Any, op_kwargs: Any) -> None:
    """``op_args`` a list and ``op_kwargs`` a dict that the callable can take: at parse, or,
    for a template or an upstream output, once rendered."""
    if op_args is not None and not isinstance(op_args, (list, tuple)):
        raise SettingsError(
            f"{name}.op_args={op_args!r} must be a list of the callable's positional "
            f"arguments, e.g. op_args=[5] (op_kwargs= takes them by name).{_as_text(op_args)}"
        )
    if op_kwargs is not None and not isinstance(op_kwargs, Mapping):
        raise SettingsError(
            f"{name}.op_kwargs={op_kwargs!r} must be a dict of the callable's arguments by "
            f"name, e.g. op_kwargs={{'n': 5}}.{_as_text(op_kwargs)}"
        )
    _refuse_unbindable(name, function, op_args or (), op_kwargs or {})


def _as_text(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return (
        " A template renders to text unless the DAG sets render_template_as_native_obj=True; "
        "or template each argument instead (op_kwargs={'day': '{{ ds }}'})."
    )


def _refuse_unbindable(
    name: str,
    function: Any,
    args: Any,
    kwargs: Mapping[str, Any],
    given: tuple[Any, Any] | None = None,
) -> None:
    """Arguments the callable cannot take would fail only in the job, after its submit (and on
    a cloud, its machine's start): refused now, as ``@task`` does for a call. ``given``: the
    ``op_args`` and ``op_kwargs`` as written when one of them is rendered later, so only a
    surplus of the other can be told now (the missing ones may come with the render)."""
    import inspect

    from airflow.sdk.definitions.context import KNOWN_CONTEXT_KEYS

    from airflow_stepop.operators.context import open_parameters

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without one: the job will say
        return
    # a parameter named like a context value is filled when the task runs (operators/context.py)
    # or refused there, named: as with Airflow's @task, it needs no argument now
    filled_later = dict.fromkeys(
        open_parameters(function, args, kwargs).keys() & KNOWN_CONTEXT_KEYS
    )
    bind = signature.bind if given is None else signature.bind_partial
    try:
        bind(*args, **filled_later, **kwargs)
    except TypeError as err:
        reason = str(err)
        try:  # a surplus (an unknown name) says more than what is missing because of it
            signature.bind_partial(*args, **kwargs)
        except TypeError as surplus:
            reason = str(surplus)
        shown = getattr(function, "__name__", repr(function))
        op_args, op_kwargs = given or (list(args), dict(kwargs))
        raise SettingsError(
            f"{name}: {shown}{signature} cannot be called with op_args={op_args!r}, "
            f"op_kwargs={op_kwargs!r} ({reason}). Pass what its parameters name."
        ) from None


def _is_setting(value: Any, class_name: str) -> bool:
    """Whether ``value`` is an instance of ``settings.<class_name>``. The settings module is
    imported only when there is a value: a DAG that never builds a ResourceSettings or a
    DockerSettings does not pay for their generated dataclass methods at each parse."""
    if value is None:
        return False
    from airflow_stepop import settings

    return isinstance(value, getattr(settings, class_name))


def rename_step_resources(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``resources=ResourceSettings(...)`` as ``step_resources`` (Airflow's mapping keeps
    ``resources`` for its own ``Resources``); any other ``resources`` is left to Airflow."""
    if _is_setting(kwargs.get("resources"), "ResourceSettings"):
        kwargs = dict(kwargs)
        kwargs["step_resources"] = kwargs.pop("resources")
    return kwargs


def resources_written_as(resources: Any, step_resources: Any, kwargs: Mapping[str, Any]) -> str:
    """How errors name a step's ``ResourceSettings``: as the user wrote them, ``resources=``
    (a mapped step's too, which travels as ``step_resources``) or shared in ``default_args``."""
    shared = (kwargs.get("default_args") or {}).get("step_resources")
    if resources is None and step_resources is not None and step_resources is shared:
        return "default_args['step_resources']"
    return "resources"


def check_default_args(default_args: Any) -> None:
    """``default_args={"resources": ResourceSettings(...)}`` reaches every task of the DAG, and
    Airflow turns a plain task's ``resources`` into its own ``Resources``: it would fail there
    with a bare ``TypeError``. Steps share theirs as ``step_resources``, which Airflow drops
    without a word when misspelt."""
    if not isinstance(default_args, Mapping):
        return
    for key in default_args:
        # other operators take step_ arguments too (EmrStepSensor's step_id): only a near miss
        if isinstance(key, str) and key.startswith("step_r") and key != "step_resources":
            raise SettingsError(
                f"default_args[{key!r}] is not a step argument, and Airflow would drop it "
                "unread; steps take default_args['step_resources'] (a ResourceSettings), and "
                "any step argument by its own name, e.g. default_args={'docker': ...}."
            )
    if _is_setting(shared := default_args.get("resources"), "ResourceSettings"):
        raise SettingsError(
            f"default_args={{'resources': {shared.shown()}}}: Airflow gives default_args' "
            "resources to every task of the DAG, as its own Resources, which a "
            "ResourceSettings is not. For every step of the DAG, write "
            f"default_args={{'step_resources': {shared.shown()}}} (a step's own resources= "
            "wins over it)."
        )


def check_connection(owner: str, name: str, conn_id: Any, ambient_default: str | None) -> None:
    """A connection id Airflow does not have fails when the task runs, naming the argument,
    before anything is uploaded: a cloud SDK's own error names neither, and the amazon provider
    would run the job on the worker's ambient credentials instead (``ambient_default``: the id
    whose absence means exactly that, as in the provider)."""
    if not conn_id or conn_id == ambient_default:
        return
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise SettingsError(
            f"{owner}.{name}={conn_id!r}: Airflow has no connection with that id. Create it "
            f"(Admin > Connections, `airflow connections add {conn_id} ...`, or the environment "
            f"variable AIRFLOW_CONN_{conn_id.upper()}), or pass {name}= the id of one that "
            "exists."
        ) from None


def refuse_empty_renders(owner: str, rendered: Mapping[str, Any]) -> None:
    """A service's templated argument (``image_uri``, ``role``) that rendered to '': the parse
    refuses '', so its template read an empty Variable, param or XCom. Said when the task runs,
    rather than as the argument missing, or a default used in its place."""
    for name, value in rendered.items():
        if value == "":
            raise SettingsError(
                f"{owner}.{name} is '' after its template was rendered: the Variable, param or "
                f"XCom it reads is empty. Give that a value, or leave {name}= out."
            )


def rendered_environment(name: str, environment: Mapping[str, Any]) -> dict[str, str]:
    """After rendering: the environment as text. With ``render_template_as_native_obj=True`` a
    template such as ``"{{ params.n }}"`` renders to an int: a number or a bool becomes its
    text, as the shell would see it, and a list or dict its JSON (native rendering turns even
    ``"{{ params.xs | tojson }}"`` back into a list); anything else is refused, named."""
    import contextlib
    import json

    text: dict[str, str] = {}
    for key, value in (environment or {}).items():
        if not isinstance(value, str):  # checked as it is: JSON's escapes would hide a secret
            refuse_secrets(name, {key: value})  # from the masker, and the error shows the value
        if isinstance(value, (int, float)):  # bool too
            value = str(value)
        elif isinstance(value, (list, tuple, dict)):
            with contextlib.suppress(TypeError, ValueError):  # not JSON (a date in it): refused
                value = json.dumps(value)
        if not isinstance(value, str):
            raise SettingsError(
                f"{name}.environment[{key!r}] rendered to a {type(value).__name__} "
                f"({str(value)[:60]!r}); an environment variable is text. Render it to a "
                "string, or pass the value as an argument of the step instead."
            )
        text[key] = value
    return text


def check_cache_arguments(
    owner: str, cache: Any, cache_version: Any, cache_expires_after: Any
) -> float | None:
    """The step cache's arguments, checked at parse; the expiry in seconds."""
    if cache is not None and not isinstance(cache, bool):
        raise SettingsError(
            f"{owner}.cache={cache!r} must be True or False (or left out: [stepop] cache "
            "decides, off by default)."
        )
    if cache_version is not None and (
        not isinstance(cache_version, str) or not cache_version.strip()
    ):
        raise SettingsError(
            f"{owner}.cache_version={cache_version!r} must be a non-empty string, e.g. "
            "cache_version='2' (change it to run the step again); leave it out for none."
        )
    if cache_expires_after is None:
        return None
    seconds = cache_expires_after
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not (0 < seconds < float("inf"))
    ):
        raise SettingsError(
            f"{owner}.cache_expires_after={cache_expires_after!r} must be a positive "
            "timedelta or number of seconds, e.g. cache_expires_after=timedelta(days=7); "
            "leave it out for entries that never expire."
        )
    return float(seconds)


def check_capacity_arguments(owner: str, fallback_types: Any, capacity_attempts: Any) -> tuple:
    """The failover arguments every operator takes, checked for their shape at parse (each
    service checks the types' names and that they fit ``resources``)."""
    if capacity_attempts is not None and (
        type(capacity_attempts) is not int or not 1 <= capacity_attempts <= MAX_ATTEMPTS
    ):
        raise SettingsError(
            f"{owner}.capacity_attempts={capacity_attempts!r} must be a whole number from 1 to "
            f"{MAX_ATTEMPTS} (1: no failover), e.g. capacity_attempts=3; leave it out for "
            "[stepop] capacity_attempts."
        )
    if fallback_types is None:
        return ()
    if (
        isinstance(fallback_types, str)
        or not isinstance(fallback_types, (list, tuple))
        or not all(isinstance(name, str) and name.strip() for name in fallback_types)
    ):
        raise SettingsError(
            f"{owner}.fallback_types={fallback_types!r} must be a list of machine type names, "
            "in the order to try them after the step's own, e.g. fallback_types=['ml.g5.2xlarge']."
        )
    return tuple(fallback_types)


MAX_ATTEMPTS = 20
