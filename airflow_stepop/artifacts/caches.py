"""Where the worker's caches are, and the cache a local step's job gets: private and bounded.

``STEPOP_CACHE_DIR`` moves the worker's artifact cache (default ``~/.cache/airflow-stepop``,
then ``artifacts/``). A local step's job runs on the worker's machine as the worker's user, so
its own cache (the code it extracts and imports, the inputs it fetches) goes in a private
directory of the worker's, never in a shared temporary directory another user could fill.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow_stepop import config
from airflow_stepop.runtime.cache import MAX_BYTES_ENV, DiskCache
from airflow_stepop.runtime.private import CACHE_DIR_ENV, private_dir


def worker_cache_root() -> Path:
    """``$STEPOP_CACHE_DIR``, else ``~/.cache/airflow-stepop``: private to this user."""
    root = os.environ.get(CACHE_DIR_ENV) or os.path.expanduser("~/.cache/airflow-stepop")
    return private_dir(Path(root))


def artifact_cache() -> DiskCache:
    """The cache a plain task's ``ArtifactRef.load()`` reads remote artifacts through."""
    bound = config.get_int("artifact_cache_max_bytes")
    return DiskCache(worker_cache_root() / "artifacts", bound)


def job_cache_environment() -> dict[str, str]:
    """What a local step's job gets in its environment for its caches: ``STEPOP_CACHE_DIR``, a
    private directory under ``$AIRFLOW_HOME/stepop-cache`` (created here), and their bound."""
    root = private_dir(config.worker_cache_dir()) / "jobs"
    return {
        CACHE_DIR_ENV: str(private_dir(root)),
        MAX_BYTES_ENV: str(config.get_int("artifact_cache_max_bytes")),
    }
