"""SageMaker steps on a worker with no container engine: AWS CodeBuild builds their images."""

from __future__ import annotations

import pytest

from tests.integration.service_builds import PARENT, TASKS, prepare_mapped


def test_ten_mapped_tasks_needing_one_new_tag_start_one_codebuild_build(aws, monkeypatch):
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend
    from airflow_stepop.backends.sagemaker.config import SageMakerJobConfig

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # no engine answers this worker
    job = SageMakerJobConfig(
        role="arn:aws:iam::123456789012:role/r",
        instance_type="ml.m5.large",
        image_repository=f"{aws['registry']}/stepop-it-env",  # what the operator passes
    )

    prepared = prepare_mapped(SageMakerBackend(job=job), aws["root"], "aws_default")

    image = prepared[0].image_build.handle["image"]
    assert {p.body["request"]["AlgorithmSpecification"]["TrainingImage"] for p in prepared} == {
        image
    }
    assert len({p.image_build.handle["job_id"] for p in prepared}) == 1
    assert sum(bool(p.image_build.handle.get("joined")) for p in prepared) == TASKS - 1
    codebuild = AwsBaseHook(client_type="codebuild").conn
    ids = codebuild.list_builds_for_project(projectName="airflow-stepop-image-build")["ids"]
    builds = codebuild.batch_get_builds(ids=ids[:100])["builds"]
    of_this_tag = [
        b for b in builds
        if {"name": "STEPOP_IMAGE", "value": image, "type": "PLAINTEXT"}
        in b["environment"]["environmentVariables"]
    ]  # fmt: skip
    assert len(of_this_tag) == 1  # CodeBuild was asked for one build, whoever started it
    prepared[0].image_build.wait(poll_seconds=0.5, timeout=300)


def test_a_build_context_rewritten_in_the_store_before_the_build_fails_the_build(aws, monkeypatch):
    """A job can write the artifact root, where the context waits for the builder: the build
    checks the files against the worker's sums (carried in the buildspec) before any build."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    from airflow_stepop.backends.image_build import ImageBuildFailedError
    from airflow_stepop.backends.sagemaker.backend import SageMakerBackend
    from airflow_stepop.backends.sagemaker.config import SageMakerJobConfig
    from cloud.control import FakeControl

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    job = SageMakerJobConfig(role="arn:aws:iam::123456789012:role/r", instance_type="ml.m5.large",
                             image_repository=f"{aws['registry']}/stepop-it-env")  # fmt: skip
    codebuild = FakeControl(aws["env"]["STEPOP_CODEBUILD_ENDPOINT"])
    with codebuild.faulted({"kind": "provisioning_delay", "seconds": 3}):
        [prepared] = prepare_mapped(SageMakerBackend(job=job), aws["root"], "aws_default", 1)
        build = prepared.image_build.handle
        client = AwsBaseHook(client_type="codebuild").conn
        source = client.batch_get_builds(ids=[build["job_id"]])["builds"][0]["source"]
        bucket, key = source["location"].split("/", 1)
        aws["s3"].put_object(Bucket=bucket, Key=key, Body=_evil_zip())  # as a job could
    with pytest.raises(ImageBuildFailedError, match="failed"):
        prepared.image_build.wait(poll_seconds=0.5, timeout=300)
    found = client.batch_get_builds(ids=[build["job_id"]])["builds"][0]
    assert found["buildStatus"] == "FAILED"
    assert [p for p in found["phases"] if p.get("phaseStatus") == "FAILED"][0]["phaseType"] in (
        "INSTALL",
        "DOWNLOAD_SOURCE",
    )


def _evil_zip() -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        # it would build and be pushed under the step's tag, were the files not checked
        archive.writestr("stepop/Dockerfile", f"FROM {PARENT}\nRUN echo evil > /evil\n")
    return buffer.getvalue()
