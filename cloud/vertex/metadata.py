"""The Vertex AI fake's metadata contexts: Experiments and ExperimentRuns, as far as a job needs.

An Experiment is a context of the ``default`` metadata store (schema ``system.Experiment``); an
ExperimentRun one of schema ``system.ExperimentRun``. The fake serves CreateContext and
GetContext (``aiplatform_v1.MetadataServiceClient``, ``transport="rest"``) so a test can make
an experiment, and :func:`check_job_contexts` refuses a CustomJob whose
``jobSpec.experiment`` or ``jobSpec.experimentRun`` names a context that was never created, in
the job's own project and location, as Vertex does (NOT_FOUND). Nothing else of Vertex ML
Metadata (artifacts, executions, lineage, the runs Vertex makes for a job) is emulated.
"""

from __future__ import annotations

import re
import time
from typing import Any

from cloud.fake_http import Request, Response, rfc3339
from cloud.vertex.api import PARENT, SEGMENT, ApiError, get_field
from cloud.vertex.state import VertexState
from cloud.vertex.validation import CONTEXT_NAME

_CONTEXT_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")


class MetadataRoutes(VertexState):
    """``/v1/projects/{p}/locations/{l}/metadataStores/{s}/contexts[/{id}]``."""

    def _add_metadata_routes(self) -> None:
        contexts = rf"{PARENT}/metadataStores/(?P<store>{SEGMENT})/contexts"
        self.router.add("POST", contexts, "CreateContext", self.create_context)
        self.router.add("GET", rf"{contexts}/(?P<context>{SEGMENT})", "GetContext",
                        self.get_context)  # fmt: skip

    def create_context(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        context_id = req.arg("contextId") or ""
        if not _CONTEXT_ID.fullmatch(context_id):
            raise ApiError(400, f"Invalid context id '{context_id}': use [a-z0-9][a-z0-9-]*.")
        name = (
            f"projects/{m['project']}/locations/{m['location']}/metadataStores/{m['store']}"
            f"/contexts/{context_id}"
        )
        try:
            body = req.json() or {}
        except ValueError as exc:
            raise ApiError(400, f"Invalid JSON payload received. {exc}") from exc
        now = rfc3339(time.time())
        resource = {
            "name": name,
            "displayName": get_field(body, "displayName") or context_id,
            "schemaTitle": get_field(body, "schemaTitle") or "",
            "metadata": get_field(body, "metadata") or {},
            "createTime": now,
            "updateTime": now,
        }
        with self._lock:
            if name in self.contexts:
                raise ApiError(409, f'Context "{name}" already exists.')
            self.contexts[name] = resource
        return Response(200, resource)

    def get_context(self, req: Request) -> Response:
        m = req.match
        assert m is not None
        name = (
            f"projects/{m['project']}/locations/{m['location']}/metadataStores/{m['store']}"
            f"/contexts/{m['context']}"
        )
        with self._lock:
            resource = self.contexts.get(name)
        if resource is None:
            raise ApiError(404, f'Context "{name}" is not found.')
        return Response(200, resource)


def check_job_contexts(
    contexts: dict[str, dict[str, Any]], spec: dict[str, Any], project: str, location: str
) -> None:
    """NOT_FOUND when a job's experiment or run is not a context of its project and location
    (the names' shape and the service account were checked by ``validate_custom_job``)."""
    for snake, camel in (("experiment", "experiment"), ("experiment_run", "experimentRun")):
        name = get_field(spec, camel)
        if not name:
            continue
        m = CONTEXT_NAME.fullmatch(name)
        here = m is not None and (m["project"], m["location"]) == (project, location)
        if not here or name not in contexts:
            raise ApiError(
                404,
                f'The {snake.replace("_", " ")} "{name}" of custom_job.job_spec.{snake} is not '
                "found: create it first (an Experiment, or an ExperimentRun of it, in the job's "
                "project and location).",
            )
