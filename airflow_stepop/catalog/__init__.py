"""The generic machine catalog: its file format and the resolver.

Each service's data (machine types, hardware, dated prices) is that service's knowledge, so it
lives in the service's package as ``catalog.csv`` (``backends/sagemaker/catalog.csv``);
``load("airflow_stepop.backends.sagemaker")`` reads it. :meth:`Catalog.resolve` maps a
``ResourceSettings`` to the cheapest type that fits and refuses, naming the closest types, when
none does. A new service adds its own ``catalog.csv`` in the same columns and reuses the rest.
"""

from __future__ import annotations

from airflow_stepop.catalog.resolver import Catalog, MachineType, NoFittingMachineError, load

__all__ = ["Catalog", "MachineType", "NoFittingMachineError", "load"]
