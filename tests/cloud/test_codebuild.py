"""Self-tests of the CodeBuild fake through boto3's ``codebuild``, ``logs``, ``s3`` and ``iam``
clients only (no product code), against the running stack.

Most builds run plain shell commands (cheap); one really builds an image with the stack's
engine and pushes it to its registry (marked ``container``).
"""

from __future__ import annotations

import io
import os
import threading
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from cloud import codebuild
from cloud.control import FakeControl
from tests.cloud.registry import manifest_digest
from tests.waiting import wait_for

NO_DAEMON = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
ENVIRONMENT = {
    "type": "LINUX_CONTAINER",
    "image": "aws/codebuild/standard:7.0",
    "computeType": "BUILD_GENERAL1_SMALL",
}


def spec(*build: str, post: tuple[str, ...] = (), install: tuple[str, ...] = ()) -> str:
    """A buildspec (version 0.2) running ``build`` in BUILD, then ``post`` in POST_BUILD."""

    def phase(name: str, commands: tuple[str, ...]) -> str:
        lines = "".join(f"      - {c!r}\n" for c in commands)
        return f"  {name}:\n    commands:\n{lines}" if commands else ""

    return (
        "version: 0.2\nphases:\n"
        + phase("install", install)
        + phase("build", build)
        + (phase("post_build", post))
    )


@pytest.fixture(scope="module")
def aws(cloud_stack: dict[str, str]) -> dict[str, Any]:
    if "STEPOP_CODEBUILD_ENDPOINT" not in cloud_stack:
        pytest.skip("the stack runs no CodeBuild fake")
    return {
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "moto": cloud_stack["STEPOP_MOTO_ENDPOINT"],
        "codebuild": cloud_stack["STEPOP_CODEBUILD_ENDPOINT"],
    }


def _client(aws: dict[str, Any], service: str, endpoint: str, **config: Any) -> Any:
    creds = {k: aws[k] for k in ("region_name", "aws_access_key_id", "aws_secret_access_key")}
    return boto3.client(service, endpoint_url=endpoint, config=Config(**config), **creds)


@pytest.fixture(scope="module")
def cb(aws: dict[str, Any]) -> Any:
    """CodeBuild without retries, so injected faults surface."""
    return _client(aws, "codebuild", aws["codebuild"], retries={"total_max_attempts": 1})


@pytest.fixture(scope="module")
def cb_unchecked(aws: dict[str, Any]) -> Any:
    """CodeBuild without boto3's own parameter checks: what the service refuses reaches it."""
    return _client(aws, "codebuild", aws["codebuild"], parameter_validation=False)


@pytest.fixture(scope="module")
def logs(aws: dict[str, Any]) -> Any:
    return _client(aws, "logs", aws["moto"])


@pytest.fixture(scope="module")
def s3(aws: dict[str, Any]) -> Any:
    return _client(aws, "s3", aws["moto"])


@pytest.fixture(scope="module")
def ctl(aws: dict[str, Any]) -> FakeControl:
    return FakeControl(aws["codebuild"])


@pytest.fixture(autouse=True)
def _clean(ctl: FakeControl) -> Iterator[None]:
    ctl.reset()
    yield
    ctl.reset()


@pytest.fixture(scope="module")
def role(aws: dict[str, Any]) -> str:
    iam = _client(aws, "iam", aws["moto"])
    name = f"codebuild-selftest-{uuid.uuid4().hex[:8]}"
    return iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}")["Role"]["Arn"]


@pytest.fixture(scope="module")
def bucket(s3: Any) -> str:
    name = f"codebuild-selftest-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=name)
    return name


def new_project(cb: Any, role: str, **extra: Any) -> str:
    name = f"selftest-{uuid.uuid4().hex[:10]}"
    cb.create_project(
        name=name,
        source={"type": "NO_SOURCE", "buildspec": spec("echo project buildspec")},
        artifacts={"type": "NO_ARTIFACTS"},
        environment=ENVIRONMENT,
        serviceRole=role,
        **extra,
    )
    return name


@pytest.fixture(scope="module")
def project(cb: Any, role: str) -> str:
    return new_project(cb, role)


def finished(cb: Any, build_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """BatchGetBuilds' entry once the build is complete."""

    def done() -> dict[str, Any] | None:
        build = cb.batch_get_builds(ids=[build_id])["builds"][0]
        return build if build["buildComplete"] else None

    return wait_for(done, timeout, f"build {build_id} to complete")


def log_lines(logs: Any, build: dict[str, Any]) -> list[str]:
    """The build's CloudWatch lines so far (none while its stream does not exist)."""
    group, stream = build["logs"]["groupName"], build["logs"]["streamName"]
    try:
        events = logs.get_log_events(logGroupName=group, logStreamName=stream, startFromHead=True)
    except logs.exceptions.ResourceNotFoundException:
        return []
    return [e["message"] for e in events["events"]]


def phase(build: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(p for p in build["phases"] if p["phaseType"] == kind)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


# --- refusals ----------------------------------------------------------------------------------


def test_what_codebuild_refuses(cb: Any, cb_unchecked: Any, role: str, project: str) -> None:
    ghost = "arn:aws:iam::123456789012:role/no-such-role"
    with pytest.raises(cb.exceptions.InvalidInputException, match="sts:AssumeRole on " + ghost):
        new_project(cb, ghost)
    with pytest.raises(cb.exceptions.ResourceAlreadyExistsException, match=project):
        cb.create_project(
            name=project,
            source={"type": "NO_SOURCE", "buildspec": spec("true")},
            artifacts={"type": "NO_ARTIFACTS"},
            environment=ENVIRONMENT,
            serviceRole=role,
        )
    with pytest.raises(cb.exceptions.ResourceNotFoundException, match="project/no-such-project"):
        cb.start_build(projectName="no-such-project")
    # What boto3 itself would refuse first: the fake checks the model's constraints too.
    with pytest.raises(ClientError, match="1 validation error detected") as err:
        cb_unchecked.start_build(projectName=project, timeoutInMinutesOverride=3)
    assert err.value.response["Error"]["Code"] == "InvalidInputException"
    with pytest.raises(ClientError, match="regular expression pattern"):
        cb_unchecked.create_project(
            name="-bad name",
            source={"type": "NO_SOURCE"},
            artifacts={"type": "NO_ARTIFACTS"},
            environment=ENVIRONMENT,
            serviceRole=role,
        )
    reserved = [{"name": "CODEBUILD_X", "value": "1"}]
    with pytest.raises(cb.exceptions.InvalidInputException, match="reserved"):
        cb.start_build(projectName=project, environmentVariablesOverride=reserved)
    with pytest.raises(cb.exceptions.InvalidInputException, match="source location"):
        cb.start_build(projectName=project, sourceTypeOverride="S3")


# --- the life of a build -----------------------------------------------------------------------


def test_build_runs_its_phases_in_one_shell_without_stack_credentials(
    cb: Any, logs: Any, project: str, ctl: FakeControl
) -> None:
    buildspec = (
        "version: 0.2\n"
        "env:\n  variables:\n    FROM_SPEC: spec\n    OVERRIDDEN: spec\n"
        "phases:\n"
        "  install:\n    commands:\n      - cd /tmp && export CARRIED=yes\n"
        "  build:\n    commands:\n"
        '      - echo "cwd=$(pwd) carried=$CARRIED spec=$FROM_SPEC over=$OVERRIDDEN"\n'
        '      - echo "id=$CODEBUILD_BUILD_ID region=$AWS_REGION/$AWS_DEFAULT_REGION"\n'
        '      - echo "key=${AWS_SECRET_ACCESS_KEY:-none} src=$(basename $CODEBUILD_SRC_DIR)"\n'
    )
    override = [{"name": "OVERRIDDEN", "value": "call", "type": "PLAINTEXT"}]
    started = cb.start_build(
        projectName=project, buildspecOverride=buildspec, environmentVariablesOverride=override
    )["build"]
    assert started["buildStatus"] == "IN_PROGRESS"
    assert started["logs"]["groupName"] == f"/aws/codebuild/{project}"
    assert started["logs"]["streamName"] == started["id"].split(":", 1)[1]
    build = finished(cb, started["id"])
    assert build["buildStatus"] == "SUCCEEDED", build["phases"]
    assert build["currentPhase"] == "COMPLETED" and build["endTime"] >= build["startTime"]
    assert [p["phaseType"] for p in build["phases"]] == [
        "SUBMITTED", "QUEUED", "PROVISIONING", "DOWNLOAD_SOURCE", "INSTALL", "PRE_BUILD", "BUILD",
        "POST_BUILD", "UPLOAD_ARTIFACTS", "FINALIZING", "COMPLETED",
    ]  # fmt: skip
    assert all(p.get("phaseStatus") == "SUCCEEDED" for p in build["phases"][:-1])
    assert build["environment"]["environmentVariables"] == override
    assert build["buildNumber"] >= 1 and build["initiator"]

    lines = wait_for(lambda: (ls := log_lines(logs, build)) and "key=" in "".join(ls) and ls)
    assert f"id={build['id']} region=us-east-1/us-east-1" in lines
    assert "cwd=/tmp carried=yes spec=spec over=call" in lines
    assert "key=none src=src" in lines
    assert any(line.startswith("[Container] ") and line.endswith("Entering phase BUILD")
               for line in lines)  # fmt: skip
    assert any(line.endswith("Running command cd /tmp && export CARRIED=yes") for line in lines)
    counters = ctl.counters()
    assert counters["StartBuild"] == 1 and counters["BatchGetBuilds"] >= 1


def test_failing_command_fails_build_and_post_build_still_runs(
    cb: Any, logs: Any, project: str
) -> None:
    build_id = cb.start_build(
        projectName=project,
        buildspecOverride=spec("echo before", "exit 3", "echo never", post=(
            "echo succeeding=$CODEBUILD_BUILD_SUCCEEDING",
        )),
    )["build"]["id"]  # fmt: skip
    build = finished(cb, build_id)
    assert build["buildStatus"] == "FAILED"
    failed = phase(build, "BUILD")
    assert failed["phaseStatus"] == "FAILED"
    assert failed["contexts"] == [{
        "statusCode": "COMMAND_EXECUTION_ERROR",
        "message": "Error while executing command: exit 3. Reason: exit status 3",
    }]  # fmt: skip
    assert phase(build, "POST_BUILD")["phaseStatus"] == "SUCCEEDED"
    lines = wait_for(lambda: (ls := log_lines(logs, build)) and "succeeding=0" in ls and ls)
    assert "before" in lines and "never" not in lines
    assert any(line.endswith("Command did not exit successfully exit 3 exit status 3")
               for line in lines)  # fmt: skip

    # A failed INSTALL goes straight to FINALIZING; without privileged mode, no docker daemon.
    build_id = cb.start_build(
        projectName=project,
        buildspecOverride=spec("echo never", install=("docker info",)),
        privilegedModeOverride=False,
    )["build"]["id"]
    build = finished(cb, build_id)
    assert build["buildStatus"] == "FAILED"
    assert [p["phaseType"] for p in build["phases"]][4:] == ["INSTALL", "FINALIZING", "COMPLETED"]
    assert "docker info. Reason: exit status 1" in phase(build, "INSTALL")["contexts"][0]["message"]
    wait_for(lambda: any(NO_DAEMON in line for line in log_lines(logs, build)), 10, "no daemon")


def test_bad_buildspec_and_missing_source_fail_download_source(
    cb: Any, project: str, bucket: str
) -> None:
    cases = {
        "version: 0.2\nphases: [unclosed\n": "YAML_FILE_ERROR",
        "version: 0.2\n": "YAML_FILE_ERROR",
        "phases:\n  build:\n    commands:\n      - true\n": "YAML_FILE_ERROR",
        'version: 0.2\nphases:\n  build:\n    commands:\n      - echo "a: b"\n': "YAML_FILE_ERROR",
    }
    ids = {cb.start_build(projectName=project, buildspecOverride=text)["build"]["id"]: code
           for text, code in cases.items()}  # fmt: skip
    missing = cb.start_build(
        projectName=project,
        sourceTypeOverride="S3",
        sourceLocationOverride=f"{bucket}/contexts/missing.zip",
        buildspecOverride=spec("true"),
    )["build"]["id"]
    ids[missing] = "CLIENT_ERROR"
    for build_id, code in ids.items():
        build = finished(cb, build_id)
        assert build["buildStatus"] == "FAILED"
        download = phase(build, "DOWNLOAD_SOURCE")
        assert download["phaseStatus"] == "FAILED" and download["contexts"][0]["statusCode"] == code
        assert [p["phaseType"] for p in build["phases"]][-2:] == ["FINALIZING", "COMPLETED"]
    build = finished(cb, missing)
    assert "NoSuchKey" in phase(build, "DOWNLOAD_SOURCE")["contexts"][0]["message"]
    subkeys = [b for b, code in ids.items() if code == "YAML_FILE_ERROR"][-1]
    message = phase(finished(cb, subkeys), "DOWNLOAD_SOURCE")["contexts"][0]["message"]
    assert message.startswith("Expected Commands[0] to be of string type: found subkeys instead")


def test_folder_source_and_a_log_group_of_the_call(
    cb: Any, logs: Any, s3: Any, bucket: str, cloud_stack: dict[str, str]
) -> None:
    """In the project the stack made for image builds (``STEPOP_CODEBUILD_PROJECT``)."""
    project = cloud_stack["STEPOP_CODEBUILD_PROJECT"]
    prefix = f"folders/{uuid.uuid4().hex[:8]}/"
    s3.put_object(Bucket=bucket, Key=f"{prefix}sub/data.txt", Body=b"from s3")
    s3.put_object(Bucket=bucket, Key=f"{prefix}run.sh", Body=b"echo run.sh ran\n")
    config = {"cloudWatchLogs": {"status": "ENABLED", "groupName": "/stepop/builds",
                                 "streamName": "selftest"}}  # fmt: skip
    build_id = cb.start_build(
        projectName=project,
        sourceTypeOverride="S3",
        sourceLocationOverride=f"{bucket}/{prefix}",
        buildspecOverride=spec("cat sub/data.txt", "bash run.sh"),
        logsConfigOverride=config,
    )["build"]["id"]
    build = finished(cb, build_id)
    assert build["buildStatus"] == "SUCCEEDED", build["phases"]
    assert build["logs"]["groupName"] == "/stepop/builds"
    assert build["logs"]["streamName"] == f"selftest/{build_id.split(':', 1)[1]}"
    lines = wait_for(lambda: (ls := log_lines(logs, build)) and "run.sh ran" in ls and ls, 10)
    assert "from s3" in lines


def test_lines_are_readable_while_the_build_runs_then_stop_build_kills_it(
    cb: Any, logs: Any, project: str, tmp_path: Path
) -> None:
    release, pid_file = tmp_path / "release", tmp_path / "pid"
    build_id = cb.start_build(
        projectName=project,
        buildspecOverride=spec(
            "echo first line",
            f"until [ -e {release} ]; do sleep 0.1; done",
            f"echo $$ > {pid_file}; exec sleep 600",
        ),
    )["build"]["id"]
    build = cb.batch_get_builds(ids=[build_id])["builds"][0]
    wait_for(lambda: "first line" in log_lines(logs, build), 20, "a line while it runs")
    assert cb.batch_get_builds(ids=[build_id])["builds"][0]["buildStatus"] == "IN_PROGRESS"
    release.touch()
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 20, "pid"))
    assert alive(pid)

    answer = cb.stop_build(id=build_id)["build"]
    assert answer["id"] == build_id
    build = finished(cb, build_id, timeout=30)
    assert build["buildStatus"] == "STOPPED"
    assert phase(build, "BUILD")["phaseStatus"] == "STOPPED"
    assert "POST_BUILD" not in [p["phaseType"] for p in build["phases"]]
    wait_for(lambda: not alive(pid), 10, "the command's process to be gone")


def test_idempotency_token_answers_the_same_build(cb: Any, role: str, ctl: FakeControl) -> None:
    name = new_project(cb, role)
    token = uuid.uuid4().hex
    request = {"projectName": name, "idempotencyToken": token, "buildspecOverride": spec("true")}
    ids: list[str] = []

    def start() -> None:
        ids.append(cb.start_build(**request)["build"]["id"])

    threads = [threading.Thread(target=start) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 10 and len(set(ids)) == 1
    assert cb.list_builds_for_project(projectName=name)["ids"] == ids[:1]
    with pytest.raises(cb.exceptions.InvalidInputException, match="different parameters"):
        cb.start_build(**{**request, "buildspecOverride": spec("false")})
    assert ctl.counters()["StartBuild"] == 11


def test_list_builds_for_project_newest_first_and_paged(
    cb: Any, role: str, ctl: FakeControl
) -> None:
    name = new_project(cb, role)
    started = [cb.start_build(projectName=name)["build"]["id"] for _ in range(3)]
    ctl.page_size(2)
    first = cb.list_builds_for_project(projectName=name)
    assert first["ids"] == started[::-1][:2] and first["nextToken"]
    second = cb.list_builds_for_project(projectName=name, nextToken=first["nextToken"])
    assert second["ids"] == started[:1] and "nextToken" not in second
    oldest = cb.list_builds_for_project(projectName=name, sortOrder="ASCENDING")["ids"]
    assert oldest == started[:2]
    assert name in cb.get_paginator("list_projects").paginate().build_full_result()["projects"]
    assert cb.batch_get_projects(names=[name, "nope"])["projectsNotFound"] == ["nope"]
    for build_id in started:
        assert finished(cb, build_id)["buildStatus"] == "SUCCEEDED"
    with pytest.raises(cb.exceptions.ResourceNotFoundException):
        cb.list_builds_for_project(projectName="no-such-project")


def test_faults_fail_slow_and_throttle_builds(
    cb: Any, logs: Any, project: str, ctl: FakeControl
) -> None:
    ctl.add_faults({"kind": "job_failure", "reason": "injected: no space left", "match": "img:v2"})
    variables = [{"name": "IMAGE", "value": "127.0.0.1:5000/img:v1"}]
    ok = cb.start_build(projectName=project, environmentVariablesOverride=variables)["build"]
    assert finished(cb, ok["id"])["buildStatus"] == "SUCCEEDED"
    variables = [{"name": "IMAGE", "value": "127.0.0.1:5000/img:v2"}]
    bad = cb.start_build(projectName=project, environmentVariablesOverride=variables)["build"]
    build = finished(cb, bad["id"])
    assert build["buildStatus"] == "FAILED"
    assert phase(build, "BUILD")["contexts"][0]["message"] == "injected: no space left"
    assert phase(build, "POST_BUILD")["phaseStatus"] == "SUCCEEDED"
    assert ctl.faults() == []  # a failed build is injected once

    ctl.add_faults({"kind": "provisioning_delay", "seconds": 30})
    slow = cb.start_build(projectName=project)["build"]["id"]
    current = wait_for(
        lambda: cb.batch_get_builds(ids=[slow])["builds"][0]["currentPhase"] == "PROVISIONING",
        10,
        "PROVISIONING",
    )
    assert current
    cb.stop_build(id=slow)
    assert finished(cb, slow)["buildStatus"] == "STOPPED"

    ctl.add_faults({"kind": "throttle", "operation": "StartBuild", "count": 1})
    with pytest.raises(ClientError, match="Rate exceeded") as err:
        cb.start_build(projectName=project)
    assert err.value.response["Error"]["Code"] == "ThrottlingException"


# --- timeouts and reset, on a fake of the test's own --------------------------------------------


def test_timeout_and_reset_stop_running_builds(
    aws: dict[str, Any], role: str, tmp_path: Path
) -> None:
    env = {
        "STEPOP_MOTO_ENDPOINT": aws["moto"],
        "STEPOP_CLOUD_DIR": str(tmp_path),
        "STEPOP_CODEBUILD_MINUTE_SECONDS": "0.4",  # timeoutInMinutes 5 -> 2 s
        "STEPOP_CODEBUILD_STOP_GRACE": "1",
    }
    server = codebuild.start(env)
    try:
        cb = _client(aws, "codebuild", server.url)
        name = new_project(cb, role)
        pids = tmp_path / "pids"
        pids.mkdir()
        long_spec = spec(f"echo $$ > {pids}/$CODEBUILD_BUILD_NUMBER; exec sleep 600")
        late = cb.start_build(projectName=name, buildspecOverride=long_spec,
                              timeoutInMinutesOverride=5)["build"]["id"]  # fmt: skip
        build = finished(cb, late, timeout=30)
        assert build["buildStatus"] == "TIMED_OUT"
        assert phase(build, "BUILD")["phaseStatus"] == "TIMED_OUT"
        pid = int((pids / "1").read_text())
        wait_for(lambda: not alive(pid), 10, "the timed-out command to be gone")

        running = cb.start_build(projectName=name, buildspecOverride=long_spec)["build"]["id"]
        pid = int(wait_for(lambda: (pids / "2").exists() and (pids / "2").read_text(), 20))
        FakeControl(server.url).reset(jobs=True)
        assert not alive(int(pid))
        assert cb.batch_get_builds(ids=[running])["buildsNotFound"] == [running]
        assert cb.list_builds_for_project(projectName=name)["ids"] == []  # the project stays
    finally:
        server.shutdown()


# --- a real image build --------------------------------------------------------------------------


@pytest.mark.container
def test_real_build_from_an_s3_zip_pushes_to_the_registry(
    cb: Any,
    logs: Any,
    s3: Any,
    bucket: str,
    project: str,
    registry_image: str,
    docker_engine: Any,
) -> None:
    tag = uuid.uuid4().hex[:10]
    image = f"{registry_image.split('/', 1)[0]}/stepop-codebuild-selftest:{tag}"
    buildspec = (
        "version: 0.2\nphases:\n  build:\n    commands:\n"
        "      - docker build -t $IMAGE .\n"
        "      - docker push $IMAGE\n"
    )
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("Dockerfile", f"FROM {registry_image}\nRUN echo hi > /hi\n")
        z.writestr("ci/buildspec.yml", buildspec)
    s3.put_object(Bucket=bucket, Key=f"contexts/{tag}.zip", Body=archive.getvalue())
    build_id = cb.start_build(
        projectName=project,
        sourceTypeOverride="S3",
        sourceLocationOverride=f"{bucket}/contexts/{tag}.zip",
        buildspecOverride="ci/buildspec.yml",  # a path in the source
        privilegedModeOverride=True,
        environmentVariablesOverride=[{"name": "IMAGE", "value": image}],
    )["build"]["id"]
    try:
        build = finished(cb, build_id, timeout=300)
        assert build["buildStatus"] == "SUCCEEDED", build["phases"]
        assert build["resolvedSourceVersion"]
        assert manifest_digest(image), f"{image} is not in the registry"
        lines = wait_for(lambda: (ls := log_lines(logs, build)) and any("digest:" in x for x in ls)
                         and ls, 10, "the push's lines")  # fmt: skip
        assert any("RUN echo hi > /hi" in line for line in lines)
        assert any(line.endswith("Running command docker push $IMAGE") for line in lines)
    finally:
        with_engine = docker_engine.images.list(name=image.rsplit(":", 1)[0])
        for img in with_engine:
            docker_engine.images.remove(img.id, force=True)
