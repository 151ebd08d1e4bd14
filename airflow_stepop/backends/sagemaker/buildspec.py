"""The buildspec with which AWS CodeBuild builds a step's image, and its IAM documents.

The build first checks that the extracted archive holds exactly the files the worker wrote
(``BuildPlan.verify_script``: the archive lies where jobs can write, the buildspec travels in the
StartBuild request), then runs the plan's ``docker build``s (``images/build_context``) and
pushes the content-hashed tag; on ECR it logs in first with the project's service role.
Every value reaches the shell quoted (``shlex.quote``): a build argument's value is given as is.
"""

from __future__ import annotations

import json
import shlex

from airflow_stepop.images.build_context import BuildPlan, DockerBuild
from airflow_stepop.images.reference import ecr_match, registry_host

# CodeBuild's curated image with Docker; builds run in privileged mode (Docker in Docker).
BUILD_IMAGE = "aws/codebuild/standard:7.0"
IMAGE_VARIABLE = "STEPOP_IMAGE"  # the tag a build pushes, as the build itself carries it
ROLE_NAME = "airflow-stepop-codebuild"


def buildspec(plan: BuildPlan) -> str:
    """The buildspec (YAML; JSON is YAML) that builds ``plan`` and pushes its image."""
    host = registry_host(plan.reference)
    pre_build = []
    if ecr_match(host):
        pre_build.append(
            'aws ecr get-login-password --region "$AWS_REGION" | docker login --username AWS '
            f"--password-stdin {shlex.quote(host)}"
        )
    commands = [_docker_build(plan, build) for build in plan.builds]
    commands.append(f"docker push {shlex.quote(plan.reference)}")
    phases: dict[str, dict[str, list[str]]] = {"install": {"commands": [plan.verify_script()]}}
    if pre_build:
        phases["pre_build"] = {"commands": pre_build}
    phases["build"] = {"commands": commands}
    return json.dumps({"version": 0.2, "phases": phases}, indent=1)


def _docker_build(plan: BuildPlan, build: DockerBuild) -> str:
    words = ["docker", "build", "--tag", build.tag]
    if plan.network_mode:
        words += ["--network", plan.network_mode]
    for key, value in build.build_args.items():
        words += ["--build-arg", f"{key}={value}"]
    words += ["--file", f"{build.directory}/{build.dockerfile}", build.directory]
    return " ".join(shlex.quote(word) for word in words)


def trust_policy() -> str:
    """Who may assume the service role: CodeBuild."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "codebuild.amazonaws.com"},
                       "Action": "sts:AssumeRole"}],
    })  # fmt: skip


def role_policy(bucket: str) -> str:
    """What a build does: read its archive, write its log, push to ECR (docs/sagemaker.md)."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:GetObject", "s3:GetObjectVersion"],
             "Resource": f"arn:aws:s3:::{bucket}/*"},
            {"Effect": "Allow", "Action": ["logs:CreateLogGroup", "logs:CreateLogStream",
                                           "logs:PutLogEvents"],
             "Resource": "arn:aws:logs:*:*:log-group:/aws/codebuild/*"},
            {"Effect": "Allow", "Action": [
                "ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability",
                "ecr:InitiateLayerUpload", "ecr:UploadLayerPart", "ecr:CompleteLayerUpload",
                "ecr:PutImage", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"],
             "Resource": "*"},
        ],
    })  # fmt: skip
