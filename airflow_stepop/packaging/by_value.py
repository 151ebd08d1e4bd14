"""Pickles a callable by value, keeping what a remote traceback needs: file names and lines.

A function defined in a DAG file (or a closure, a lambda) travels to the job as a cloudpickle
of its code and what it captures (a pickle holding a value Airflow masks as a secret is
refused: ``secret_checks.py``). A traceback raised in that code names the code object's
``co_filename`` and shows the line read from that file. Two things stand in the way on a
real cloud:

- cloudpickle 3.1.3 and later pickle every code object with the file name ``<dynamic-code>``
  (for payloads that do not depend on where a function was defined). Our pickler restores the
  worker's file name on load, whatever cloudpickle's version.
- the DAG file is not in the job's container, so no line could be read from it. The lines a
  traceback of the pickled code can show (each of its statements, whole) go in the bundle as
  ``sources.json``, which the runtime gives to ``linecache`` (``source_lines.py``). Nothing else
  of the file travels: not its decorators' arguments, nor a comment outside a statement.
"""

from __future__ import annotations

import functools
import hashlib
import io
import itertools
import json
import linecache
import opcode
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from airflow_stepop.packaging.secret_checks import refuse_pickled_secret

_RESUME = opcode.opmap["RESUME"]  # ends the prologue of every code object (Python >= 3.11)
# what cloudpickle >= 3.1.3 names every file; also what we pickle a code object under, so the
# file name is set once, by ``code.replace`` on load, whichever cloudpickle pickled it
DYNAMIC_FILE = "<dynamic-code>"


class PackagingError(ValueError):
    """A callable that cannot be shipped to a job."""


class ByValue(NamedTuple):
    """A callable's pickle and the source lines of the code it carries, by file and line."""

    pickle: bytes
    sources: dict[str, dict[str, str]]

    def sources_json(self) -> bytes:
        return json.dumps(self.sources, sort_keys=True).encode()

    def sha256(self) -> str:
        """Changes when the code or any line shown in its tracebacks does."""
        return hashlib.sha256(self.pickle + self.sources_json()).hexdigest()


def pickle_by_value(function: Callable[..., Any], modules: Sequence[str] = ()) -> ByValue:
    """The callable pickled with its module's code (a DAG file's function, a closure), and that
    of ``modules`` (local modules that import Airflow, which a job may not be able to import)."""
    import cloudpickle

    names = [function.__module__, *modules] if function.__module__ != "__main__" else [*modules]
    registered = [m for name in dict.fromkeys(names) if (m := sys.modules.get(name)) is not None]
    for module in registered:
        cloudpickle.register_pickle_by_value(module)
    try:
        buffer = io.BytesIO()
        pickler = _pickler_class()(buffer)
        pickler.dump(function)
        pickled = ByValue(buffer.getvalue(), pickler.source_lines())
    except Exception as exc:
        culprit = _unpicklable_name(function, cloudpickle.dumps)
        raise PackagingError(
            f"The callable {function.__qualname__!r} cannot be pickled by value "
            f"({type(exc).__name__}: {exc}).{culprit} Create such an object inside the step "
            "(or pass what it holds as an argument), or define the step at module level in a "
            "module of the DAGs folder that does not import Airflow, so the job imports it by "
            "name."
        ) from exc
    finally:
        for module in registered:
            cloudpickle.unregister_pickle_by_value(module)
    # checked at each pickling: a cached bundle's callable is pickled again at each lookup, and
    # a task's masker may know a secret that the one which built the bundle did not
    refuse_pickled_secret(function, pickled.pickle, names)
    return pickled


@functools.cache
def _pickler_class() -> type:
    """cloudpickle's pickler, with code objects that keep their file name and note their lines
    (a class made on first use: cloudpickle is imported only when a step must be pickled)."""
    import cloudpickle

    class FileKeepingPickler(cloudpickle.Pickler):
        def __init__(self, file: io.BytesIO) -> None:
            super().__init__(file)
            self.code_lines: dict[str, set[int]] = {}

        def reducer_override(self, obj: Any) -> Any:
            if type(obj) is types.CodeType and obj.co_filename != DYNAMIC_FILE:
                self.code_lines.setdefault(obj.co_filename, set()).update(_shown_lines(obj))
                # loads as code.replace(co_filename=...): standard library only, so the pickle
                # needs nothing of ours in the job; nested code objects come here in turn
                renamed = obj.replace(co_filename=DYNAMIC_FILE)
                return functools.partial(renamed.replace, co_filename=obj.co_filename), ()
            return super().reducer_override(obj)

        def source_lines(self) -> dict[str, dict[str, str]]:
            sources = {}
            for filename, numbers in self.code_lines.items():
                text = linecache.getlines(filename)
                lines = {str(n): text[n - 1] for n in sorted(numbers) if 0 < n <= len(text)}
                if lines:
                    sources[filename] = lines
            return sources

    return FileKeepingPickler


def _shown_lines(code: types.CodeType) -> set[int]:
    """The lines a traceback of ``code`` can show: every line each of its instructions spans
    (Python 3.13 prints a statement's lines from first to last). The prologue before ``RESUME``
    sits on the first line of the definition, a decorator's for a decorated function: its
    arguments ran where the DAG was parsed, and may hold what the job must not see."""
    raw = code.co_code  # 2 bytes a code unit; the prologue's instructions have no inline cache
    body = next((i // 2 + 1 for i in range(0, len(raw), 2) if raw[i] == _RESUME), 0)
    positions = set(itertools.islice(code.co_positions(), body, None))  # (line, end line, ...)
    return {n for first, last, *_ in positions if first for n in range(first, (last or first) + 1)}


def _unpicklable_name(function: Callable[..., Any], dumps: Callable[[Any], bytes]) -> str:
    """Which variable the function uses (a closure's, or a global) could not be pickled."""
    import inspect

    try:
        used = inspect.getclosurevars(function)
    except (TypeError, ValueError):  # not a plain function
        return ""
    for kind, names in (("closure variable", used.nonlocals), ("global", used.globals)):
        for name, value in names.items():
            try:
                dumps(value)
            except Exception:
                return f" It uses the {kind} {name!r}, a {type(value).__qualname__}."
    return ""
