"""What a finished step job left: its result and billing, or the error the task fails with."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow_stepop.artifacts.ref import ArtifactRef
from airflow_stepop.backends.naming import shown_job

if TYPE_CHECKING:
    from airflow.sdk.types import Logger

    from airflow_stepop.backends.base import StepBackend
    from airflow_stepop.runtime.storage import Storage


class StepFailedError(RuntimeError):
    """The step's job failed; the message carries the remote exception and the job's log tail."""


class StepKilledError(RuntimeError):
    """The task was killed (a user's mark or clear) while ``execute()`` still ran."""


def step_failure(event: dict[str, Any], storage: Storage) -> Exception:
    """The task's error for a job that did not succeed: the remote exception (from the job's
    ``error.json``) once, then the rest of the job's log tail."""
    from airflow_stepop.runtime import spec as specs
    from airflow_stepop.runtime.storage import join

    handle = event["handle"]
    parts = [f"Step job {shown_job(handle)} {event['status']}"]
    if event.get("reason"):
        parts[0] += f": {event['reason']}"
    error_uri = join(output_uri(handle), specs.ERROR_NAME)
    error = _error_document(storage, error_uri)
    if error is not None:
        parts.append(f"The step raised {error['type']}: {error['message']}")
        if hint := _hint(error):  # before the traceback, which may be long
            parts.append(hint)
        parts.append("Remote traceback:\n" + error["traceback"].rstrip())
    tail = event.get("log_tail") or []
    if error is not None:  # the traceback is above already: keep only what else the job said
        # (an entry script may also print the exception's summary line last, for a service
        # that quotes the end of the log in its own error, as Azure ML does)
        summary = f"{error['type']}: {error['message']}"
        tail = _without_traceback(tail, f"{error['traceback'].rstrip()}\n{summary}")
    if tail:
        parts.append("Last lines of the job's log:\n" + "\n".join(tail))
    message = "\n\n".join(parts)
    if event["status"] == "timeout":
        from airflow.sdk.exceptions import AirflowTaskTimeout

        return AirflowTaskTimeout(message)
    if error is not None and error.get("module", "").startswith("airflow."):
        return _as_airflow_does(error, message) or StepFailedError(message)
    return StepFailedError(message)


def before_job_failure(event: dict[str, Any]) -> Exception:
    """The task's error for a step whose job never started: its image's build failed (event
    ``phase`` "image"), or the service refused the job's create after the build ("create")."""
    build = event["handle"]
    image = build.get("image", "the step's image")
    where = f"{build.get('builder', 'the builder')}, build {build.get('job_id')}"
    if event.get("phase") == "image":
        parts = [
            f"The step's environment image {image} was not built ({where}): "
            f"{event['status']}" + (f": {event['reason']}" if event.get("reason") else "")
        ]
        parts[0] += ". No job was created."
        if event.get("hint"):
            parts.append(str(event["hint"]))
        if event.get("log_tail"):
            parts.append("Last lines of the build's log:\n" + "\n".join(event["log_tail"]))
    else:
        parts = [
            f"Image {image} was built ({where}), but the job was not created: {event.get('reason')}"
        ]
    message = "\n\n".join(parts)
    if event["status"] == "timeout":
        from airflow.sdk.exceptions import AirflowTaskTimeout

        return AirflowTaskTimeout(message)
    return StepFailedError(message)


ERROR_DOCUMENT_MAX_BYTES = 1 << 20  # a traceback of thousands of frames fits


def _error_document(storage: Any, uri: str) -> dict[str, str] | None:
    """The job's error document, as text fields, or None: the job writes it, so it is read as
    at most ``ERROR_DOCUMENT_MAX_BYTES`` and a field it lacks is empty, never a KeyError that
    would hide the step's failure behind one of ours."""
    import json

    try:
        document = json.loads(storage.read_bounded(uri, ERROR_DOCUMENT_MAX_BYTES))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        document = {"type": "UnreadableErrorDocument", "message": f"{uri}: {exc}"}
    if not isinstance(document, dict):
        document = {"type": "UnreadableErrorDocument", "message": f"{uri} is not an object"}
    return {key: str(document.get(key) or "") for key in ("type", "module", "message", "traceback")}


def _as_airflow_does(error: dict[str, Any], message: str) -> Exception | None:
    """The exceptions by which a task sets its own state, raised in the step, do to the task
    what they do in a plain ``@task``: a skip skips it, a fail fails it without a retry."""
    from airflow.sdk import exceptions

    if error["type"] == "AirflowSkipException":
        return exceptions.AirflowSkipException(f"The step raised it: {error['message']}")
    if error["type"] == "AirflowFailException":
        return exceptions.AirflowFailException(message)
    return None


# What a step reads from Airflow while its job runs outside Airflow (the Task SDK's errors)
_AIRFLOW_LOOKUP = r"VARIABLE_NOT_FOUND|CONNECTION_NOT_FOUND|conn_id `[^`]*` isn't defined"


# Where a job unpacks the code bundle (runtime/code_tree.py): <cache>/airflow-stepop-cache-<uid>/
# code/<sha>/bundle/, and <cache>/airflow-stepop-cache/code/<sha>/ in earlier releases
_IN_THE_BUNDLE = re.compile(r"airflow-stepop-cache[^/]*/code/")
# The Task SDK's get_current_context() outside a task
_NO_CONTEXT = "Current context was requested but no context was found"


def _hint(error: dict[str, Any]) -> str | None:
    """What to change, for the remote errors that come from where a job runs, not the code. A
    hint that cannot be made is left out: it never hides the failure it is about."""
    try:
        return _hint_for(error)
    except Exception:
        return None


def _hint_for(error: dict[str, Any]) -> str | None:
    message = error["message"]
    if error["type"] == "ModuleNotFoundError":
        from airflow_stepop.backends.missing_module import missing_module_hint

        return missing_module_hint(message)
    if error["type"] == "FileNotFoundError" and _IN_THE_BUNDLE.search(message):
        return (
            "Only .py files travel in a step's code bundle: a data file beside your modules "
            "(read from Path(__file__).parent) is not in the job. Pass its content as an "
            "argument, return it from a step (an artifact), or put it in the image."
        )
    if error["type"] == "RuntimeError" and _NO_CONTEXT in message:
        return (
            "A step's job runs outside Airflow: get_current_context() has no task there. Name "
            "what the step needs from the context as its parameters, e.g. def step(rows, ds, "
            "params): (ds, ts, logical_date, run_id, params, data_interval_start/_end and the "
            "other values the README lists), or pass it as an argument, e.g. "
            "op_kwargs={'try_number': '{{ ti.try_number }}'}."
        )
    if error.get("module", "").startswith("airflow.") and re.search(_AIRFLOW_LOOKUP, message):
        return (
            "A step's job runs outside Airflow: it cannot read Airflow's Variables or "
            "Connections (only AIRFLOW_VAR_* and AIRFLOW_CONN_* of its own environment, or a "
            "secrets backend its image configures). Read the value in the DAG instead and pass "
            "it as an argument, e.g. op_kwargs={'table': '{{ var.value.table }}'}; a secret "
            "is read inside the step from your cloud's secret store."
        )
    return None


def _without_traceback(tail: list[str], traceback: str) -> list[str]:
    """The log tail without the last printing of the remote traceback (a chained exception's
    whole chain included). Line by line, not from where it starts: stdout and stderr reach a
    service's log as two streams, so a line printed before the exception can arrive amid or
    after it. A long line is compared as the tail keeps it (cut, see ``tail_line``)."""
    pending = Counter(tail_line(line).rstrip() for line in traceback.rstrip().splitlines())
    kept: list[str] = []
    for line in reversed(tail):
        if pending[line.rstrip()] > 0:
            pending[line.rstrip()] -= 1
        else:
            kept.append(line)
    return kept[::-1]


RESULT_MANIFEST_MAX_BYTES = 64 << 20  # a manifest of inline results of 64 KiB each


class JobResult(NamedTuple):
    value: Any  # what the task returns
    manifest: bytes  # the result manifest as read (the step cache pins its sha256)


def read_result(
    handle: dict[str, Any],
    storage: Storage,
    conn_id: str | None,
    *,
    check_artifacts: bool = False,
    max_bytes: int = RESULT_MANIFEST_MAX_BYTES,
) -> JobResult:
    """The step's result from its manifest; its references carry ``conn_id``, the operator's
    connection (the manifest is the job's: a connection named in it is never used).
    ``check_artifacts``: every artifact it names must still be there (a result reused from an
    earlier try; a fresh one was just written). The job writes the manifest: it is read as at
    most ``max_bytes`` (``RESULT_MANIFEST_MAX_BYTES``; less in a triggerer)."""
    import json

    from airflow_stepop.runtime import spec as specs
    from airflow_stepop.runtime import values
    from airflow_stepop.runtime.storage import join

    data = storage.read_bounded(join(output_uri(handle), specs.RESULT_NAME), max_bytes)
    manifest = json.loads(data)
    for record in values.references(manifest["outputs"]) if check_artifacts else ():
        if not storage.exists(record["uri"]):
            raise values.ArtifactMissingError(f"the result names {record['uri']}, which is gone")
    value = values.decode(
        manifest["outputs"], lambda record: ArtifactRef.from_record(record, conn_id)
    )
    return JobResult(value, data)


def report_billing(
    log: Logger, ti: Any, backend: StepBackend, event: dict[str, Any]
) -> dict[str, Any] | None:
    """The finished job's billable time and cost: in the task log and an XCom; returned."""
    billing = job_billing(log, backend, event)
    if billing is not None:
        ti.xcom_push(key=backend.billing_xcom_key, value=billing)
    return billing


def job_billing(log: Logger, backend: StepBackend, event: dict[str, Any]) -> dict[str, Any] | None:
    """The finished job's billable time and cost, logged; None where the backend bills none
    (its ``billing_xcom_key`` names the XCom it goes to)."""
    key = getattr(backend, "billing_xcom_key", None)
    billing = backend.billing(event.get("details") or {}) if key else None
    if not billing:
        return None
    cost = billing.get("estimated_cost_usd")
    log.info(
        "Job %s: %s billable s x %s x %s%s%s",
        shown_job(event["handle"]),
        billing.get("billable_seconds"),
        billing.get("count", 1),
        billing.get("machine"),
        " (Spot)" if billing.get("spot") else "",
        f" = about {usd(cost)} (catalog {billing.get('catalog_date')})"
        if cost is not None
        else " (no price in the catalog)",
    )
    return billing


def shown(result: Any, limit: int = 300) -> str:
    """A result as the task log shows it (a reference's repr is its short form), long values cut."""
    text = repr(result)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def delivery_marker(handle: dict[str, Any]) -> str:
    """Where the trigger that ends a task notes that it delivered the job's result (a retry
    after a clear then runs the step again): in the run directory the worker staged."""
    from airflow_stepop.runtime.storage import join

    return join(handle["run_uri"], f"delivered-{handle['job_id']}.json")


def output_uri(handle: dict[str, Any]) -> str:
    """Where the job left its results: the run directory unless the backend says otherwise."""
    return handle.get("output_uri") or handle["run_uri"]


def usd(amount: float) -> str:
    """A cost as the log shows it: to a hundredth of a cent, and a short job's not as $0.0000."""
    if amount == 0:
        return "$0"
    if amount < 0.0001:
        return "<$0.0001"
    return f"${amount:.4f}"


TAIL_LINE_CHARS = 1000


def tail_line(line: str) -> str:
    """A job's line as the event's tail keeps it: its start, and how much more there is."""
    if len(line) <= TAIL_LINE_CHARS:
        return line
    more = len(line) - TAIL_LINE_CHARS
    return f"{line[:TAIL_LINE_CHARS]}... ({more} more characters in the task log)"
