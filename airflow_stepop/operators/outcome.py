"""What a finished step job left: its result and billing, or the error the task fails with."""

from __future__ import annotations

import re
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

from airflow_stepop.artifacts.ref import ArtifactRef

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
    from airflow_stepop.backends.base import shown_job
    from airflow_stepop.runtime import spec as specs
    from airflow_stepop.runtime.storage import join

    handle = event["handle"]
    parts = [f"Step job {shown_job(handle)} {event['status']}"]
    if event.get("reason"):
        parts[0] += f": {event['reason']}"
    error_uri = join(output_uri(handle), specs.ERROR_NAME)
    error = None
    if storage.exists(error_uri):
        error = storage.read_json(error_uri)
        parts.append(f"The step raised {error['type']}: {error['message']}")
        parts.append("Remote traceback:\n" + error["traceback"].rstrip())
        if hint := _hint(error):
            parts.append(hint)
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
    return StepFailedError(message)


# What a step reads from Airflow while its job runs outside Airflow (the Task SDK's errors)
_AIRFLOW_LOOKUP = re.compile(
    r"VARIABLE_NOT_FOUND|CONNECTION_NOT_FOUND|conn_id `[^`]*` isn't defined"
)


def _hint(error: dict[str, Any]) -> str | None:
    """What to change, for the remote errors that come from where a job runs, not the code."""
    message = error["message"]
    if error["type"] == "ModuleNotFoundError":
        return _missing_module_hint(message)
    if error.get("module", "").startswith("airflow.") and _AIRFLOW_LOOKUP.search(message):
        return (
            "A step's job runs outside Airflow: it cannot read Airflow's Variables or "
            "Connections (only AIRFLOW_VAR_* and AIRFLOW_CONN_* of its own environment, or a "
            "secrets backend its image configures). Read the value in the DAG instead and pass "
            "it as an argument, e.g. op_kwargs={'table': '{{ var.value.table }}'}; a secret "
            "is read inside the step from your cloud's secret store."
        )
    return None


def _missing_module_hint(message: str) -> str:
    """What gives a job a module its step imports: the job's environment, not the worker's.

    The worker (where this runs) tells the cases apart: a package it has installed (its name
    on PyPI may differ from the import name: ``sklearn`` is ``scikit-learn``), a module of the
    DAGs folder that the code bundle missed, or a part of a package the job has in another
    version (``numpy._core``: an array pickled by numpy 2, read by numpy 1)."""
    named = re.search(r"No module named '([^']+)'", message)
    missing = named.group(1) if named else "the package"
    top = missing.partition(".")[0]
    if top == "airflow":
        return (
            "The job's Python has no Airflow: a step runs outside Airflow, and what it imports "
            "must not import Airflow. Move the Airflow imports to the DAG file, or give the job "
            "docker=DockerSettings(requirements=['apache-airflow']) if the step needs Airflow's "
            "library."
        )
    installed = _installed_as(missing)
    if missing != top and installed and installed[2]:
        # Python imported the package before looking for its part, and one distribution makes
        # the package (not a namespace such as google or azure, which many share)
        return (
            f"The job has the package {top!r} but not its module {missing!r}: the job's "
            f"{installed[0]} is another version than the worker's {installed[1]} (a value "
            f"pickled by one version and read by another, or code written for the other). Give "
            f"the job the worker's version: docker=DockerSettings(requirements="
            f"[{installed[0] + '==' + installed[1]!r}]), or return the value in a form that "
            "does not depend on it (an array, a DataFrame, JSON)."
        )
    if installed:
        requirement = repr(f"{installed[0]}=={installed[1]}")
        where = f"the worker has it from {installed[0]} {installed[1]}"
    elif top in sys.stdlib_module_names:
        return (
            f"The job's Python has no module {missing!r}, which is part of Python itself: the "
            "job's image has a Python built without it; use an image with a full Python."
        )
    elif (origin := _local_origin(top)) is not None:
        return (
            f"The job has no module {missing!r}, which the worker has at {origin} and no "
            "package installs: the code bundle takes the modules of your DAGs folder that the "
            "step's code names in an import statement, and none names this one (an import by "
            f"a computed name, importlib.import_module(...), is not seen). Add `import "
            f"{missing}` to the module that defines the step."
        )
    else:
        requirement = "'<the package that provides it>'"
        where = f"its name on PyPI may differ from {top!r} (sklearn is scikit-learn)"
    return (
        f"The job's Python has no module {missing!r}: a step imports what its job's "
        f"environment has ({where}). Add it with docker=DockerSettings(requirements="
        f"[{requirement}]) (or use an image that has it); a local step without docker= runs "
        "in the worker's own Python, so install it there."
    )


def _installed_as(module: str) -> tuple[str, str, bool] | None:
    """The distribution that gives the worker ``module`` (a dotted name too), its version, and
    whether it alone makes the top-level package (no namespace package that many share)."""
    from importlib import metadata

    top = module.partition(".")[0]
    names = metadata.packages_distributions().get(top) or []
    if len(names) > 1:  # a namespace (google.cloud.bigquery): the one whose files hold it
        if module == top:
            return None  # the namespace itself: no one package to name
        path = module.replace(".", "/")
        names = [
            name
            for name in names
            if any(
                str(file) == f"{path}.py" or str(file).startswith(f"{path}/")
                for file in metadata.distribution(name).files or []
            )
        ]
        return (names[0], metadata.version(names[0]), False) if names else None
    if not names:
        return None
    return names[0], metadata.version(names[0]), True


def _local_origin(module: str) -> str | None:
    """Where the worker finds ``module`` when no distribution installs it (the DAGs folder)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    locations = list(spec.submodule_search_locations or []) or [spec.origin]
    return str(locations[0]) if locations[0] else None


def _without_traceback(tail: list[str], traceback: str) -> list[str]:
    """The log tail without the last printing of the remote traceback (a chained exception's
    whole chain included). Line by line, not from where it starts: stdout and stderr reach a
    service's log as two streams, so a line printed before the exception can arrive amid or
    after it."""
    pending = Counter(line.rstrip() for line in traceback.rstrip().splitlines())
    kept: list[str] = []
    for line in reversed(tail):
        if pending[line.rstrip()] > 0:
            pending[line.rstrip()] -= 1
        else:
            kept.append(line)
    return kept[::-1]


def read_result(
    handle: dict[str, Any],
    storage: Storage,
    conn_id: str | None,
    *,
    check_artifacts: bool = False,
) -> Any:
    """The step's result from its manifest; its references carry ``conn_id``, the connection
    that reaches them. ``check_artifacts``: every artifact it names must still be there (a
    result reused from an earlier try; a fresh one was just written)."""
    from airflow_stepop.runtime import spec as specs
    from airflow_stepop.runtime import values
    from airflow_stepop.runtime.storage import join

    manifest = storage.read_json(join(output_uri(handle), specs.RESULT_NAME))
    for record in _artifact_records(manifest["outputs"]) if check_artifacts else ():
        if not storage.exists(record["uri"]):
            raise values.ArtifactMissingError(f"the result names {record['uri']}, which is gone")
    return values.decode(
        manifest["outputs"], lambda record: ArtifactRef.from_record(record, conn_id)
    )


def report_billing(log: Logger, ti: Any, backend: StepBackend, event: dict[str, Any]) -> None:
    """The finished job's billable time and cost: in the task log and an XCom."""
    key = getattr(backend, "billing_xcom_key", None)
    billing = backend.billing(event.get("details") or {}) if key else None
    if not billing:
        return
    from airflow_stepop.backends.base import shown_job
    from airflow_stepop.triggers.progress import usd

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
    ti.xcom_push(key=key, value=billing)


def _artifact_records(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        if isinstance(node.get("ref"), dict):
            return [node["ref"]]
        children = [*node.get("list", []), *(node.get("dict") or {}).values()]
        return [record for child in children for record in _artifact_records(child)]
    return []


def shown(result: Any, limit: int = 300) -> str:
    """A result as the task log shows it: references as references, long values cut."""
    text = str(result) if isinstance(result, ArtifactRef) else repr(result)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def output_uri(handle: dict[str, Any]) -> str:
    """Where the job left its results: the run directory unless the backend says otherwise."""
    return handle.get("output_uri") or handle["run_uri"]
