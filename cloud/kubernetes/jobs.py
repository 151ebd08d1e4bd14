"""``batch/v1`` Jobs: create (with the API's defaults), get, ``/status``, list, watch, patch,
delete.

At create the API fills in: ``metadata.uid``, ``resourceVersion``, ``creationTimestamp``,
``generation: 1``; ``spec.selector.matchLabels{batch.kubernetes.io/controller-uid}``,
``completions``/``parallelism`` 1 when both are unset (else ``parallelism`` 1),
``backoffLimit: 6``, ``completionMode: NonIndexed``, ``suspend: false``,
``podReplacementPolicy: TerminatingOrFailed``, the pod template's labels ``controller-uid``,
``batch.kubernetes.io/controller-uid``, ``job-name``, ``batch.kubernetes.io/job-name`` (also the
Job's own labels when it has none) and the pod spec's defaults. Kueue's webhook suspends a Job
labelled ``kueue.x-k8s.io/queue-name``. ``dryRun=All`` answers without storing.

PATCH takes merge, strategic merge and JSON patches (:mod:`cloud.kubernetes.patching`) of the
metadata and spec; ``spec.selector`` and ``spec.completionMode`` are immutable (422), a
``metadata.resourceVersion`` in the patch must be the current one (409 Conflict), ``status`` is
left as it is, and a changed spec bumps ``generation``.
"""

from __future__ import annotations

import copy
from typing import Any

from cloud.fake_http import Request, Response
from cloud.kubernetes.api import (
    JOBS,
    ApiError,
    Cause,
    already_exists,
    bad_request,
    invalid,
    k8s_time,
    new_uid,
    not_found,
)
from cloud.kubernetes.deletion import Deletion, check_preconditions, delete_options
from cloud.kubernetes.patching import apply_patch
from cloud.kubernetes.podspec import generated_name, pod_spec_defaults
from cloud.kubernetes.reads import ReadRoutes
from cloud.kubernetes.state import JobTrack
from cloud.kubernetes.validation import check_decodable, validate_job

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
NS = r"/apis/batch/v1/namespaces/(?P<ns>[^/]+)/jobs"


def job_defaults(job: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The Job as the API stores it: ids, times and the defaults of the module docstring."""
    job = copy.deepcopy(job)
    job.pop("kind", None)
    job.pop("apiVersion", None)
    meta = job.setdefault("metadata", {})
    uid = new_uid()
    meta.update(namespace=namespace, uid=uid, creationTimestamp=k8s_time(), generation=1)
    for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
        meta.pop(transient, None)
    spec = job["spec"]
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    if QUEUE_LABEL in (meta.get("labels") or {}):
        spec["suspend"] = True  # Kueue's webhook: the queue admits it
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    if template_meta.get("labels") and not meta.get("labels"):
        meta["labels"] = dict(template_meta["labels"])
    template_meta["labels"] = {
        **(template_meta.get("labels") or {}),
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
        "job-name": meta["name"],
        "batch.kubernetes.io/job-name": meta["name"],
    }
    if not meta.get("labels"):
        meta["labels"] = dict(template_meta["labels"])
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    pod_spec_defaults(template["spec"])
    job["status"] = {}
    return job


class JobRoutes(ReadRoutes, Deletion):
    """The Job endpoints."""

    def _add_job_routes(self) -> None:
        r = self.router
        r.add("POST", NS, "createBatchV1NamespacedJob", self._create_job)
        r.add(
            "GET",
            NS,
            "listBatchV1NamespacedJob",
            lambda req: self.list_or_watch(JOBS, req, self._ns(req)),
        )
        r.add(
            "GET",
            "/apis/batch/v1/jobs",
            "listBatchV1JobForAllNamespaces",
            lambda req: self.list_or_watch(JOBS, req, None),
        )
        r.add("GET", NS + "/(?P<name>[^/]+)", "readBatchV1NamespacedJob", self._get_job)
        r.add(
            "GET", NS + "/(?P<name>[^/]+)/status", "readBatchV1NamespacedJobStatus", self._get_job
        )
        r.add("PATCH", NS + "/(?P<name>[^/]+)", "patchBatchV1NamespacedJob", self._patch_job)
        r.add("DELETE", NS + "/(?P<name>[^/]+)", "deleteBatchV1NamespacedJob", self._delete_job)

    @staticmethod
    def _ns(req: Request) -> str:
        assert req.match is not None
        return req.match["ns"]

    def _create_job(self, req: Request) -> Response:
        namespace = self._ns(req)
        try:
            body = check_decodable(JOBS, req.json())
        except ValueError:
            raise bad_request("the body of the request was not valid JSON") from None
        meta = body.setdefault("metadata", {})
        if meta.get("namespace") not in (None, "", namespace):
            raise bad_request(
                "the namespace of the provided object does not match the "
                "namespace sent on the request"
            )
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = generated_name(meta["generateName"])
        validate_job(JOBS, body)
        with self.lock:
            self.require_namespace(namespace)
            if self.store.get(JOBS.resource, namespace, meta["name"]) is not None:
                raise already_exists(JOBS, meta["name"])
            job = job_defaults(body, namespace)
            if req.arg("dryRun") == "All":
                job["metadata"]["resourceVersion"] = str(self.store.rv)
                return Response(201, JOBS.typed(job))
            self.tracks[job["metadata"]["uid"]] = JobTrack()
            stored = self.store.add(JOBS.resource, job)
            return Response(201, JOBS.typed(copy.deepcopy(stored)))

    def _get_job(self, req: Request) -> Response:
        assert req.match is not None
        return Response(200, self.get_object(JOBS, req.match["ns"], req.match["name"]))

    def _patch_job(self, req: Request) -> Response:
        assert req.match is not None
        namespace, name = req.match["ns"], req.match["name"]
        try:
            patch = req.json()
        except ValueError:
            raise bad_request("the body of the request was not valid JSON") from None
        with self.lock:
            current = self.store.get(JOBS.resource, namespace, name)
            if current is None:
                raise not_found(JOBS, name)
            patched = apply_patch(req.headers.get("content-type", ""), current, patch)
            wanted_rv = (patched.get("metadata") or {}).get("resourceVersion")
            if wanted_rv not in (None, current["metadata"]["resourceVersion"]):
                raise ApiError(
                    409,
                    f'Operation cannot be fulfilled on jobs.batch "{name}": the '
                    "object has been modified; please apply your changes to the "
                    "latest version and try again",
                    "Conflict",
                    {"name": name, "group": "batch", "kind": "jobs"},
                )
            updated = self._patched_job(current, patched)
            stored = self.store.put(JOBS.resource, updated)
            return Response(200, JOBS.typed(copy.deepcopy(stored or updated)))

    @staticmethod
    def _patched_job(current: dict[str, Any], patched: dict[str, Any]) -> dict[str, Any]:
        """The stored Job after a patch: its identity, status and immutable fields kept."""
        name = current["metadata"]["name"]
        spec = patched.get("spec") or {}
        causes = [
            Cause(
                f"spec.{field}",
                "FieldValueInvalid",
                f"Invalid value: {spec.get(field)!r}: field is immutable",
            )
            for field in ("selector", "completionMode")
            if spec.get(field) != current["spec"].get(field)
        ]
        if causes:
            raise invalid(JOBS, name, causes)
        validate_job(JOBS, {**patched, "metadata": {**patched.get("metadata", {}), "name": name}})
        updated = copy.deepcopy(patched)
        meta = updated.setdefault("metadata", {})
        for field in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
            else:
                meta.pop(field, None)
        updated.pop("kind", None)
        updated.pop("apiVersion", None)
        updated["status"] = copy.deepcopy(current.get("status") or {})
        if updated["spec"] != current["spec"]:
            meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
        return updated

    def _delete_job(self, req: Request) -> Response:
        assert req.match is not None
        namespace, name = req.match["ns"], req.match["name"]
        policy, _grace, preconditions = delete_options(req, "Orphan")
        with self.lock:
            job = self.store.get(JOBS.resource, namespace, name)
            if job is None:
                raise not_found(JOBS, name)
            check_preconditions(JOBS, job, preconditions)
            if req.arg("dryRun") == "All":
                return Response(200, JOBS.typed(copy.deepcopy(job)))
            return Response(200, self.delete_object(JOBS, job, policy))
