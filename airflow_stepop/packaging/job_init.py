"""``airflow_stepop`` as a step's job sees it (the code bundle's ``airflow_stepop/__init__.py``).

The job gets the step runtime and the public names a step's own modules may import (shared
``ResourceSettings``/``DockerSettings`` values, ``ArtifactRef`` in type hints), all standard
library only. The operators stay on the Airflow side: the job's image may not have Airflow.
"""

from __future__ import annotations

import importlib
from typing import Any

SHIPPED = {
    "ArtifactRef": "airflow_stepop.artifacts.ref",
    "DockerSettings": "airflow_stepop.settings",
    "ResourceSettings": "airflow_stepop.settings",
}
AIRFLOW_SIDE = (
    "AzureMLStepOperator",
    "KubernetesStepOperator",
    "LocalStepOperator",
    "SageMakerStepOperator",
    "StepFailedError",
    "VertexStepOperator",
)


def get_provider_info() -> dict[str, Any]:
    """Airflow's provider discovery, when a step imports Airflow (or a library that does) in a
    job whose image has airflow-stepop installed: the distribution's entry point names this
    function, which the code bundle's package shadows. A job runs no operator, so this
    provider declares none there."""
    return {
        "package-name": "airflow-stepop",
        "name": "Step operators",
        "description": "Inside a step's job: the step runtime only.",
    }


def __getattr__(name: str) -> Any:
    if name in SHIPPED:
        return getattr(importlib.import_module(SHIPPED[name]), name)
    if name in AIRFLOW_SIDE:
        raise ImportError(
            f"airflow_stepop.{name} is not available inside a step's job, which ships only the "
            f"step runtime and {', '.join(sorted(SHIPPED))}: a module the step imports imports "
            "it. Import it in the DAG file instead (or under `if TYPE_CHECKING:`)."
        )
    raise AttributeError(f"module 'airflow_stepop' has no attribute {name!r}")
