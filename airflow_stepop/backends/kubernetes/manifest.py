"""The objects of one step on a cluster: its Job, the Secret its pods read, and (for several
pods) the headless Service that names them. Pure functions, unit-tested; the API calls are the
backend's.

* **Job** (``batch/v1``): ``backoffLimit: 0`` (Airflow's retries rule, not the Job's),
  ``activeDeadlineSeconds`` (``max_runtime``), ``ttlSecondsAfterFinished``; an Indexed Job of
  ``instance_count`` pods when there are several; created suspended with the Kueue queue label
  when ``queue_name`` is set (Kueue admits it).
* **Identity**: the name is the request's (``naming.job_name``) in Kubernetes' lowercase
  alphabet, short enough for ``<job>-<index>`` host names (``job_name``). Labels say who
  manages it and which task instance it runs (``stepop.io/task``, a hash: re-attach and the
  poller's List select on it) and carry the Airflow ids in label form; annotations say the
  same in full, for people. What re-attach and the step cache trust is the step container's
  environment, which no one can change after the create: the try's id, the task key, the
  spec's sha256 and where the run's files are.
* **Pod**: one container, ``step``, whose command is the bootstrap (``backends/bootstrap.py``)
  checking the entry script and its launch document, both in the Secret, mounted read-only at
  ``SECRET_DIR``. The signed URLs are in the launch document: never in the spec or the env.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.bootstrap import (
    CheckedFile,
    bootstrap_arguments,
    bootstrap_environment,
    sha256_of,
)
from airflow_stepop.backends.kubernetes import hardware
from airflow_stepop.backends.kubernetes.config import KUEUE_QUEUE_LABEL, KubernetesJobConfig
from airflow_stepop.backends.kubernetes.job import CONTAINER
from airflow_stepop.backends.naming import task_digest

NAME_MAX = 52  # <job>-<index> host names and the pods' job-name label stay within 63
SECRET_DIR = "/var/run/stepop"
ENTRY_FILE = "stepop_entry.py"
LAUNCH_FILE = "stepop_launch.json"
MANAGED_BY = ("app.kubernetes.io/managed-by", "airflow-stepop")
TASK_LABEL = "stepop.io/task"
AIRFLOW_LABELS = ("dag_id", "task_id", "run_id", "map_index")
TRY_ID = "stepop.io/try-id"
TASK_KEY = "stepop.io/task-key"
SPEC_SHA256 = "stepop.io/spec-sha256"
RUN_URI = "stepop.io/run-uri"
OUTPUT_URI = "stepop.io/output-uri"
# The same facts in the step container's environment, which no one can change after the
# create (annotations anyone who may patch Jobs can): what re-attach and the step cache read.
TASK_KEY_ENV, RUN_URI_ENV, OUTPUT_URI_ENV = "STEPOP_TASK_KEY", "STEPOP_RUN_URI", "STEPOP_OUTPUT_URI"
MASTER_PORT = 29500
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
_NAME_TAIL = re.compile(r"-[0-9a-f]{10}-t\d+(-[a-z0-9]+)?$")  # naming.job_name's hash and try


def job_name(request_name: str) -> str:
    """The Job's name for a request's (``naming.job_name``: ``<slug>-<hash>-t<try>[-<salt>]``,
    up to 63 characters, capitals kept): lowercase, at most ``NAME_MAX``, the slug cut first,
    starting with a letter (the headless Service's name, a DNS-1035 label, is the Job's). The
    same request name always gives the same Job name."""
    name = request_name.lower()
    tail = _NAME_TAIL.search(name)
    if len(name) > NAME_MAX and tail:  # keep the task's hash and the try whole
        head = name[: tail.start()][: NAME_MAX - len(tail.group()) - 1].rstrip("-")
        name = f"{head}{tail.group()}" if head else tail.group().lstrip("-")
    name = name[:NAME_MAX].rstrip("-")
    return name if name[:1].isalpha() else f"s{name}"[:NAME_MAX].rstrip("-")


def label_value(value: str) -> str:
    """Any text as a label value: a value that is not one already is cleaned, cut and given
    a hash of the whole text, so two long run ids never share one."""
    cleaned = _NOT_LABEL.sub("-", value).strip("-_.")
    if cleaned == value and len(value) <= 63:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:9]
    return f"{cleaned[:53].rstrip('-_.')}-{digest}".lstrip("-_.")


def task_selector(task_key: str) -> str:
    """The label selector of every Job of one task instance (all its tries)."""
    return f"{MANAGED_BY[0]}={MANAGED_BY[1]},{TASK_LABEL}={task_digest(task_key)}"


def our_labels(request: JobRequest, job: KubernetesJobConfig) -> dict[str, str]:
    labels = dict(job.labels)
    labels[MANAGED_BY[0]] = MANAGED_BY[1]
    labels[TASK_LABEL] = task_digest(request.task_key)
    for key in AIRFLOW_LABELS:
        if key in request.labels:
            labels[f"stepop.io/{key.replace('_', '-')}"] = label_value(str(request.labels[key]))
    return labels


def _annotations(request: JobRequest, job: KubernetesJobConfig, output_uri: str) -> dict:
    return {
        **job.annotations,
        TRY_ID: request.try_id,
        TASK_KEY: request.task_key,
        SPEC_SHA256: request.spec_sha256,
        RUN_URI: request.run_uri,
        OUTPUT_URI: output_uri,
    }


def secret_name(name: str) -> str:
    return f"{name}-stepop"


def launch_document(
    request: JobRequest, name: str, job: KubernetesJobConfig, *, output_uri: str,
    transfer: dict[str, Any] | None,
) -> dict[str, Any]:  # fmt: skip
    """What the entry script reads (``entry.py``): the step's URIs, the bundle's digest, the
    rank layout and the transfer document (None: a shared volume)."""
    return {
        "spec_uri": request.spec_uri,
        "run_uri": request.run_uri,
        "code_uri": request.code_uri,
        "code_sha256": request.code_sha256,
        "output_uri": output_uri,
        "checkpoint_uri": request.checkpoint_uri,
        "world": {
            "size": job.instance_count,
            "master_addr": f"{name}-0.{name}" if job.instance_count > 1 else "localhost",
        },
        "transfer": transfer,
    }


def secret(name: str, namespace: str, labels: dict[str, str], files: dict[str, bytes]) -> dict:
    """The Secret of one Job's pods (its files as ``stringData``: text, JSON and Python)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(name), "namespace": namespace, "labels": labels},
        "type": "Opaque",
        "stringData": {key: value.decode() for key, value in files.items()},
    }


def headless_service(name: str, namespace: str, labels: dict[str, str]) -> dict:
    """The Service that gives an Indexed Job's pods DNS names: ``<job>-<index>.<job>``."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": {"batch.kubernetes.io/job-name": name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": MASTER_PORT}],
        },
    }


def owned_by(job: dict[str, Any]) -> list[dict[str, Any]]:
    """ownerReferences to a created Job: its Secret and Service go when it goes."""
    meta = job["metadata"]
    return [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}]


def _environment(request: JobRequest, output_uri: str) -> list[dict[str, str]]:
    env = {**request.environment, "PYTHONUNBUFFERED": "1"}
    env.update(bootstrap_environment(request.spec_sha256, request.try_id))  # after the user's
    env.update({TASK_KEY_ENV: request.task_key, RUN_URI_ENV: request.run_uri,
                OUTPUT_URI_ENV: output_uri})  # fmt: skip
    return [{"name": key, "value": value} for key, value in env.items()]


def _pod_spec(
    request: JobRequest, name: str, job: KubernetesJobConfig, image: str, checked: list,
    output_uri: str,
) -> dict[str, Any]:  # fmt: skip
    assert job.gpu_resource is not None and job.gpu_label is not None  # completed()
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": ["python3"],
        "args": bootstrap_arguments(checked, [ENTRY_FILE, LAUNCH_FILE]),
        "env": _environment(request, output_uri),
        "volumeMounts": [{"name": "stepop", "mountPath": SECRET_DIR, "readOnly": True}],
    }
    resources = hardware.container_resources(request.resources, job.gpu_resource)
    if resources:
        container["resources"] = resources
    volumes: list[dict[str, Any]] = [
        {"name": "stepop", "secret": {"secretName": secret_name(name), "defaultMode": 0o444}}
    ]
    if job.artifact_volume is not None and job.artifact_path is not None:
        volumes.append({"name": "artifacts", **job.artifact_volume})
        container["volumeMounts"].append({"name": "artifacts", "mountPath": job.artifact_path})
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": volumes,
    }
    tolerations = list(job.tolerations)
    gpus = request.resources is not None and bool(request.resources.gpu_count)
    toleration = hardware.gpu_toleration(job.gpu_resource)
    if gpus and toleration not in tolerations:
        tolerations.append(toleration)
    if tolerations:
        spec["tolerations"] = tolerations
    if job.node_selector:
        spec["nodeSelector"] = dict(job.node_selector)
    if request.resources is not None and request.resources.gpu_type:
        products = hardware.gpu_products("The step", job.gpu_label, request.resources.gpu_type)
        spec["affinity"] = hardware.gpu_affinity(job.gpu_label, products)
    if job.service_account_name:
        spec["serviceAccountName"] = job.service_account_name
    else:  # the pod needs no API access: no token of the namespace's default account
        spec["automountServiceAccountToken"] = False
    if job.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": secret} for secret in job.image_pull_secrets]
    if job.priority_class_name:
        spec["priorityClassName"] = job.priority_class_name
    if job.instance_count > 1:
        spec["subdomain"] = name
    return spec


def job_manifest(
    request: JobRequest, name: str, job: KubernetesJobConfig, *, image: str,
    output_uri: str, entry: bytes, launch: bytes,
) -> dict[str, Any]:  # fmt: skip
    """The Job of one step; ``entry`` and ``launch`` are the Secret's two files, whose
    digests the pod's command carries."""
    labels = our_labels(request, job)
    checked = [
        CheckedFile(ENTRY_FILE, f"{SECRET_DIR}/{ENTRY_FILE}", sha256_of(entry)),
        CheckedFile(LAUNCH_FILE, f"{SECRET_DIR}/{LAUNCH_FILE}", sha256_of(launch)),
    ]
    annotations = _annotations(request, job, output_uri)
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "activeDeadlineSeconds": job.max_runtime_s,
        "ttlSecondsAfterFinished": job.ttl_after_finished_s,
        "template": {
            "metadata": {"labels": labels, "annotations": dict(job.annotations)},
            "spec": _pod_spec(request, name, job, image, checked, output_uri),
        },
    }
    if job.instance_count > 1:
        spec.update(
            completionMode="Indexed",
            completions=job.instance_count,
            parallelism=job.instance_count,
        )
    if job.queue_name:
        labels = {**labels, KUEUE_QUEUE_LABEL: job.queue_name}
        spec["suspend"] = True  # Kueue admits it; created running, its pods could start first
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": job.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }
