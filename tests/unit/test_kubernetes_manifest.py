"""The Job, Secret and Service of a Kubernetes step, as the API server would get them."""

from __future__ import annotations

import hashlib
import json
import re

from airflow_stepop.backends import naming
from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.kubernetes import manifest
from airflow_stepop.backends.kubernetes.config import KubernetesJobConfig
from airflow_stepop.backends.naming import task_key
from airflow_stepop.settings import ResourceSettings

DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DNS_1035 = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"  # a Service's name
LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
SIGNED = "https://bucket.s3.amazonaws.com/k?X-Amz-Signature=0123abcd"
KEY = task_key("Train_Models", "manual__2026-11-29T10:00:00+00:00", "Fit.Model", 3, "ti-9")


def request(**kwargs):
    values = {
        "job_name": "ignored",
        "task_key": KEY,
        "spec_uri": "s3://b/stepop/runs/r/spec.json",
        "run_uri": "s3://b/stepop/runs/r",
        "code_uri": "s3://b/stepop/code/" + "a" * 64 + ".zip",
        "spec_sha256": "c" * 64,
        "try_id": "0193-try",
        "environment": {"DATA": "x"},
        "labels": {"dag_id": "Train_Models", "task_id": "Fit.Model",
                   "run_id": "manual__2026-11-29T10:00:00+00:00", "map_index": "3"},
    }  # fmt: skip
    return JobRequest(**{**values, **kwargs})


def job_config(**kwargs):
    values = {"image_uri": "img:1", "docker": None, "resources": None, "artifact_root": None}
    base = KubernetesJobConfig.from_arguments("op", **{**values, **kwargs})
    return base.completed("op", artifact_root="s3://b/stepop", connection_namespace="ml",
                          image_uri="img:1")  # fmt: skip


def build(req, job, name="train-models-fit-model-abc-t1"):
    launch = manifest.launch_document(
        req, name, job, output_uri=req.run_uri + "/output",
        transfer={"downloads": [{"url": SIGNED, "path": "code.zip"}]},
    )  # fmt: skip
    launch_bytes = json.dumps(launch).encode()
    body = manifest.job_manifest(req, name, job, image="img:1", output_uri=req.run_uri + "/output",
                                 entry=b"print('entry')", launch=launch_bytes)  # fmt: skip
    return body, launch_bytes


def test_a_gpu_step_limits_its_gpus_and_lands_on_that_model():
    req = request(resources=ResourceSettings(gpu_type="A100", memory="16GiB", cpu_count=8))
    body, _ = build(req, job_config(resources=req.resources))
    pod = body["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "16Gi", "nvidia.com/gpu": "1"},
    }
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    [expression] = term["matchExpressions"]
    assert expression["key"] == "nvidia.com/gpu.product" and expression["operator"] == "In"
    assert "NVIDIA-A100-SXM4-80GB" in expression["values"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_a_cpu_step_asks_for_no_gpu_and_tolerates_no_gpu_taint():
    req = request(resources=ResourceSettings(cpu_count=2))
    pod = build(req, job_config())[0]["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "2"}}
    assert "tolerations" not in pod and "affinity" not in pod


def test_the_job_runs_once_within_its_limits_and_is_cleaned_up():
    body, _ = build(request(), job_config(max_runtime=600, ttl_after_finished=3600))
    spec = body["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["activeDeadlineSeconds"] == 600
    assert spec["ttlSecondsAfterFinished"] == 3600
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert "completionMode" not in spec and "suspend" not in spec
    assert body["metadata"]["namespace"] == "ml"


def test_signed_urls_stay_in_the_secret_and_the_command_checks_its_files():
    body, launch = build(request(), job_config())
    assert "X-Amz-Signature" not in json.dumps(body)
    secret = manifest.secret("j", "ml", {}, {manifest.LAUNCH_FILE: launch})
    assert SIGNED in secret["stringData"][manifest.LAUNCH_FILE]
    container = body["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert hashlib.sha256(launch).hexdigest() in args
    assert hashlib.sha256(b"print('entry')").hexdigest() in args
    assert f"{manifest.SECRET_DIR}/{manifest.LAUNCH_FILE}" in args
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["STEPOP_SPEC_SHA256"] == "c" * 64 and env["STEPOP_TRY_ID"] == "0193-try"
    assert env["DATA"] == "x"
    pod = body["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False  # no API token without a service account


def test_labels_find_the_task_instance_and_annotations_keep_its_full_identity():
    body, _ = build(request(), job_config(labels={"team": "vision"}))
    labels = body["metadata"]["labels"]
    for key, value in labels.items():
        assert re.fullmatch(LABEL_VALUE, value), (key, value)
    assert labels["team"] == "vision"
    assert labels["app.kubernetes.io/managed-by"] == "airflow-stepop"
    selector = dict(part.split("=") for part in manifest.task_selector(KEY).split(","))
    assert all(labels[k] == v for k, v in selector.items())
    assert body["spec"]["template"]["metadata"]["labels"] == labels  # the pods carry them too
    annotations = body["metadata"]["annotations"]
    assert annotations[manifest.TRY_ID] == "0193-try"
    assert annotations[manifest.TASK_KEY] == KEY
    assert annotations[manifest.RUN_URI] == "s3://b/stepop/runs/r"


def test_job_names_are_dns_labels_that_leave_room_for_pod_indexes():
    long_key = task_key("D" * 200, "r", "T_" * 100, -1)
    digit_key = task_key("2024_Backfill", "r", "Fit", -1)
    names = set()
    for key in (KEY, long_key, digit_key):
        for try_number, salt in ((1, ""), (12, ""), (1, "Q7x")):
            name = manifest.job_name(naming.job_name(key, try_number, salt=salt))
            assert re.fullmatch(DNS_1035, name) and len(name) <= manifest.NAME_MAX, name
            assert re.fullmatch(DNS_LABEL, f"{name}-99") and len(f"{name}-99-abcde") <= 63
            assert naming.task_digest(key) in name  # the task's hash survives every cut
            names.add(name)
    assert len(names) == 9  # every task, try and salt its own Job
    request_name = naming.job_name(KEY, 1)
    assert manifest.job_name(request_name) == manifest.job_name(request_name)


def test_label_values_of_any_text_are_valid_and_distinct():
    run_a = "manual__2026-11-29T10:00:00+00:00" + "x" * 80
    run_b = run_a + "y"
    values = {manifest.label_value(v) for v in (run_a, run_b)}
    assert len(values) == 2
    assert all(re.fullmatch(LABEL_VALUE, v) and len(v) <= 63 for v in values)
    assert manifest.label_value("plain-id") == "plain-id"


def test_several_instances_make_an_indexed_job_whose_pods_find_rank_zero():
    name = "train-t1"
    req = request()
    job = job_config(instance_count=3)
    body, launch = build(req, job, name)
    spec = body["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["template"]["spec"]["subdomain"] == name
    assert json.loads(launch)["world"] == {"size": 3, "master_addr": f"{name}-0.{name}"}
    service = manifest.headless_service(name, "ml", {})
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"batch.kubernetes.io/job-name": name}


def test_a_kueue_step_is_created_suspended_in_its_queue():
    body, _ = build(request(), job_config(queue_name="user-queue"))
    assert body["spec"]["suspend"] is True
    assert body["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "user-queue"


def test_a_file_root_is_mounted_where_the_worker_has_it():
    base = KubernetesJobConfig.from_arguments(
        "op", image_uri="img:1", docker=None, resources=None, artifact_root=None,
        artifact_volume={"persistentVolumeClaim": {"claimName": "artifacts"}},
    )  # fmt: skip
    job = base.completed("op", artifact_root="file:///mnt/stepop", connection_namespace=None,
                         image_uri="img:1")  # fmt: skip
    pod = build(request(run_uri="file:///mnt/stepop/runs/r"), job)[0]["spec"]["template"]["spec"]
    assert {"name": "artifacts", "persistentVolumeClaim": {"claimName": "artifacts"}} in pod[
        "volumes"
    ]
    mounts = pod["containers"][0]["volumeMounts"]
    assert {"name": "artifacts", "mountPath": "/mnt/stepop"} in mounts
