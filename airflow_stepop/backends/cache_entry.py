"""The step cache's entry of a job's result, written once the job succeeded and its result
was read: by the task (``operators/step_cache.keep_result``) or by the trigger that ends the
task itself (``triggers/task_end``). Lookups are ``operators/step_cache``'s."""

from __future__ import annotations

import hashlib
import json
import time
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.naming import shown_job

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

    from airflow_stepop.runtime.storage import Storage


def write_entry(
    kept: dict[str, Any],
    dag_id: str,
    made_by: dict[str, Any],
    handle: dict[str, Any],
    storage: Storage,
    manifest: bytes,
    billing: Any,
    log: Logger,
) -> None:
    """Write the cache entry of ``kept`` (what ``remember_key`` kept) for the job's result:
    in the task (``keep_result``) or in the trigger that ends the task (``triggers/task_end``).
    A failure is logged, never raised."""
    from airflow_stepop.artifacts.fingerprint import artifact_fingerprint
    from airflow_stepop.packaging.cache_key import entry_uri
    from airflow_stepop.runtime import values

    try:
        outputs = {}
        for ref in values.references(json.loads(manifest)["outputs"]):
            outputs[ref["uri"]] = artifact_fingerprint(storage, kept["root"], ref)
            if outputs[ref["uri"]] is None:
                raise ValueError(f"the result's artifact {ref['uri']} is gone already")
        entry = {
            "key": kept["key"],
            "job_id": handle["job_id"],
            "spec_sha256": kept["spec_sha256"],
            "result_sha256": hashlib.sha256(manifest).hexdigest(),
            "created_at": time.time(),
            "made_by": made_by,
            "billing": {
                name: billing.get(name) for name in ("billable_seconds", "estimated_cost_usd")
            }
            if isinstance(billing, dict)
            else None,  # fmt: skip
            "outputs": outputs,
        }
        uri = entry_uri(kept["root"], dag_id, kept["key"])
        _refuse_links(storage, kept["root"], uri)
        storage.write_bytes(uri, json.dumps(entry, indent=1).encode())
    except Exception as exc:
        log.warning("Step cache: the result was not cached (%s)", exc)
        return
    log.info("Step cache: result of job %s kept under key %s", shown_job(handle), kept["key"])


def _refuse_links(storage: Storage, root: str, uri: str) -> None:
    """On a local root, where a job may have made ``cache/<dag_id>`` a link elsewhere: the
    entry's directory must resolve to a directory under the root."""
    from pathlib import Path

    local, base = storage.local_path(uri), storage.local_path(root)
    if local is None or base is None:
        return
    local.parent.mkdir(parents=True, exist_ok=True)
    if not local.parent.resolve().is_relative_to(Path(base).resolve()):
        raise ValueError(f"{local.parent} leads out of the artifact root {root}")
