"""Step functions the Kubernetes tests run as pods (no Airflow import: a job imports this
module by name from its code bundle)."""

from __future__ import annotations

import os

from step_helpers import wait_for_file


def ranks() -> dict:
    """What a pod of a several-pod step is told about the others."""
    print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}", flush=True)
    names = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK")
    return {name: os.environ[name] for name in names}


def held_saving(release: str) -> str:
    """Runs until ``release`` exists (``<release>.started`` says it runs); says so as a stop
    ends it."""
    try:
        print("holding until released", flush=True)
        open(release + ".started", "w").close()
        wait_for_file(release, 300)
    finally:
        print("saving my work on the way out", flush=True)
    return "released"


def answer() -> int:
    return 42
