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
    """The buildspec (YAML; JSON is YAML) that builds ``plan`` and pushes its image. Its
    commands run in bash (the check's process substitution needs it; CodeBuild's default shell
    on Linux is sh)."""
    host = registry_host(plan.reference)
    pre_build = []
    if found := ecr_match(host):  # the registry's own region, whatever the build's is
        pre_build.append(
            f"aws ecr get-login-password --region {shlex.quote(found['region'])} | docker login "
            f"--username AWS --password-stdin {shlex.quote(host)}"
        )
    commands = [_docker_build(plan, build) for build in plan.builds]
    commands.append(f"docker push {shlex.quote(plan.reference)}")
    phases: dict[str, dict[str, list[str]]] = {"install": {"commands": [plan.verify_script()]}}
    if pre_build:
        phases["pre_build"] = {"commands": pre_build}
    phases["build"] = {"commands": commands}
    spec = {"version": 0.2, "env": {"shell": "bash"}, "phases": phases}
    return json.dumps(spec, indent=1)


def _docker_build(plan: BuildPlan, build: DockerBuild) -> str:
    words = ["docker", "build", "--tag", build.tag]
    if plan.network_mode:
        words += ["--network", plan.network_mode]
    for key, value in build.build_args.items():
        words += ["--build-arg", f"{key}={value}"]
    words += ["--file", f"{build.directory}/{build.dockerfile}", build.directory]
    return " ".join(shlex.quote(word) for word in words)


def trust_policy(account: str) -> str:
    """Who may assume the service role: CodeBuild, for builds of this account only."""
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "codebuild.amazonaws.com"},
                       "Action": "sts:AssumeRole",
                       "Condition": {"StringEquals": {"aws:SourceAccount": account}}}],
    })  # fmt: skip


def role_policy(images_uri: str, reference: str) -> str:
    """What a build of one artifact root's images does, and no more: read its contexts
    (``<root>/images/``), write its log, push to the image's own ECR repository (docs/
    sagemaker.md). One such policy per artifact root and repository on the role we created."""
    bucket_and_prefix = images_uri.split("://", 1)[1].rstrip("/")
    statements: list[dict[str, object]] = [
        {"Effect": "Allow", "Action": ["s3:GetObject", "s3:GetObjectVersion"],
         "Resource": f"arn:aws:s3:::{bucket_and_prefix}/*"},
        {"Effect": "Allow", "Action": ["logs:CreateLogGroup", "logs:CreateLogStream",
                                       "logs:PutLogEvents"],
         "Resource": "arn:aws:logs:*:*:log-group:/aws/codebuild/*"},
        # pulling a parent image from ECR, wherever it is
        {"Effect": "Allow", "Action": ["ecr:GetAuthorizationToken", "ecr:BatchGetImage",
                                       "ecr:GetDownloadUrlForLayer",
                                       "ecr:BatchCheckLayerAvailability"],
         "Resource": "*"},
    ]  # fmt: skip
    found = ecr_match(registry_host(reference))
    if found:
        name = reference.split("/", 1)[1].rsplit(":", 1)[0]
        statements.append({
            "Effect": "Allow",
            "Action": ["ecr:InitiateLayerUpload", "ecr:UploadLayerPart",
                       "ecr:CompleteLayerUpload", "ecr:PutImage"],  # pushing: its repository only
            "Resource": f"arn:aws:ecr:{found['region']}:{found['account']}:repository/{name}",
        })  # fmt: skip
    return json.dumps({"Version": "2012-10-17", "Statement": statements})
