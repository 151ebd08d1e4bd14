"""SageMaker steps on a worker with no container engine: AWS CodeBuild builds their images."""

from __future__ import annotations

from tests.integration.service_builds import TASKS, prepare_mapped


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
