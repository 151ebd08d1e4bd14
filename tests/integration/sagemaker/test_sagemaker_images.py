"""Environment images for SageMaker steps: built once, pushed, reused; jobs in containers."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.integration.sagemaker.conftest import dags, training_jobs, xcoms


@pytest.mark.container
def test_a_gpu_step_builds_its_image_once_and_runs_in_a_container(
    aws, ctl, docker_engine, registry_image, monkeypatch
):
    salt = uuid.uuid4().hex[:8]
    monkeypatch.setenv("STEPOP_TEST_IMAGE_SALT", salt)
    results = aws["results"]
    with ctl.in_mode("container"):
        first = dags().sm_gpu_step_v1().test()
        assert first.state == "success"
        job1 = [
            j for j in training_jobs("fit") if j["TrainingJobName"].startswith("sm-gpu-step-v1")
        ]
        image = job1[-1]["AlgorithmSpecification"]["TrainingImage"]
        built = docker_engine.images.get(image)

        second = dags().sm_gpu_step_v2().test()
        assert second.state == "success"

    assert json.loads((results / "v1.json").read_text()) == {"sum": 1000.0, "six": "1.17.0"}
    assert json.loads((results / "v2.json").read_text()) == {"sum": 2000.0, "six": "1.17.0"}
    assert image.startswith(f"{aws['registry']}/stepop-it-env:")
    assert job1[-1]["ResourceConfig"]["InstanceType"] == "ml.g4dn.xlarge"  # cheapest 1 GPU 16 GiB
    job2 = [j for j in training_jobs("fit") if j["TrainingJobName"].startswith("sm-gpu-step-v2")]
    assert job2[-1]["AlgorithmSpecification"]["TrainingImage"] == image
    assert docker_engine.images.get(image).id == built.id  # nothing was rebuilt
    assert docker_engine.images.get_registry_data(image).id  # and it is in the registry


def test_an_ecr_repository_is_created_on_demand_with_a_token_login(aws, ctl):
    import boto3

    from airflow_stepop.images.registry import prepare

    name = f"stepop-env-{uuid.uuid4().hex[:6]}"
    repository = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{name}"
    target = prepare(repository, aws_conn_id="aws_default", region_name=None)
    ecr = boto3.client("ecr", endpoint_url=aws["env"]["AWS_ENDPOINT_URL"])
    repos = ecr.describe_repositories(repositoryNames=[name])["repositories"]
    assert repos[0]["repositoryName"] == name
    assert target.repository == repository
    assert target.auth_config["username"] == "AWS" and target.auth_config["password"]
    assert prepare(repository, aws_conn_id="aws_default", region_name=None).auth_config


@pytest.mark.container
def test_a_parent_image_sagemaker_cannot_pull_is_copied_to_the_repository_and_runs(
    aws, ctl, docker_engine, registry_image, monkeypatch
):
    import docker.errors

    # The parent is an image of the engine, named without a registry (Docker Hub's namespace):
    # SageMaker could not pull it as it is.
    parent = aws["env"].get("STEPOP_TEST_BASE_IMAGE", "stepop-base/python:3.11-bookworm")
    try:
        docker_engine.images.get(parent)
    except docker.errors.ImageNotFound:
        docker_engine.images.pull(registry_image).tag(parent)
    repository = f"{aws['registry']}/stepop-it-copy-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("STEPOP_TEST_COPY_REPOSITORY", repository)

    run = dags().sm_parent_elsewhere().test()

    assert run.state == "success"
    assert json.loads((aws["results"] / "copied.json").read_text()) == "ran"
    job = [j for j in training_jobs("copied") if j["TrainingJobName"].startswith("sm-parent")]
    image = job[-1]["AlgorithmSpecification"]["TrainingImage"]
    assert image.startswith(f"{repository}:")  # a copy in the repository, not the parent
    assert docker_engine.images.get_registry_data(image).id  # pushed there


@pytest.mark.container
def test_a_step_with_a_built_image_runs_in_it_while_the_fake_runs_processes(
    aws, ctl, docker_engine, registry_image
):
    """The fake's default mode (process) runs a job with this virtualenv's packages; a step
    whose image was built runs in that image (a container), so it sees its pinned tabulate."""
    import tabulate

    assert tabulate.__version__ != "0.9.0"  # the virtualenv's own: what process mode would see
    assert ctl.mode() == "process"

    run = dags().sm_pinned_requirement().test()

    assert run.state == "success"
    assert xcoms(run)[("pinned", "return_value", -1)] == "0.9.0"
    job = [j for j in training_jobs("pinned") if j["TrainingJobName"].startswith("sm-pinned")]
    assert job[-1]["AlgorithmSpecification"]["TrainingImage"].startswith(
        f"{aws['registry']}/stepop-it-env:"
    )
