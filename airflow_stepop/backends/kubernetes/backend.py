"""The Kubernetes backend: a step runs as a ``batch/v1`` Job on the cluster of a connection.

The worker's calls live here (the official ``kubernetes`` client), the triggerer's in
``triggerer_calls.py`` (inherited), what a Job says in ``job.py``, its objects in
``manifest.py``. How a step starts:

1. ``prepare``: the image (``image_uri``, or the ``DockerSettings`` image, content-hashed and
   built by the worker's engine only on a registry miss, pushed to ``image_repository``), the
   transfer document (signed URLs for an object store root, ``transfer.py``) and the three
   objects, all as JSON;
2. ``create``: the Job, then the Secret and (for several pods) the headless Service, each
   owned by the Job from its create on: they go with it, and no call ever changes them (its
   pods wait for the Secret to mount). A Job of the same name that exists is this try's own
   only when its container's ``STEPOP_TRY_ID`` (in the pod template, which cannot change
   after create) is this try's id; else ``JobNameTakenError``, and nothing of it is touched.

A finished Job's Secret is deleted at ``release``: its URLs are not needed any more. The Job
stays for ``ttl_after_finished`` (its logs, and the step cache's proof of a result).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends.base import (
    JobNameTakenError,
    JobRecord,
    JobRequest,
    JobStatus,
    PreparedJob,
    StepBackend,
    service_refusal,
)
from airflow_stepop.backends.bootstrap import TRY_ID_ENV, read_staged_spec
from airflow_stepop.backends.kubernetes import job as job_states
from airflow_stepop.backends.kubernetes import manifest, transfer
from airflow_stepop.backends.kubernetes.clients import read_access, sync_client
from airflow_stepop.backends.kubernetes.config import KubernetesJobConfig
from airflow_stepop.backends.kubernetes.job import JOB_NAME_LABEL
from airflow_stepop.backends.kubernetes.signers import signer_for
from airflow_stepop.backends.kubernetes.triggerer_calls import (
    TRANSIENT_STATUS,
    KubernetesTriggererCalls,
)
from airflow_stepop.backends.ratelimit import list_limiter
from airflow_stepop.runtime.spec import SPEC_SHA256_ENV
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:
    from airflow_stepop.images.builder import ImageChoice
    from airflow_stepop.settings import DockerSettings

log = logging.getLogger(__name__)

TIMEOUT = (10, 60)  # seconds to connect, to read: no worker call waits for ever
ATTEMPTS = 5
RETRY_AFTER_MAX_S = 30.0
RBAC = (
    "The connection's account needs, in the namespace: create, get, list and delete on jobs; "
    "create and delete on secrets and services; get and list on pods and pods/log "
    "(docs/kubernetes.md, RBAC)."
)


def api_message(exc: Exception) -> str:
    """An API error's own message (its Status body), else the exception's text."""
    body = getattr(exc, "body", None)
    try:
        return json.loads(body).get("message") or str(exc)
    except (TypeError, ValueError, AttributeError):
        return str(exc)


def status_code(exc: Exception) -> int | None:
    return getattr(exc, "status", None)


def api_call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """One worker call to the API server: timed out (``TIMEOUT``), and asked again after a 429
    or a 5xx, when the server's ``Retry-After`` says (else 1, 2, 4, 8 s), ``ATTEMPTS`` times at
    most. A create asked again may find what its first try made: the caller's 409 path takes
    it as this try's own."""
    for attempt in range(ATTEMPTS):
        try:
            return method(*args, _request_timeout=TIMEOUT, **kwargs)
        except Exception as exc:
            if status_code(exc) not in TRANSIENT_STATUS or attempt == ATTEMPTS - 1:
                raise
            time.sleep(_retry_after(exc, attempt))
    raise AssertionError("unreachable")


def _retry_after(exc: Exception, attempt: int) -> float:
    headers = getattr(exc, "headers", None) or {}
    try:
        return min(RETRY_AFTER_MAX_S, max(0.0, float(headers.get("Retry-After"))))
    except (TypeError, ValueError):
        return float(min(8, 2**attempt))


class KubernetesBackend(KubernetesTriggererCalls, StepBackend):
    """Runs steps as Jobs on the cluster of a cncf.kubernetes connection."""

    # pods on a warm cluster start in seconds: 1, 2, 4 s... then poll_interval
    first_poll_seconds = 1.0
    billing_xcom_key = "kubernetes_billing"

    def __init__(
        self,
        kubernetes_conn_id: str | None = "kubernetes_default",
        job: KubernetesJobConfig | None = None,
        storage_conn_id: str | None = None,
    ) -> None:
        self.kubernetes_conn_id = kubernetes_conn_id
        self.job = job
        self.storage_conn_id = storage_conn_id
        self._access = None
        self._client = None
        self._sync: Any = None
        self._pods = {}
        self._ended = set()
        self._stopped = set()
        self._stamps = {}
        self._followers = {}
        self._stopping = {}
        self._refusals = {}

    def serialize(self) -> dict[str, Any]:
        return {"kubernetes_conn_id": self.kubernetes_conn_id}

    # ---- clients -----------------------------------------------------------------------

    def _apis(self) -> tuple[Any, Any]:
        """(BatchV1Api, CoreV1Api) of the worker, on the connection's own configuration."""
        from kubernetes import client

        if self._sync is None:
            self._sync = sync_client(self._access or read_access(self.kubernetes_conn_id))
        return client.BatchV1Api(self._sync), client.CoreV1Api(self._sync)

    def _plain(self, obj: Any) -> dict[str, Any]:
        """An API model as the API's JSON (camelCase), what ``job.py`` reads."""
        return self._sync.sanitize_for_serialization(obj)

    # ---- worker side -------------------------------------------------------------------

    def prepare(self, request: JobRequest) -> PreparedJob:
        """Decide the image, sign the pod's transfers and make the Job's three objects."""
        if self.job is None or self.job.namespace is None:
            raise RuntimeError("KubernetesBackend.prepare needs a completed job configuration")
        job = self.job
        self._check_namespace(job.namespace)
        storage = self._storage()
        spec = read_staged_spec(storage, request)
        image = self._image(request)
        shared_volume = job.artifact_volume is not None
        output_uri = request.run_uri if shared_volume else f"{request.run_uri.rstrip('/')}/output"
        plan = None
        if not shared_volume:
            signer = signer_for(request.run_uri, self.storage_conn_id)
            expires = transfer.url_lifetime(
                job.max_runtime_s, job.schedule_timeout_s or 0, queued=job.queue_name is not None
            )
            ends = signer.credentials_end()
            if ends is not None and ends < time.time() + expires:
                log.warning(
                    "The artifact store's URLs for this step end at %s UTC with the session of "
                    "the credentials of %s, before the step may end: a step still running then "
                    "cannot upload its results. For long steps, give storage_conn_id longer-"
                    "lived credentials (a longer role session, or an IAM user's keys).",
                    time.strftime("%Y-%m-%d %H:%M", time.gmtime(ends)),
                    repr(self.storage_conn_id) if self.storage_conn_id else "the worker",
                )  # fmt: skip
            plan = transfer.plan(request, spec, storage, signer, output_uri=output_uri,
                                 expires_s=expires)  # fmt: skip
        name = manifest.job_name(request.job_name)
        launch = manifest.launch_document(request, name, job, output_uri=output_uri,
                                          transfer=plan)  # fmt: skip
        launch_bytes = transfer.secret_bytes(launch)
        entry_bytes = (Path(__file__).parent / "entry.py").read_bytes()
        body = manifest.job_manifest(request, name, job, image=image.reference,
                                     output_uri=output_uri, entry=entry_bytes,
                                     launch=launch_bytes)  # fmt: skip
        labels = manifest.our_labels(request, job)
        secret = manifest.secret(name, job.namespace, labels, {
            manifest.ENTRY_FILE: entry_bytes, manifest.LAUNCH_FILE: launch_bytes,
        })  # fmt: skip
        service = None
        if job.instance_count > 1:
            service = manifest.headless_service(name, job.namespace, labels)
        handle = {
            "job_id": name,
            "namespace": job.namespace,
            "task_key": request.task_key,
            "run_uri": request.run_uri,
            "output_uri": output_uri,
            "schedule_timeout_s": job.schedule_timeout_s,
            "image": image.reference,
            "machine": self._machine(request),
        }
        prepared = {"job": body, "secret": secret, "service": service, "handle": handle,
                    "try_id": request.try_id}  # fmt: skip
        return PreparedJob(prepared, image.build)

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """The Job, then its Secret and Service, each owned by it from its create on: they go
        with it, and no call ever changes them. The pods wait for the Secret to mount."""
        batch, core = self._apis()
        handle, namespace = body["handle"], body["handle"]["namespace"]
        name = body["job"]["metadata"]["name"]
        try:
            created = self._plain(api_call(batch.create_namespaced_job, namespace, body["job"]))
            attached = False
        except Exception as exc:
            if status_code(exc) != 409:
                raise self._refusal(exc, namespace) from exc
            created = self._plain(api_call(batch.read_namespaced_job, name, namespace))
            owner = _container_env(created).get(TRY_ID_ENV)
            if body.get("try_id") and owner != body["try_id"]:
                raise JobNameTakenError(name, owner) from None
            log.info("Job %s exists already; attaching to it", name)  # this try's lost create
            attached = True
        owners = manifest.owned_by(created)
        secret = {**body["secret"], "metadata": {**body["secret"]["metadata"],
                                                 "ownerReferences": owners}}  # fmt: skip
        made = self._create_owned(core.create_namespaced_secret, namespace, secret)
        if made and attached:  # a worker lost between the Job and its Secret: the Job checks
            self.stop({"job_id": name, "namespace": namespace})  # another launch document
            raise RuntimeError(
                f"Job {name} was created by an earlier attempt of this try without its Secret "
                "(its worker was lost in between), so its pods could never start: it is "
                "deleted, and the task's retry starts the step again."
            )
        if not made and not attached:  # left by a deleted Job of this name: not this Job's
            self._delete_quietly(core.delete_namespaced_secret, secret["metadata"]["name"],
                                 namespace)  # fmt: skip
            self._create_owned(core.create_namespaced_secret, namespace, secret)
        if body.get("service") is not None:
            service = {**body["service"], "metadata": {**body["service"]["metadata"],
                                                       "ownerReferences": owners}}  # fmt: skip
            self._create_owned(core.create_namespaced_service, namespace, service)
        log.info("Job %s in namespace %s: %s, image %s", name, namespace, handle["machine"],
                 handle["image"])  # fmt: skip
        return dict(handle)

    def _create_owned(self, create: Any, namespace: str, obj: dict[str, Any]) -> bool:
        """Create an object the Job owns; False when one of its name is there already (the
        Job's own, from an earlier attempt of this try: a new name is a new Job)."""
        try:
            api_call(create, namespace, obj)
        except Exception as exc:
            if status_code(exc) == 409:
                return False
            raise self._refusal(exc, namespace) from exc
        return True

    def _refusal(self, exc: Exception, namespace: str) -> Exception:
        """The API's refusal of a create, in words that say what to change."""
        code, message = status_code(exc), api_message(exc)
        if code == 404 and "namespaces" in message:
            return SettingsError(
                f"The namespace {namespace!r} does not exist on the cluster of connection "
                f"{self.kubernetes_conn_id!r}: create it (kubectl create namespace "
                f"{namespace}), or set namespace= or [stepop] kubernetes_namespace to one that "
                "exists."
            )
        if code in (401, 403):
            return SettingsError(f"The cluster refused the step's objects ({message}). {RBAC}")
        if code in (400, 422):
            return service_refusal("Kubernetes", message)
        return exc

    def _check_namespace(self, namespace: str) -> None:
        """A namespace that does not exist is refused before anything is signed or built; an
        account that may not read namespaces (most may not) is not refused for that."""
        _, core = self._apis()
        try:
            api_call(core.read_namespace, namespace)
        except Exception as exc:
            if status_code(exc) == 404:
                raise self._refusal(exc, namespace) from None
            if status_code(exc) not in (401, 403):
                raise

    @staticmethod
    def _delete_quietly(delete: Any, name: str, namespace: str) -> None:
        try:
            api_call(delete, name, namespace)
        except Exception as exc:
            if status_code(exc) != 404:
                log.warning("Could not delete %s in %s: %s", name, namespace, api_message(exc))

    def _storage(self) -> Any:
        from airflow_stepop.artifacts.storage import worker_storage

        return worker_storage(self.storage_conn_id)

    def _image(self, request: JobRequest) -> ImageChoice:
        """``image_uri`` as given, else the ``DockerSettings`` image, built by the worker's
        engine on a registry miss and pushed where the cluster pulls from."""
        from airflow_stepop.images import builder
        from airflow_stepop.images.registry import Registry

        assert self.job is not None
        if self.job.image_uri:
            return builder.ImageChoice(self.job.image_uri)
        if request.docker is None:
            raise SettingsError("A Kubernetes step needs image_uri= or docker=DockerSettings(...)")

        def registry() -> Registry:
            if not self.job or not self.job.image_repository:
                raise SettingsError(
                    "The step's DockerSettings need an image built, and a Kubernetes step "
                    "pushes it to a registry the cluster pulls from: set image_repository= (or "
                    "[stepop] kubernetes_image_repository), e.g. 'registry.example.com/ml/env', "
                    "or give image_uri= an image that has what the step needs."
                )
            return Registry(self.job.image_repository)

        return builder.service_image(request.docker, registry, mode="engine")

    def _machine(self, request: JobRequest) -> str:
        """What the task log says the step runs on: its pods and what each asks for."""
        assert self.job is not None
        pods = f"{self.job.instance_count} pod" + ("s" if self.job.instance_count > 1 else "")
        wanted = request.resources.shown() if request.resources is not None else "no requests"
        return f"{pods}, {wanted}"

    def find_active(self, task_key: str) -> dict[str, Any] | None:
        assert self.job is not None and self.job.namespace is not None
        batch, _ = self._apis()
        list_limiter(self.poll_group()).acquire()
        answer = self._plain(api_call(
            batch.list_namespaced_job, self.job.namespace,
            label_selector=manifest.task_selector(task_key), limit=50,
        ))  # fmt: skip
        for job in answer.get("items") or []:
            if _container_env(job).get(manifest.TASK_KEY_ENV) != task_key:
                continue  # labels anyone may set: the env, fixed at the create, says whose
            status = job_states.job_status(job, [], schedule_timeout_s=float("inf"))
            if not status.terminal and not status.stopping:
                return self.handle_from_job(job)
        return None

    def handle_from_job(self, job: dict[str, Any]) -> dict[str, Any]:
        """A handle made from the Job alone: its pod template's environment, which no one can
        change after the create, says whose it is and where its files are."""
        env = _container_env(job)
        assert self.job is not None
        return {
            "job_id": job["metadata"]["name"],
            "namespace": job["metadata"]["namespace"],
            "task_key": env.get(manifest.TASK_KEY_ENV, ""),
            "run_uri": env.get(manifest.RUN_URI_ENV, ""),
            "output_uri": env.get(manifest.OUTPUT_URI_ENV, ""),
            "schedule_timeout_s": self.job.schedule_timeout_s or 0.0,
        }

    def _read(self, namespace: str, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A Job and the pods it owns (a pod's labels alone anyone may set)."""
        batch, core = self._apis()
        job = self._plain(api_call(batch.read_namespaced_job, name, namespace))
        pods = self._plain(
            api_call(core.list_namespaced_pod, namespace, label_selector=f"{JOB_NAME_LABEL}={name}")
        )
        return job, job_states.owned_pods(job, pods.get("items") or [])  # fmt: skip

    def status(self, handle: dict[str, Any]) -> JobStatus:
        job, pods = self._read(handle["namespace"], handle["job_id"])
        return job_states.job_status(job, pods, schedule_timeout_s=float(
            handle.get("schedule_timeout_s") or float("inf")))  # fmt: skip

    def job_record(self, job_id: str) -> JobRecord:
        """The Job in this backend's namespace; the spec's sha256 from its pod template's
        environment, which no one can change after the create."""
        assert self.job is not None and self.job.namespace is not None
        job, pods = self._read(self.job.namespace, job_id)
        status = job_states.job_status(job, pods, schedule_timeout_s=float("inf"))
        return JobRecord(status, _container_env(job).get(SPEC_SHA256_ENV),
                         self.handle_from_job(job))  # fmt: skip

    def stop(self, handle: dict[str, Any]) -> None:
        batch, _ = self._apis()
        try:
            api_call(batch.delete_namespaced_job, handle["job_id"], handle["namespace"],
                     propagation_policy="Foreground")  # fmt: skip
        except Exception as exc:
            if status_code(exc) != 404:
                raise

    def release(self, handle: dict[str, Any]) -> None:
        """The finished Job's Secret (its signed URLs) goes now, not with the Job's TTL."""
        _, core = self._apis()
        name = manifest.secret_name(handle["job_id"])
        self._delete_quietly(core.delete_namespaced_secret, name, handle["namespace"])

    def is_gone(self, exc: Exception) -> bool:
        return status_code(exc) == 404

    def billing(self, details: dict[str, Any]) -> dict[str, Any] | None:
        return job_states.billing(details)

    def environment_id(self, docker: DockerSettings | None) -> str:
        if self.job is not None and self.job.image_uri:
            return f"image:{self.job.image_uri}"
        return super().environment_id(docker)


def _container_env(job: dict[str, Any]) -> dict[str, str]:
    """The step container's environment as the Job's pod template holds it."""
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = template.get("containers") or [{}]
    return {e.get("name"): e.get("value") for e in containers[0].get("env") or []}
