"""Deterministic job names from a task instance, valid for a service's naming rules."""

from __future__ import annotations

import hashlib
import re
from typing import Any


def task_key(dag_id: str, run_id: str, task_id: str, map_index: int, instance: str = "") -> str:
    """Identifies one task instance across all its tries; ``instance`` tells it from one of a
    deleted run of the same run_id (``operators.task_identity``)."""
    key = f"{dag_id}/{run_id}/{task_id}/{map_index}"
    return f"{key}/{instance}" if instance else key


TRY_DIGITS = 4  # room kept for the try number, so a task's names share one prefix up to try 9999


def job_name(key: str, try_number: int, *, max_length: int = 63, salt: str = "") -> str:
    """A readable, unique name: a slug of the task, a hash of the full key, and the try.

    The result matches ``^[a-zA-Z0-9](-*[a-zA-Z0-9])*$`` (SageMaker's rule; also valid for
    containers, Vertex labels after lowercasing, and Azure ML) and is at most ``max_length``.
    Every try of one task instance starts with the same ``key_prefix``. ``salt`` (a few
    alphanumerics) makes another name for the same try, when its own is taken by a job that
    is not its own (``base.JobNameTakenError``).
    """
    if not salt:
        return f"{key_prefix(key, max_length=max_length)}-t{try_number}"
    return f"{key_prefix(key, max_length=max_length - len(salt) - 1)}-t{try_number}-{salt}"


def key_prefix(key: str, *, max_length: int = 63) -> str:
    """The part of every job name of a task instance that does not depend on the try."""
    dag_id, _, rest = key.partition("/")
    task_id = rest.split("/")[1] if rest.count("/") >= 2 else rest
    digest = task_digest(key)
    budget = max(1, max_length - len(f"-{digest}-t") - TRY_DIGITS)
    return f"{_slug(_clean(dag_id), _clean(task_id), budget) or 'step'}-{digest}"


def _clean(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def _slug(dag: str, task: str, budget: int) -> str:
    """``dag-task`` within ``budget``: a long dag id keeps a third of it and leaves the task id
    the rest, since the task is what tells the jobs of one DAG apart in a service's job list."""
    if not dag or not task or len(dag) + 1 + len(task) <= budget:
        return "-".join(part for part in (dag, task) if part)[:budget].rstrip("-")
    task_room = min(len(task), budget - 1 - min(len(dag), budget // 3))
    dag_part = dag[: budget - 1 - task_room].rstrip("-")
    task_part = task[:task_room].rstrip("-")
    return "-".join(part for part in (dag_part, task_part) if part)


def task_digest(key: str) -> str:
    """A short hash of the task instance's key: in every job name, tag or label of its tries,
    what a retry finds its earlier job by (the readable slug may be cut)."""
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def shown_job(handle: dict[str, Any]) -> str:
    """The job as the task log names it: its display name where the service's id is not the
    name users see in its console (a Vertex AI CustomJob's id is a number), else its id."""
    return handle.get("display_name") or handle["job_id"]
