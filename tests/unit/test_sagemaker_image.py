"""Which images SageMaker can pull: an image_uri elsewhere is refused, a parent-only image copied.

SageMaker training jobs pull from Amazon ECR only (other registries need TrainingImageConfig in
VPC mode, which we do not set); the image repository's own registry counts too, which is how the
emulated cloud's registry stands in for ECR.
"""

from __future__ import annotations

import tarfile

import docker.errors
import pytest
from airflow.sdk import DAG

from airflow_stepop import DockerSettings, SageMakerStepOperator
from airflow_stepop.backends.sagemaker.image import service_can_pull
from airflow_stepop.images import builder
from airflow_stepop.images.registry import Registry
from airflow_stepop.settings import SettingsError

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
LOCAL = "127.0.0.1:5000"


@pytest.mark.parametrize(
    ("image", "repository", "pullable"),
    [
        (f"{ECR}/train:1", None, True),
        (f"{ECR}/team/train@sha256:{'a' * 64}", f"{LOCAL}/env", True),
        ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn/train:1", None, True),
        ("python:3.11-slim", None, False),  # Docker Hub
        ("python:3.11-slim", f"{ECR}/env", False),
        ("docker.io/library/python:3.11", None, False),
        ("pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime", None, False),
        ("ghcr.io/org/image:1", f"{ECR}/env", False),
        ("public.ecr.aws/docker/library/python:3.11", None, False),  # ECR Public: not ECR
        (f"{LOCAL}/stepop-base/python:3.11-bookworm", f"{LOCAL}/env", True),  # its registry
        (f"{LOCAL}/stepop-base/python:3.11-bookworm", None, False),  # default repository: ECR
        ("localhost/base:1", f"{LOCAL}/env", False),  # another host
    ],
)
def test_sagemaker_pulls_from_ecr_and_from_the_image_repositorys_registry(
    image, repository, pullable
):
    assert service_can_pull(image, repository) is pullable


def _op(**kwargs):
    with DAG("sm_images", schedule=None):
        return SageMakerStepOperator(task_id="t", python_callable=dict, **kwargs)


def test_an_image_uri_sagemaker_cannot_pull_fails_the_dag_at_parse_time():
    with pytest.raises(SettingsError) as err:
        _op(image_uri="python:3.11-slim")
    message = str(err.value)
    for words in (
        "SageMakerStepOperator(task_id='t').image_uri='python:3.11-slim'",
        "cannot pull",
        "Amazon ECR",
        "docker=DockerSettings(parent_image='python:3.11-slim')",
    ):
        assert words in message, message
    with pytest.raises(SettingsError, match=r"ECR or the image repository's registry '10.0.0.5'"):
        _op(image_uri="ghcr.io/org/image:1", image_repository="10.0.0.5/env")
    _op(image_uri=f"{ECR}/train:1")
    _op(image_uri=f"{LOCAL}/base:1", image_repository=f"{LOCAL}/env")


def test_the_configured_repository_counts_and_a_rendered_image_uri_is_checked_before_submit(
    monkeypatch,
):
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_ROLE", "r")
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", "s3://bucket/stepop")
    monkeypatch.setenv("AIRFLOW__STEPOP__SAGEMAKER_IMAGE_REPOSITORY", f"{LOCAL}/env")
    assert _op(image_uri=f"{LOCAL}/base:1")._job_config().image_uri == f"{LOCAL}/base:1"

    templated = _op(image_uri="{{ var.value.training_image }}")  # known only when rendered
    templated.image_uri = "python:3.11-slim"  # what rendering gave
    with pytest.raises(SettingsError, match=r"image_uri='python:3.11-slim' is an image"):
        templated.make_backend()  # the job's configuration: before anything is staged or sent


class _Engine:
    """A container engine that has nothing: records builds (their Dockerfile) and pushes."""

    def __init__(self) -> None:
        self.dockerfiles: dict[str, str] = {}
        self.pushed: list[str] = []
        self.images = self
        self.api = self

    def get(self, reference):
        raise docker.errors.ImageNotFound(reference)

    def get_registry_data(self, reference, auth_config=None):
        raise docker.errors.NotFound(reference)

    def build(self, tag, fileobj, **kwargs):
        with tarfile.open(fileobj=fileobj) as tar:
            self.dockerfiles[tag] = tar.extractfile("Dockerfile").read().decode()
        yield {"stream": "done\n"}

    def push(self, repository, tag, **kwargs):
        self.pushed.append(f"{repository}:{tag}")
        return iter([{"status": "pushed"}])


def test_service_image_copies_a_parent_the_service_cannot_pull_and_keeps_one_it_can(
    monkeypatch, tmp_path
):
    monkeypatch.setattr(builder, "lock_dir", lambda: tmp_path)
    parent_only = DockerSettings(parent_image="python:3.11-slim")

    def no_registry():
        raise AssertionError("a parent the service pulls needs no registry")

    # Vertex AI and Azure ML pass no predicate: their services pull public images
    assert builder.service_image(parent_only, no_registry) == ("python:3.11-slim", False, None)
    assert builder.service_image(parent_only, no_registry, pullable=lambda _: True) == (
        "python:3.11-slim",
        False,
        None,
    )

    engine = _Engine()
    image, built, _ = builder.service_image(
        parent_only, lambda: Registry(f"{LOCAL}/env"), engine, pullable=lambda _: False
    )
    assert built and image.startswith(f"{LOCAL}/env:")
    assert engine.dockerfiles == {image: "FROM python:3.11-slim\n"}
    assert engine.pushed == [image]
    # content-hashed: another parent, another tag; the same parent, the same tag
    other, _, _ = builder.service_image(
        DockerSettings(parent_image="python:3.12-slim"),
        lambda: Registry(f"{LOCAL}/env"),
        engine,
        pullable=lambda _: False,
    )
    assert other != image
    assert builder.image_reference(parent_only, f"{LOCAL}/env", copy=True) == image


def test_a_registry_s_password_is_not_in_its_repr():
    """A Registry may reach a log line or a traceback's locals: its token must not."""
    registry = Registry(f"{LOCAL}/env", {"username": "AWS", "password": "TOKEN-SECRET-1"})
    assert "TOKEN-SECRET-1" not in repr(registry) and f"{LOCAL}/env" in repr(registry)
