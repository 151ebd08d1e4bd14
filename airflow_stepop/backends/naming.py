"""Deterministic job names from a task instance, valid for a service's naming rules."""

from __future__ import annotations

import hashlib
import re


def task_key(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """Identifies one task instance across all its tries."""
    return f"{dag_id}/{run_id}/{task_id}/{map_index}"


def job_name(key: str, try_number: int, *, max_length: int = 63, separator: str = "-") -> str:
    """A readable, unique name: a slug of the task, a hash of the full key, and the try.

    The result matches ``^[a-zA-Z0-9](-*[a-zA-Z0-9])*$`` (SageMaker's rule; also valid for
    containers, Vertex labels after lowercasing, and Azure ML) and is at most ``max_length``.
    """
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    suffix = f"{separator}{digest}{separator}t{try_number}"
    dag_id, _, rest = key.partition("/")
    task_id = rest.split("/")[1] if rest.count("/") >= 2 else rest
    slug = re.sub(r"[^A-Za-z0-9]+", separator, f"{dag_id}{separator}{task_id}").strip(separator)
    slug = slug[: max(1, max_length - len(suffix))].rstrip(separator) or "step"
    return slug + suffix


def key_prefix(key: str) -> str:
    """The part of every job name of a task instance that does not depend on the try."""
    return job_name(key, 0).rsplit("-t", 1)[0]
