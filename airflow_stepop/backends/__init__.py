"""Backends: how a step's job is submitted, found, described, relayed and stopped.

This package holds what every backend shares; each service has a package of its own.

* ``base.py``: the ``StepBackend`` contract;
* ``job_types.py``: the values it passes (``JobRequest``, ``JobStatus``, ``JobRecord``...),
  imported from ``base`` too;
* ``arguments.py``: the argument checks every service's rules are written with;
* ``naming.py``: job names per task instance and try, service-valid and idempotent;
* ``ratelimit.py`` and ``list_pages.py``: the shared List rate limit and the stop rule of a
  round's list pages;
* ``sagemaker/``, ``vertex/``, ``azureml/``, ``local/``: one package per service.

docs/write-a-backend.md says how to add one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_backend(package: str, class_name: str) -> Callable[[str], Any]:
    """A service package's module ``__getattr__``: ``<package>.<class_name>`` imports the class
    from ``<package>.backend`` when first asked for. So the path a trigger deferred before the
    service packages stored (``airflow_stepop.backends.sagemaker.SageMakerBackend``) still
    imports, and a DAG's parse, which imports a package for its argument rules, loads no
    backend."""

    def __getattr__(name: str) -> Any:
        if name == class_name:
            return getattr(importlib.import_module(f"{package}.backend"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
