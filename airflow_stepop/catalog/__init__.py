"""Instance catalogs (data files with their date and prices) and the generic resolver.

``load("sagemaker_training")`` reads ``sagemaker_training.csv``; :meth:`Catalog.resolve` maps a
``ResourceSettings`` to the cheapest type that fits and refuses, naming the closest types, when
none does. Another service's backend adds its own CSV in the same columns and reuses the rest.
"""

from __future__ import annotations

from airflow_stepop.catalog.resolver import Catalog, MachineType, NoFittingMachineError, load

__all__ = ["Catalog", "MachineType", "NoFittingMachineError", "load"]
