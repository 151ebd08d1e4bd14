"""Kubernetes arguments: Kubernetes' own shapes refused at parse time, defaults read at run."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_stepop.backends.kubernetes.config import DEFAULT_RUNTIME_S, KubernetesJobConfig
from airflow_stepop.settings import ResourceSettings, SettingsError

OWNER = "KubernetesStepOperator(task_id='train')"
IMAGE = "registry.example.com/ml/train:1.0"


def config(**kwargs):
    values = {"image_uri": IMAGE, "resources": None, "docker": None, "artifact_root": None}
    return KubernetesJobConfig.from_arguments(OWNER, **{**values, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"namespace": "ML_Jobs"}, ["namespace='ML_Jobs'", "ml-jobs"]),
        ({"node_selector": {"pool": "gpu pool"}}, ["node_selector['pool']", "'gpu pool'"]),
        ({"node_selector": {"-bad": "x"}}, ["node_selector", "'-bad'"]),
        ({"labels": {"team": "x" * 64}}, ["labels['team']", "at most 63"]),
        ({"labels": {"stepop.io/task": "mine"}}, ["labels", "'stepop.io/task'", "another key"]),
        ({"labels": {"kueue.x-k8s.io/queue-name": "q"}}, ["queue-name", "another key"]),
        ({"annotations": {"a b": "x"}}, ["annotations", "'a b'"]),
        ({"tolerations": {"key": "x"}}, ["tolerations=", "list of dicts"]),
        ({"tolerations": [{"key": "gpu", "operator": "In"}]}, ["tolerations[0]['operator']"]),
        ({"tolerations": [{"key": "gpu", "effects": "NoSchedule"}]}, ["'effects'", "effect"]),
        ({"tolerations": [{"operator": "Equal", "value": "x"}]}, ["has no key", "Exists"]),
        (
            {"tolerations": [{"key": "g", "effect": "NoSchedule", "tolerationSeconds": 5}]},
            ["tolerationSeconds", "NoExecute"],
        ),
        ({"image_pull_secrets": ["Reg_Cred"]}, ["image_pull_secrets", "'Reg_Cred'"]),
        ({"gpu_resource": "gpu"}, ["gpu_resource='gpu'", "nvidia.com/gpu"]),
        ({"queue_name": "Team Queue"}, ["queue_name", "user-queue"]),
        ({"instance_count": 0}, ["instance_count=0", "1 to 100"]),
        ({"max_runtime": "1h"}, ["max_runtime"]),
        ({"ttl_after_finished": 60}, ["ttl_after_finished=60", "600"]),
        ({"artifact_root": "https://example.com/x"}, ["artifact_root", "s3://"]),
        (
            {"artifact_volume": {"emptyDir": {}}, "artifact_root": "file:///mnt/a"},
            ["artifact_volume", "persistentVolumeClaim"],
        ),
        (
            {"artifact_volume": {"hostPath": {"path": "/a"}}, "artifact_root": "s3://bucket-a/x"},
            ["artifact_volume", "drop artifact_volume"],
        ),
        (
            {"resources": ResourceSettings(gpu_type="MI300X")},
            ["gpu_type='MI300X'", "nvidia.com/gpu.product", "node_selector="],
        ),
        ({"image_uri": None}, ["needs an image", "image_uri="]),
    ],
)
def test_a_wrong_argument_is_refused_at_parse_naming_it(kwargs, names):
    with pytest.raises(SettingsError) as refused:
        config(**kwargs)
    message = str(refused.value)
    assert OWNER in message or "ResourceSettings" in message
    for part in names:
        assert part in message


def test_well_formed_arguments_are_kept():
    job = config(
        namespace="ml-jobs",
        node_selector={"cloud.google.com/gke-nodepool": "gpu-pool"},
        tolerations=[
            {
                "key": "dedicated",
                "operator": "Equal",
                "value": "ml",
                "effect": "NoExecute",
                "tolerationSeconds": 60,
            }
        ],  # fmt: skip
        image_pull_secrets="regcred",
        labels={"team": "vision"},
        annotations={"example.com/owner": "ana@example.com"},
        queue_name="user-queue",
        instance_count=2,
        max_runtime=timedelta(hours=2),
        resources=ResourceSettings(gpu_type="a100"),
    )
    assert job.namespace == "ml-jobs"
    assert job.tolerations[0]["tolerationSeconds"] == 60
    assert job.image_pull_secrets == ("regcred",)
    assert job.max_runtime_s == 7200
    assert (job.instance_count, job.queue_name) == (2, "user-queue")


def test_the_runtime_limit_follows_the_tasks_timeout_else_a_week():
    assert config(execution_timeout=timedelta(minutes=10)).max_runtime_s == 900
    assert config().max_runtime_s == DEFAULT_RUNTIME_S


def test_defaults_come_from_the_options_then_the_connection(monkeypatch):
    job = config()
    done = job.completed(OWNER, artifact_root="s3://b/stepop", connection_namespace="team-a",
                         image_uri=IMAGE)  # fmt: skip
    assert done.namespace == "team-a"
    assert (done.gpu_resource, done.gpu_label) == ("nvidia.com/gpu", "nvidia.com/gpu.product")
    assert done.schedule_timeout_s == 1800
    monkeypatch.setenv("AIRFLOW__STEPOP__KUBERNETES_NAMESPACE", "ml")
    monkeypatch.setenv("AIRFLOW__STEPOP__KUBERNETES_SCHEDULE_TIMEOUT", "60")
    done = job.completed(OWNER, artifact_root="s3://b/stepop", connection_namespace="team-a",
                         image_uri=IMAGE)  # fmt: skip
    assert (done.namespace, done.schedule_timeout_s) == ("ml", 60)
    assert (
        config(namespace="x")
        .completed(OWNER, artifact_root="s3://b", connection_namespace=None, image_uri=IMAGE)
        .namespace
        == "x"
    )


def test_a_root_on_the_workers_disk_needs_a_shared_volume():
    with pytest.raises(SettingsError, match="artifact_volume=") as refused:
        config().completed(OWNER, artifact_root="file:///opt/airflow/stepop-artifacts",
                           connection_namespace=None, image_uri=IMAGE)  # fmt: skip
    assert "a pod on another node cannot read it" in str(refused.value)
    shared = config(artifact_volume={"persistentVolumeClaim": {"claimName": "artifacts"}})
    done = shared.completed(OWNER, artifact_root="file:///mnt/artifacts",
                            connection_namespace=None, image_uri=IMAGE)  # fmt: skip
    assert done.artifact_path == "/mnt/artifacts"


@pytest.mark.parametrize("value", ["registry.example.com/ml/env:v1", "not a repo", "repo\n"])
def test_a_wrong_image_repository_option_is_refused_naming_it(monkeypatch, value):
    monkeypatch.setenv("AIRFLOW__STEPOP__KUBERNETES_IMAGE_REPOSITORY", value)
    with pytest.raises(SettingsError, match=r"\[stepop\] kubernetes_image_repository=") as refused:
        config().completed(OWNER, artifact_root="s3://b/stepop", connection_namespace=None,
                           image_uri=IMAGE)  # fmt: skip
    assert "registry.example.com/ml/env" in str(refused.value)


def test_an_abfs_root_is_signed_and_reached_with_ambient_credentials_unless_told(monkeypatch):
    from airflow_stepop.operators.kubernetes import KubernetesStepOperator

    for root in ("abfs://data/stepop", "abfss://data/stepop", "az://data/stepop"):
        done = config(artifact_root=root).completed(
            OWNER, artifact_root=root, connection_namespace=None, image_uri=IMAGE
        )
        assert done.artifact_path is None  # signed URLs, no volume
    with pytest.raises(SettingsError, match=r"s3://, gs:// and abfs://"):
        config().completed(OWNER, artifact_root="hdfs://nn/stepop", connection_namespace=None,
                           image_uri=IMAGE)  # fmt: skip

    operator = KubernetesStepOperator(
        task_id="train", python_callable=lambda: None, image_uri=IMAGE,
        artifact_root="abfs://data/stepop",
    )  # fmt: skip
    assert operator.storage_conn_id is None  # adlfs's ambient credentials, as Azure ML steps
    told = KubernetesStepOperator(
        task_id="train", python_callable=lambda: None, image_uri=IMAGE,
        artifact_root="abfs://data/stepop", storage_conn_id="adls_ml",
    )  # fmt: skip
    assert told.storage_conn_id == "adls_ml"


def test_an_abfs_root_naming_its_account_is_refused_with_the_form_that_works():
    root = "abfs://data@myaccount.dfs.core.windows.net/stepop"
    with pytest.raises(SettingsError, match=r"abfs://<container>/<path>") as refused:
        config(artifact_root=root).completed(
            OWNER, artifact_root=root, connection_namespace=None, image_uri=IMAGE
        )
    assert root in str(refused.value) and "storage_conn_id" in str(refused.value)
