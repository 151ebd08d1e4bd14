"""The step cache (``cache=True``): a step whose key is unchanged returns the result of the job
that ran it before, with no job, no image build and no upload.

The key (``packaging.cache_key``) is taken in ``execute()`` once the step is encoded, before
anything is uploaded. Its entry, ``<root>/cache/<dag_id>/<key>.json``, names the job that made
the result. The artifact store is writable by jobs, so the entry is only a hint; its result is
handed out when

1. the service's own record of that job (``StepBackend.job_record``: looked up in this backend's
   account, by the job's id alone) says it succeeded, ran a spec of the sha256 the entry names,
   and where that spec and its results are;
2. that spec, read from there, has that sha256 and names this key (the worker wrote the key into
   the spec before the job was created, and the service keeps the spec's digest with the job);
3. every artifact of the result is still there and unchanged since the entry was written (the
   store's own stamps, ``artifacts.fingerprint``).

Anything else is a miss, and the task log says why; the job runs, and its entry replaces the
old one once it succeeded and its result was read (``keep_result``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_stepop.backends.naming import shown_job

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

    from airflow_stepop.backends.base import JobRecord, StepBackend
    from airflow_stepop.packaging.cache_key import CacheKey
    from airflow_stepop.runtime.storage import Storage

STATE_KEY = "stepop_cache"  # in the task state store: the key of the job this try started
ENTRY_MAX_BYTES = 1 << 20
SPEC_MAX_BYTES = 64 << 20  # a spec holds inline arguments of up to 64 KiB each
RESULT_MAX_BYTES = 64 << 20
CLOCK_SKEW_SECONDS = 3600  # an entry written later than this from now is no entry of ours
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,255}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class Hit(NamedTuple):
    result: Any
    entry: dict[str, Any]
    record: JobRecord


class MissError(Exception):
    """Why an entry's result cannot be used (the task log says it)."""


def look_up(
    backend: StepBackend,
    storage: Storage,
    root: str,
    key: CacheKey,
    expires_after: float | None,
    conn_id: str | None,
    log: Logger,
) -> Hit | None:
    """The verified result the key's entry names, or None (a miss, logged with its reason)."""
    from airflow_stepop.packaging.cache_key import shown_parts

    try:
        hit = _verified_hit(backend, storage, root, key, expires_after, conn_id)
    except MissError as exc:
        log.info("Step cache miss: %s. Key %s", exc, shown_parts(key))
        return None
    log.info("Step cache hit. Key %s", shown_parts(key))
    return hit


def _verified_hit(
    backend: StepBackend,
    storage: Storage,
    root: str,
    key: CacheKey,
    expires_after: float | None,
    conn_id: str | None,
) -> Hit:
    from airflow_stepop.packaging.cache_key import entry_uri

    entry = _entry(storage, entry_uri(root, key.dag_id, key.digest), key)
    age = time.time() - entry["created_at"]
    if expires_after is not None and age > expires_after:
        raise MissError(
            f"the entry expired (written {_when(entry['created_at'])}, "
            f"cache_expires_after={timedelta(seconds=expires_after)})"
        )
    job_id = entry["job_id"]
    record = _job_record(backend, job_id)
    if record.status.state != "succeeded":
        raise MissError(f"the service says job {job_id} {record.status.state}")
    if not record.spec_sha256 or record.spec_sha256 != entry["spec_sha256"]:
        raise MissError(f"the entry does not match the service's record of job {job_id}")
    _check_spec(storage, record, key)
    return Hit(_result(storage, root, record, entry, conn_id), entry, record)


def _job_record(backend: StepBackend, job_id: str) -> JobRecord:
    """The service's record of the job, asked up to three times while it answers with a
    transient error (throttling, 5xx): a miss costs a job."""
    for attempt in range(3):
        try:
            return backend.job_record(job_id)
        except Exception as exc:
            if backend.is_gone(exc):
                raise MissError(f"the job that made the result, {job_id}, is gone ({exc})") from exc
            if attempt == 2 or not backend.is_transient(exc):
                raise MissError(f"the service did not answer for job {job_id} ({exc})") from exc
            time.sleep(2**attempt)
    raise AssertionError("unreachable")


def _entry(storage: Storage, uri: str, key: CacheKey) -> dict[str, Any]:
    """The key's entry, its fields checked: it comes from the artifact store."""
    try:
        entry = json.loads(storage.read_bounded(uri, ENTRY_MAX_BYTES))
    except FileNotFoundError:
        raise MissError(f"no entry at {uri}") from None
    except Exception as exc:  # unreadable, too large, no JSON
        raise MissError(f"the entry at {uri} cannot be read ({exc})") from exc
    fine = (
        isinstance(entry, dict)
        and entry.get("key") == key.digest
        and isinstance(entry.get("job_id"), str)
        and _JOB_ID.fullmatch(entry["job_id"]) is not None
        and all(
            isinstance(entry.get(name), str) and _SHA256.fullmatch(entry[name]) is not None
            for name in ("spec_sha256", "result_sha256")
        )
        and type(entry.get("created_at")) in (int, float)
        and 0 < entry["created_at"] <= time.time() + CLOCK_SKEW_SECONDS
        and isinstance(entry.get("outputs"), dict)
    )
    if not fine:
        raise MissError(f"the entry at {uri} is not one this release writes for this key")
    return entry


def _check_spec(storage: Storage, record: JobRecord, key: CacheKey) -> None:
    """The spec the job ran, found where the service's record says: its bytes are those the
    service's record pins, and it names this key."""
    from airflow_stepop.runtime import spec as specs
    from airflow_stepop.runtime.storage import join

    job = shown_job(record.handle)
    uri = join(record.handle["run_uri"], specs.SPEC_NAME)
    try:
        data = storage.read_bounded(uri, SPEC_MAX_BYTES)
    except Exception as exc:
        raise MissError(f"the spec job {job} ran cannot be read ({exc})") from exc
    if hashlib.sha256(data).hexdigest() != record.spec_sha256:
        raise MissError(f"the spec of job {job} was changed after the job was created")
    if json.loads(data).get("cache_key") != key.digest:
        raise MissError(f"job {job} ran another key")


def _result(
    storage: Storage, root: str, record: JobRecord, entry: dict[str, Any], conn_id: str | None
) -> Any:
    """The job's result: its manifest the one the entry found (its sha256), every artifact of it
    still there and as the entry found it. Whatever else is wrong with it is a miss too."""
    from airflow_stepop.artifacts.fingerprint import artifact_fingerprint
    from airflow_stepop.artifacts.ref import ArtifactRef
    from airflow_stepop.runtime import values

    job = shown_job(record.handle)
    data = _manifest_bytes(storage, record.handle)
    if hashlib.sha256(data).hexdigest() != entry["result_sha256"]:
        raise MissError(f"the result manifest of job {job} changed since it was cached")
    try:
        outputs = json.loads(data)["outputs"]
        refs = values.references(outputs)
    except Exception as exc:
        raise MissError(f"the result of job {job} is no result manifest ({exc})") from exc
    for ref in refs:
        uri = ref.get("uri")
        try:
            now = artifact_fingerprint(storage, root, ref)
        except Exception as exc:  # access denied, too many files, the store down: a miss
            raise MissError(f"the result's artifact {uri} cannot be checked ({exc})") from exc
        if now is None:
            raise MissError(f"the result's artifact {uri} is gone")
        if now != entry["outputs"].get(uri):
            raise MissError(f"the result's artifact {uri} changed since it was cached")
    try:
        return values.decode(outputs, lambda item: ArtifactRef.from_record(item, conn_id))
    except Exception as exc:
        raise MissError(f"the result of job {job} is unreadable ({exc})") from exc


def _manifest_bytes(storage: Storage, handle: dict[str, Any]) -> bytes:
    """The job's result manifest as stored, at most ``RESULT_MAX_BYTES``."""
    from airflow_stepop.backends.outcome import output_uri
    from airflow_stepop.runtime import spec as specs
    from airflow_stepop.runtime.storage import join

    try:
        return storage.read_bounded(join(output_uri(handle), specs.RESULT_NAME), RESULT_MAX_BYTES)
    except Exception as exc:
        raise MissError(f"the result of job {shown_job(handle)} cannot be read ({exc})") from exc


def keep_result(
    store: Any,
    ti: Any,
    handle: dict[str, Any],
    storage: Storage,
    manifest: bytes,
    billing: Any,
    log: Logger,
) -> None:
    """After the job this try started succeeded and its result manifest (``manifest``, as the
    task read it) was read: write the entry of the key it ran (``remember_key``), replacing
    any. A failure here never fails the step: its result is good, only the next run misses."""
    try:
        kept = store.get(STATE_KEY) if store is not None else None
    except Exception as exc:
        log.warning("Step cache: the result was not cached (%s)", exc)
        return
    if not isinstance(kept, dict) or kept.get("try_number") != ti.try_number:
        return  # caching is off, or this try did not start the job (a re-attached one)
    made_by = {"run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index,
               "try_number": ti.try_number}  # fmt: skip
    from airflow_stepop.backends.cache_entry import write_entry

    write_entry(kept, ti.dag_id, made_by, handle, storage, manifest, billing, log)


def remember_key(
    store: Any, ti: Any, key: CacheKey, root: str, spec_sha256: str, log: Logger
) -> dict[str, Any]:
    """The key the job this try starts runs, for ``keep_result`` (in another process after a
    deferral): the task state store keeps it across the deferral, never the artifact store.
    Returned too, for a trigger that ends the task itself (``operators/trigger_end``)."""
    kept = {"key": key.digest, "root": root, "spec_sha256": spec_sha256,
            "try_number": ti.try_number}  # fmt: skip
    if store is None:
        log.warning("Step cache: this Airflow gives the task no task state store; the result "
                    "of its job is cached only where its trigger ends the task")  # fmt: skip
    else:
        store.set(STATE_KEY, kept)
    return kept


def report_hit(log: Logger, ti: Any, backend: StepBackend, hit: Hit) -> None:
    """The task log's line for a hit: which run and task made the result and what it cost then
    (the entry's word, only shown); the billing XCom says this try cost nothing and names the
    job that did (the service's word)."""
    made_by = hit.entry.get("made_by") if isinstance(hit.entry.get("made_by"), dict) else {}
    made_by = {name: _shown(made_by.get(name)) for name in ("run_id", "task_id", "map_index",
                                                            "try_number")}  # fmt: skip
    billing = hit.entry.get("billing") if isinstance(hit.entry.get("billing"), dict) else {}
    saved = billing.get("estimated_cost_usd")
    saved = float(saved) if type(saved) in (int, float) and math.isfinite(saved) else None
    job = shown_job(hit.record.handle)
    index = made_by["map_index"]
    log.info(
        "Step cache hit: returning the result of job %s (run %s, task %s%s, try %s, cached %s), "
        "with no job of its own; it saved %s",
        job,
        made_by["run_id"],
        made_by["task_id"],
        "" if index in (-1, None) else f"[{index}]",
        made_by["try_number"],
        _when(hit.entry["created_at"]),
        "the job's time (no billing record)" if saved is None else f"about ${saved:.4f}",
    )
    key = getattr(backend, "billing_xcom_key", None)
    if key:
        ti.xcom_push(key=key, value={
            "cache_hit": True, "original_job": hit.record.handle.get("job_id"),
            "made_by": made_by, "billable_seconds": 0, "estimated_cost_usd": 0.0,
            "saved_usd": saved,
        })  # fmt: skip


def _shown(value: Any) -> Any:
    """A value of the entry as the log and an XCom show it: a number, or short printable text."""
    if type(value) is int or value is None:
        return value
    text = str(value)[:250]
    return "".join(c if c.isprintable() else "?" for c in text)


def _when(stamp: float) -> str:
    try:
        return datetime.fromtimestamp(stamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return "at an unknown time"


class Lookup(NamedTuple):
    key: CacheKey
    hit: Hit | None


def check(op: Any, context: Any, backend: StepBackend, staging: Any) -> Lookup | None:
    """The step's key and what its entry holds; None when caching is off for the step."""
    from airflow_stepop.packaging.cache_key import cache_key

    enabled, version, expires_after = settings(op)
    if not enabled:
        return None
    key = cache_key(
        staging.encoded,
        dag_id=context["ti"].dag_id,
        backend=type(backend).__name__,
        environment=backend.environment_id(op.docker_settings),
        env_vars=op.environment,
        cache_version=version,
    )
    hit = look_up(
        backend, staging.storage, staging.root, key, expires_after, op.storage_conn_id, op.log
    )
    return Lookup(key, hit)


def settings(op: Any) -> tuple[bool, str | None, float | None]:
    """Whether the step caches (its ``cache``, else ``[stepop] cache``), its rendered
    ``cache_version`` and its expiry in seconds."""
    from airflow_stepop import config
    from airflow_stepop.setting_values import SettingsError

    enabled = op.cache if op.cache is not None else config.get_bool("cache")
    version = op.cache_version
    if type(version) in (int, float):  # "{{ var.value.v }}" rendered natively: "2" is 2
        version = str(version)
    if enabled and version is not None and (not isinstance(version, str) or not version.strip()):
        raise SettingsError(
            f"{op.argument_owner}.cache_version rendered to {version!r}: a cache version must be "
            "a non-empty string (e.g. cache_version='2', or a template that renders to one); "
            "leave it out for none."
        )
    return enabled, version, op.cache_expires_after
