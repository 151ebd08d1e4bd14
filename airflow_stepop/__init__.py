"""airflow-stepop: run one Airflow task's callable as a job on a managed ML service."""

from __future__ import annotations


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-stepop",
        "name": "Step operators",
        "description": "Run one task's Python callable as a deferred job on a GPU machine.",
        "versions": ["0.1.0"],
    }
