"""Nothing Airflow masks as a secret leaves the worker with a step.

Whatever Airflow's secrets masker hides in a task's log (a connection's password, a sensitive
Variable, anything given to ``mask_secret``) is refused wherever a step would carry it out of
the worker: its arguments and environment (written to object storage, shown in the service's
console), its ``DockerSettings`` (baked into an image's layers, which everyone who may pull the
image reads) and the callable pickled by value with what it captures (a closure's variables,
globals of its module, a ``functools.partial``'s arguments: the code bundle is kept in object
storage for ever under its content address).

A secret is what the masker knows, as it knows it: any text it would mask, however short. The
masker keeps no secret shorter than ``[logging] min_length_masked_secret`` (5 by default), so
neither does this check. Each refusal names where the value is (``op_kwargs['db'].password``)
and the fix, and never shows the value: its message goes through the masker too.

This module sits with the packaging, which checks its pickle here; the operators check the
rest before anything is uploaded or built (``operators/job_request.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import functools
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from airflow_stepop.setting_values import SettingsError

# What a value's walk never enters: code and namespaces (a step that captures a module or a
# class pickles it by reference, or checks it as bytes), and values that hold no text.
_OPAQUE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.CodeType)
_SCALARS = frozenset({int, float, complex, bool, type(None)})

HOW_TO_READ = (
    "Read the secret inside the step instead, from the service's secret store with the job's "
    "own identity (AWS Secrets Manager, Google Secret Manager, Azure Key Vault), and give the "
    "step only its name (a connection id, a Variable's key)."
)


def hides(text: str | bytes) -> bool:
    """Whether Airflow's secrets masker would mask any part of ``text`` (bytes are read as
    UTF-8, undecodable bytes kept apart, so a secret's bytes anywhere in them are found)."""
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", "surrogateescape")
    return _redact()(text) != text


@functools.cache
def _redact() -> Callable[[str], Any]:
    """Airflow's masker (imported once: a walk may check many strings)."""
    from airflow.sdk.log import redact

    return redact


def where_secret(value: Any, label: str) -> str | None:
    """Where the first secret in ``value`` is (``label`` and the path into it), or None.

    Every string and bytes value in it is checked, at any depth: in mappings (keys too), lists,
    tuples, sets and frozensets, named tuples and dataclasses (by field), ``functools.partial``
    objects, enums, and any other object's ``__dict__`` and ``__slots__``. Each container is
    entered once (a cycle ends there)."""
    pending: list[tuple[Any, str]] = [(value, label)]
    entered: set[int] = set()
    while pending:
        item, where = pending.pop()
        kind = type(item)
        if kind in _SCALARS:
            continue
        if isinstance(item, (str, bytes, bytearray, memoryview)):
            if hides(item if not isinstance(item, memoryview) else item.tobytes()):
                return where
            continue
        if isinstance(item, _OPAQUE) or id(item) in entered:
            continue
        entered.add(id(item))
        parts = list(_parts(item, where))
        pending.extend(reversed(parts))  # depth first, in order: the first one is named
    return None


def _parts(item: Any, where: str) -> Iterator[tuple[Any, str]]:
    """What ``item`` holds, each with its place in the label."""
    if isinstance(item, Mapping):
        for index, (key, value) in enumerate(item.items()):
            yield key, f"{where} (key {index})"
            yield value, f"{where}[{key!r}]"
    elif isinstance(item, tuple) and hasattr(type(item), "_fields"):  # a named tuple
        yield from ((v, f"{where}.{name}") for name, v in zip(item._fields, item, strict=False))
    elif isinstance(item, (list, tuple, collections.deque)):
        yield from ((v, f"{where}[{i}]") for i, v in enumerate(item) if type(v) not in _SCALARS)
    elif isinstance(item, AbstractSet):
        yield from ((v, f"{where} (an item of the set)") for v in item)
    elif isinstance(item, functools.partial):
        yield from ((v, f"{where}.args[{i}]") for i, v in enumerate(item.args))
        yield from ((v, f"{where}.keywords[{k!r}]") for k, v in item.keywords.items())
        yield item.func, f"{where}.func"
    elif isinstance(item, enum.Enum):
        yield item.value, f"{where}.value"
    elif dataclasses.is_dataclass(item):
        for field in dataclasses.fields(item):
            yield getattr(item, field.name, None), f"{where}.{field.name}"
    elif _kind_of(item) in ("numpy.ndarray", "pandas.Series"):
        yield from _text_items(item, where)
    elif _kind_of(item) == "pandas.DataFrame":
        yield list(item.columns), f"{where}.columns"
        for name, column in item.items():
            yield from _text_items(column, f"{where}[{name!r}]")
    else:
        yield from _attributes(item, where)


def _kind_of(item: Any) -> str:
    """``numpy.ndarray``, ``pandas.Series``, ``pandas.DataFrame`` or another type's name, told
    without importing either library (a step without them never loads them here)."""
    cls = type(item)
    return f"{cls.__module__.split('.', 1)[0]}.{cls.__name__}"


def _text_items(values: Any, where: str) -> Iterator[tuple[Any, str]]:
    """The text in an array or a column: an array keeps it in its buffer, not in attributes
    (numbers hold no secret, so only text and object dtypes are walked)."""
    dtype = values.dtype
    if getattr(dtype, "kind", "") in ("U", "S", "O") or str(dtype) == "string":
        flat = values.ravel() if hasattr(values, "ravel") else values
        yield from ((v, f"{where}[{i}]") for i, v in enumerate(flat.tolist()))


def _attributes(item: Any, where: str) -> Iterator[tuple[Any, str]]:
    """An object's state: its ``__dict__`` and the slots its classes declare."""
    try:
        state = object.__getattribute__(item, "__dict__")
    except (AttributeError, TypeError):
        state = None
    if isinstance(state, dict):
        yield from ((v, f"{where}.{name}") for name, v in state.items())
    for cls in type(item).__mro__:
        slots = vars(cls).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            try:
                yield object.__getattribute__(item, name), f"{where}.{name}"
            except AttributeError:  # a slot never set
                continue


def refuse_secrets(owner: str, environment: Mapping[str, Any]) -> None:
    """A job's environment is stored in its definition, which the service's console and API
    show to anyone who may list jobs."""
    for key, value in (environment or {}).items():
        if where_secret(value, f"environment[{key!r}]") is not None:
            _refuse(
                f"{owner}.environment[{key!r}] holds a value Airflow masks as a secret (from a "
                "connection or a sensitive Variable). A job's environment is stored in its "
                f"definition, which the service's console and API show. {HOW_TO_READ}"
            )


def refuse_secret_arguments(owner: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """A step's arguments are written to object storage with its run (the spec, or an input
    artifact), which outlives the run and which everyone who may read the bucket reads."""
    where = where_secret(list(args), "op_args") or where_secret(dict(kwargs), "op_kwargs")
    if where is not None:
        _refuse(
            f"{owner}.{where} holds a value Airflow masks as a secret (from a connection or a "
            "sensitive Variable). A step's arguments are written to object storage with its "
            f"run, where anyone who can read the bucket reads them. {HOW_TO_READ}"
        )


def refuse_secret_settings(owner: str, docker: Any) -> None:
    """``DockerSettings`` shape an image that is pushed to a registry: its environment and
    build args (and any other field) are in its layers and history for whoever pulls it."""
    if docker is None:
        return
    for field in dataclasses.fields(docker):
        where = where_secret(getattr(docker, field.name), f"docker.{field.name}")
        if where is not None:
            _refuse(
                f"{owner}.{where} holds a value Airflow masks as a secret (from a connection or "
                "a sensitive Variable). DockerSettings are baked into the step's image, which "
                "its registry keeps and everyone who may pull it reads (`docker history`, "
                f"`docker inspect`). Build the image without it. {HOW_TO_READ}"
            )


def refuse_pickled_secret(
    function: Callable[..., Any], pickled: bytes, by_value: Sequence[str] = ()
) -> None:
    """A callable pickled by value carries what it captures into the code bundle. ``pickled``:
    its bytes, checked whole (whatever type holds the secret); ``by_value``: the modules
    pickled with it, whose functions' captures are searched to name the secret's place."""
    if not hides(pickled):
        return
    modules = {getattr(function, "__module__", None), *by_value}
    where = next(
        (w for label, value in _captured(function, modules) if (w := where_secret(value, label))),
        "what it captures (a closure's variables, its module's globals, default arguments)",
    )
    shown = getattr(function, "__qualname__", repr(function)).rpartition("<locals>.")[2]
    _refuse(
        f"The step {shown!r} is pickled by value with what it captures, and {where} holds a "
        "value Airflow masks as a secret (from a connection or a sensitive Variable). The "
        "pickle goes into the step's code bundle, kept in object storage under its content "
        "address. Capture the connection id or the Variable's key, not the value (no "
        f"module-level BaseHook.get_connection(...)). {HOW_TO_READ}"
    )


def _captured(function: Any, modules: set[str | None]) -> Iterator[tuple[str, Any]]:
    """What a callable pickled by value carries, each with the name a user knows it by:
    closure variables, the globals its code (and nested code) reads, default arguments, a
    partial's arguments, a callable object's attributes. Functions of ``modules`` (pickled by
    value with it) are followed into theirs."""
    pending: list[tuple[Any, str]] = [(function, "")]
    seen: set[int] = set()
    while pending:
        target, prefix = pending.pop()
        if id(target) in seen:
            continue
        seen.add(id(target))
        if isinstance(target, types.MethodType):
            yield f"{prefix}the method's object", target.__self__
            target = target.__func__
        if not isinstance(target, types.FunctionType):
            yield prefix.removesuffix(" -> ") or "the callable", target  # a partial, an object
            continue
        for label, value in _function_captures(target):
            if isinstance(value, types.FunctionType) and value.__module__ in modules:
                pending.append((value, f"{prefix}{label} -> "))
            elif _is_wrapped_target(target, value):  # staging's wrapper of a partial/object
                yield "python_callable", value
                if isinstance(value, functools.partial):
                    pending.append((value.func, "python_callable.func -> "))
            else:
                yield f"{prefix}{label}", value


def _function_captures(function: types.FunctionType) -> Iterator[tuple[str, Any]]:
    code = function.__code__
    for name, cell in zip(code.co_freevars, function.__closure__ or (), strict=False):
        try:
            yield f"its closure variable {name!r}", cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
    scope = function.__globals__
    for name in sorted(_global_names(code)):
        if name in scope:
            yield f"its global {name!r}", scope[name]
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    defaults = function.__defaults__ or ()
    positional = names[code.co_argcount - len(defaults) : code.co_argcount]
    for name, value in zip(positional, defaults, strict=False):
        yield f"the default of its parameter {name!r}", value
    for name, value in (function.__kwdefaults__ or {}).items():
        yield f"the default of its parameter {name!r}", value
    if function.__dict__:
        yield "its attributes", function.__dict__


def _global_names(code: types.CodeType) -> set[str]:
    """The names a code object and those nested in it read (attribute names among them:
    only those its globals have are taken)."""
    names = set(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _global_names(constant)
    return names


def _is_wrapped_target(wrapper: types.FunctionType, value: Any) -> bool:
    """Whether ``wrapper`` is staging's ``as_function`` around ``value`` (a partial or a
    callable object): named ``<partial>.<its function>``, it holds only that."""
    return wrapper.__qualname__.startswith(f"<{type(value).__name__}>.")


def _refuse(message: str) -> None:
    """Raise with the message masked: a key or a label may hold the secret itself."""
    from airflow.sdk.log import redact

    raise SettingsError(str(redact(message)))
