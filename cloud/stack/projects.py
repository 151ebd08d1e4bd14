"""A ready CodeBuild project, and the IAM role it runs as, for builds by hand and the docs.

CodeBuild builds only in a project whose service role exists, so ``up`` makes both: the role
:data:`~cloud.stack.settings.CODEBUILD_ROLE` in moto's IAM and the project
:data:`~cloud.stack.settings.CODEBUILD_PROJECT` in the CodeBuild fake (S3 source under the demo
bucket, privileged mode for ``docker``); a build overrides the source location and the
buildspec. ``.cloud/env`` names them (``STEPOP_CODEBUILD_PROJECT``,
``STEPOP_CODEBUILD_ROLE_ARN``). The library creates a project of its own on first use (``[stepop]
sagemaker_codebuild_project``), unless told to use this one.
"""

from __future__ import annotations

import contextlib

from cloud.stack.settings import CODEBUILD_PROJECT, CODEBUILD_ROLE, DEMO_BUCKET, REGION, log

TRUST = (
    '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": '
    '{"Service": "codebuild.amazonaws.com"}, "Action": "sts:AssumeRole"}]}'
)


def create_build_project(env: dict[str, str]) -> None:
    """The role and the project, unless they exist (the stack runs no CodeBuild fake: none)."""
    if "STEPOP_CODEBUILD_ENDPOINT" not in env:
        return
    import boto3

    creds = {"region_name": REGION, "aws_access_key_id": "testing",
             "aws_secret_access_key": "testing"}  # fmt: skip
    iam = boto3.client("iam", endpoint_url=env["STEPOP_MOTO_ENDPOINT"], **creds)
    try:
        arn = iam.create_role(RoleName=CODEBUILD_ROLE, AssumeRolePolicyDocument=TRUST)
    except iam.exceptions.EntityAlreadyExistsException:
        arn = iam.get_role(RoleName=CODEBUILD_ROLE)
    role = arn["Role"]["Arn"]
    codebuild = boto3.client("codebuild", endpoint_url=env["STEPOP_CODEBUILD_ENDPOINT"], **creds)
    with contextlib.suppress(codebuild.exceptions.ResourceAlreadyExistsException):
        codebuild.create_project(
            name=CODEBUILD_PROJECT,
            description="Image builds of airflow-stepop steps (the emulated stack's)",
            source={"type": "S3", "location": f"{DEMO_BUCKET}/codebuild/"},
            artifacts={"type": "NO_ARTIFACTS"},
            environment={
                "type": "LINUX_CONTAINER",
                "image": "aws/codebuild/standard:7.0",
                "computeType": "BUILD_GENERAL1_SMALL",
                "privilegedMode": True,
            },
            serviceRole=role,
            timeoutInMinutes=60,
        )
    log(f"the CodeBuild project {CODEBUILD_PROJECT} is there (role {role})")
