"""Self-tests of the Cloud Build fake through google-cloud-build's REST client and
google-cloud-storage only (no product code), against the running stack.

Most steps are the docker builder with ``entrypoint: bash`` (cheap); one really builds an image
with the stack's engine and pushes it to its registry (marked ``container``).
"""

from __future__ import annotations

import io
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from google.api_core import exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from google.cloud.devtools import cloudbuild_v1
from google.cloud.devtools.cloudbuild_v1 import Build

from cloud.control import FakeControl
from tests.cloud.registry import manifest_digest
from tests.waiting import wait_for

PROJECT = "stepop-local"
DOCKER = "gcr.io/cloud-builders/docker"
TERMINAL = {
    Build.Status.SUCCESS,
    Build.Status.FAILURE,
    Build.Status.INTERNAL_ERROR,
    Build.Status.TIMEOUT,
    Build.Status.CANCELLED,
}


def bash(script: str, **step: Any) -> dict[str, Any]:
    """A docker-builder step running ``bash -c script`` (no container work)."""
    return {"name": DOCKER, "entrypoint": "bash", "args": ["-c", script], **step}


@pytest.fixture(scope="module")
def endpoints(cloud_stack: dict[str, str]) -> dict[str, str]:
    if "STEPOP_CLOUDBUILD_ENDPOINT" not in cloud_stack:
        pytest.skip("the stack runs no Cloud Build fake")
    return cloud_stack


@pytest.fixture(scope="module")
def client(endpoints: dict[str, str]) -> cloudbuild_v1.CloudBuildClient:
    return cloudbuild_v1.CloudBuildClient(
        transport="rest",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": endpoints["STEPOP_CLOUDBUILD_ENDPOINT"]},
    )


@pytest.fixture(scope="module")
def bucket(endpoints: dict[str, str]) -> storage.Bucket:
    gcs = storage.Client(
        project=PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": endpoints["STORAGE_EMULATOR_HOST"]},
    )
    return gcs.create_bucket(f"cloudbuild-selftest-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def ctl(endpoints: dict[str, str]) -> FakeControl:
    return FakeControl(endpoints["STEPOP_CLOUDBUILD_ENDPOINT"])


@pytest.fixture(autouse=True)
def _clean(ctl: FakeControl) -> Iterator[None]:
    ctl.reset()
    yield
    ctl.reset()


def create(client: cloudbuild_v1.CloudBuildClient, **build: Any) -> Build:
    """CreateBuild; the build of the operation's metadata."""
    return client.create_build(project_id=PROJECT, build=Build(**build)).metadata.build


def finished(client: cloudbuild_v1.CloudBuildClient, build_id: str, timeout: float = 60) -> Build:
    def done() -> Build | None:
        build = client.get_build(project_id=PROJECT, id=build_id)
        return build if build.status in TERMINAL else None

    return wait_for(done, timeout, f"build {build_id} to finish")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def log_text(bucket: storage.Bucket, build_id: str, prefix: str = "logs") -> str:
    blob = bucket.blob(f"{prefix}/log-{build_id}.txt")
    try:
        return blob.download_as_text()
    except exceptions.NotFound:
        return ""


# --- refusals ----------------------------------------------------------------------------------


def test_what_cloud_build_refuses(
    client: cloudbuild_v1.CloudBuildClient, endpoints: dict[str, str], bucket: storage.Bucket
) -> None:
    step = bash("true")
    cases: dict[str, dict[str, Any]] = {
        "at least one step": {},
        "must specify name": {"steps": [{"args": ["version"]}]},
        "invalid logs bucket": {"steps": [step], "logs_bucket": "no-scheme-bucket"},
        "not within": {"steps": [step], "timeout": "90000s"},
        "not matched in the substitution list": {"steps": [bash("echo $_MISSING")]},
        "not matched in the template": {"steps": [step], "substitutions": {"_UNUSED": "x"}},
        "not a valid built-in": {"steps": [bash("echo $HOME")]},
        "invalid build tag": {"steps": [step], "tags": ["no spaces"]},
        'invalid bucket "no-such-bucket-here"': {
            "steps": [step],
            "logs_bucket": "gs://no-such-bucket-here",
        },
    }
    for words, build in cases.items():
        with pytest.raises(exceptions.BadRequest, match=words):
            create(client, **build)
    # What the client's own messages cannot say reaches the service as JSON.
    url = f"{endpoints['STEPOP_CLOUDBUILD_ENDPOINT']}/v1/projects/{PROJECT}/builds"
    for body in ({"steps": [step], "options": {"logging": "FILES"}},
                 {"steps": [step], "options": {"logging": 99}},
                 {"steps": [step], "unknownField": 1}):  # fmt: skip
        answer = requests.post(url, json=body, timeout=10)
        assert answer.status_code == 400, body
        assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    # ALLOW_LOOSE lets unmatched substitutions through, as on the service.
    loose = create(client, steps=[bash("true $_NOT_GIVEN")], substitutions={"_UNUSED": "1"},
                   options={"substitution_option": "ALLOW_LOOSE"})  # fmt: skip
    assert finished(client, loose.id).status == Build.Status.SUCCESS


# --- the life of a build -----------------------------------------------------------------------


def test_log_object_grows_while_the_build_runs(
    client: cloudbuild_v1.CloudBuildClient,
    bucket: storage.Bucket,
    ctl: FakeControl,
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    queued = create(
        client,
        steps=[
            bash(f"echo first line; until [ -e {release} ]; do sleep 0.1; done", id="wait"),
            bash("echo project=$PROJECT_ID build=$BUILD_ID sub=$_WHO workspace=$$(pwd)"),
        ],
        substitutions={"_WHO": "selftest"},
        logs_bucket=f"gs://{bucket.name}/logs",
        options={"logging": "GCS_ONLY"},
        tags=["grows"],
    )
    assert queued.status == Build.Status.QUEUED and queued.log_url
    running = wait_for(lambda: 'Step #0 - "wait": first line' in log_text(bucket, queued.id),
                       20, "a line in GCS while the build runs")  # fmt: skip
    assert running
    build = client.get_build(project_id=PROJECT, id=queued.id)
    assert build.status == Build.Status.WORKING and build.start_time
    assert [s.status for s in build.steps] == [Build.Status.WORKING, Build.Status.QUEUED]
    release.touch()
    build = finished(client, queued.id)
    assert build.status == Build.Status.SUCCESS, build.status_detail
    assert build.finish_time >= build.start_time >= build.create_time
    assert [s.status for s in build.steps] == [Build.Status.SUCCESS] * 2
    assert all(s.timing.end_time for s in build.steps) and "BUILD" in build.timing
    text = wait_for(lambda: (t := log_text(bucket, queued.id)).endswith("DONE\n") and t, 10)
    lines = text.splitlines()
    assert lines[0] == f'starting build "{queued.id}"'
    assert lines[2:4] == ["BUILD", 'Starting Step #0 - "wait"']
    assert f"Step #1: project={PROJECT} build={queued.id} sub=selftest workspace=" in text
    assert 'Finished Step #0 - "wait"' in lines and "Finished Step #1" in lines
    counters = ctl.counters()
    assert counters["CreateBuild"] == 1 and counters["GetBuild"] >= 2


def test_failures_say_why(client: cloudbuild_v1.CloudBuildClient, bucket: storage.Bucket) -> None:
    operation = client.create_build(
        project_id=PROJECT,
        build=Build(steps=[bash("echo before; exit 3"), bash("echo never")],
                    logs_bucket=f"gs://{bucket.name}/logs"),
    )  # fmt: skip
    with pytest.raises(exceptions.GoogleAPICallError, match="Build failed; check build logs"):
        operation.result(timeout=60)
    build = finished(client, operation.metadata.build.id)
    assert build.status == Build.Status.FAILURE
    detail = f'build step 0 "{DOCKER}" failed: step exited with non-zero status: 3'
    assert build.status_detail == f"Build step failure: {detail}"
    assert build.failure_info.type_ == Build.FailureInfo.FailureType.USER_BUILD_STEP
    assert build.steps[0].status == Build.Status.FAILURE and build.steps[0].exit_code == 3
    assert build.steps[1].status == Build.Status.QUEUED
    text = wait_for(lambda: "ERROR: " in (t := log_text(bucket, build.id)) and t, 10)
    assert text.splitlines()[-3:] == [
        "Finished Step #0",
        "ERROR",
        f"ERROR: Build step failure: {detail}",
    ]

    other = create(client, steps=[{"name": "gcr.io/cloud-builders/gcloud", "args": ["version"]}])
    build = finished(client, other.id)
    assert build.status == Build.Status.FAILURE
    assert "runs only the gcr.io/cloud-builders/docker builder" in build.status_detail

    unbuilt = "127.0.0.1:5000/stepop-never-built:" + uuid.uuid4().hex[:8]
    build = finished(client, create(client, steps=[bash("true")], images=[unbuilt]).id)
    assert build.status == Build.Status.FAILURE
    assert build.failure_info.type_ == Build.FailureInfo.FailureType.PUSH_IMAGE_NOT_FOUND
    assert unbuilt in build.status_detail

    missing = {"storage_source": {"bucket": bucket.name, "object": "no/such.tgz"}}
    build = finished(client, create(client, source=missing, steps=[bash("true")]).id)
    assert build.failure_info.type_ == Build.FailureInfo.FailureType.FETCH_SOURCE_FAILED


def test_cancel_and_timeout_stop_the_running_step(
    client: cloudbuild_v1.CloudBuildClient, tmp_path: Path
) -> None:
    pids = {name: tmp_path / name for name in ("cancel", "timeout")}
    running = create(client, steps=[bash(f"echo $$$$ > {pids['cancel']}; exec sleep 600")])
    late = create(client, steps=[bash(f"echo $$$$ > {pids['timeout']}; exec sleep 600")],
                  timeout="2s")  # fmt: skip
    pid = int(wait_for(lambda: pids["cancel"].exists() and pids["cancel"].read_text(), 20))
    cancelled = client.cancel_build(project_id=PROJECT, id=running.id)
    assert cancelled.status == Build.Status.CANCELLED
    wait_for(lambda: not alive(pid), 15, "the cancelled step's process to be gone")
    build = finished(client, running.id)
    assert build.status == Build.Status.CANCELLED and build.finish_time
    assert build.steps[0].status == Build.Status.CANCELLED

    build = finished(client, late.id, timeout=30)
    assert build.status == Build.Status.TIMEOUT
    assert build.steps[0].status == Build.Status.TIMEOUT
    pid = int(pids["timeout"].read_text())
    wait_for(lambda: not alive(pid), 15, "the timed-out step's process to be gone")


def test_list_builds_filters_newest_first_and_pages(
    client: cloudbuild_v1.CloudBuildClient, ctl: FakeControl, tmp_path: Path
) -> None:
    tag = f"list-{uuid.uuid4().hex[:8]}"
    release = tmp_path / "release"
    done = [create(client, steps=[bash("true")], tags=[tag]).id for _ in range(2)]
    for build_id in done:
        finished(client, build_id)
    waiting = create(client, tags=[tag, "other"],
                     steps=[bash(f"until [ -e {release} ]; do sleep 0.1; done")]).id  # fmt: skip
    wait_for(lambda: client.get_build(project_id=PROJECT, id=waiting).status
             == Build.Status.WORKING, 20)  # fmt: skip

    tagged = [b.id for b in client.list_builds(project_id=PROJECT, filter=f'tags="{tag}"')]
    assert tagged == [waiting, *done[::-1]]
    working = client.list_builds(project_id=PROJECT, filter=f'tags="{tag}" AND status="WORKING"')
    assert [b.id for b in working] == [waiting]
    either = f'tags="{tag}" AND (status="QUEUED" OR status="SUCCESS")'
    assert {b.id for b in client.list_builds(project_id=PROJECT, filter=either)} == set(done)
    ctl.page_size(2)
    pages = client.list_builds(project_id=PROJECT, filter=f'tags="{tag}"').pages
    assert [[b.id for b in page.builds] for page in pages] == [[waiting, done[1]], [done[0]]]
    with pytest.raises(exceptions.BadRequest, match="unknown field"):
        list(client.list_builds(project_id=PROJECT, filter='colour="red"'))
    release.touch()
    assert finished(client, waiting).status == Build.Status.SUCCESS


def test_location_builds_and_operations(client: cloudbuild_v1.CloudBuildClient) -> None:
    parent = f"projects/{PROJECT}/locations/us-central1"
    operation = client.create_build(
        parent=parent, project_id=PROJECT, build=Build(steps=[bash("true")])
    )
    build_id = operation.metadata.build.id
    assert operation.operation.name == f"{parent}/operations/{build_id}"
    result = operation.result(timeout=60)
    assert result.status == Build.Status.SUCCESS and result.name == f"{parent}/builds/{build_id}"
    regional = client.get_build(name=f"{parent}/builds/{build_id}", project_id=PROJECT, id=build_id)
    assert regional.id == build_id
    with pytest.raises(exceptions.NotFound):
        client.get_build(project_id=PROJECT, id=build_id)  # the global location has no such build


def test_faults_fail_slow_and_throttle_builds(
    client: cloudbuild_v1.CloudBuildClient, ctl: FakeControl
) -> None:
    ctl.add_faults({"kind": "job_failure", "reason": "injected: disk full", "match": "img:v2"})
    ok = create(client, steps=[bash("true")], tags=["img"], images=[])
    assert finished(client, ok.id).status == Build.Status.SUCCESS
    bad = create(client, steps=[bash("echo 127.0.0.1:5000/img:v2")])
    build = finished(client, bad.id)
    assert build.status == Build.Status.FAILURE and build.status_detail == "injected: disk full"
    assert build.failure_info.type_ == Build.FailureInfo.FailureType.USER_BUILD_STEP
    assert ctl.faults() == []

    ctl.add_faults({"kind": "provisioning_delay", "seconds": 30})
    slow = create(client, steps=[bash("true")])
    with pytest.raises(AssertionError):  # still QUEUED a second later
        wait_for(lambda: client.get_build(project_id=PROJECT, id=slow.id).status
                 != Build.Status.QUEUED, 1)  # fmt: skip
    assert client.cancel_build(project_id=PROJECT, id=slow.id).status == Build.Status.CANCELLED

    ctl.add_faults({"kind": "throttle", "operation": "CreateBuild", "count": 1})
    with pytest.raises(exceptions.TooManyRequests):
        create(client, steps=[bash("true")])
    assert ctl.counters()["CreateBuild"] == 4


# --- a real image build --------------------------------------------------------------------------


@pytest.mark.container
def test_real_build_from_a_gcs_tarball_pushes_to_the_registry(
    client: cloudbuild_v1.CloudBuildClient,
    bucket: storage.Bucket,
    registry_image: str,
    docker_engine: Any,
) -> None:
    tag = uuid.uuid4().hex[:10]
    image = f"{registry_image.split('/', 1)[0]}/stepop-cloudbuild-selftest:{tag}"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        dockerfile = f"FROM {registry_image}\nRUN echo hi > /hi\n".encode()
        info = tarfile.TarInfo("ctx/Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    bucket.blob(f"contexts/{tag}.tgz").upload_from_string(archive.getvalue())
    operation = client.create_build(
        project_id=PROJECT,
        build=Build(
            source={"storage_source": {"bucket": bucket.name, "object": f"contexts/{tag}.tgz"}},
            steps=[{"name": DOCKER, "args": ["build", "-t", "$_IMAGE", "."], "dir": "ctx"}],
            images=["$_IMAGE"],
            substitutions={"_IMAGE": image},
            logs_bucket=f"gs://{bucket.name}/logs",
        ),
    )
    try:
        build = operation.result(timeout=300)
        assert build.status == Build.Status.SUCCESS
        (pushed,) = build.results.images
        assert pushed.name == image and pushed.digest.startswith("sha256:")
        assert manifest_digest(image) == pushed.digest
        text = log_text(bucket, build.id)
        assert "Step #0: Step 2/2 : RUN echo hi > /hi" in text
        assert f"PUSH\nPushing {image}\n" in text and text.endswith("DONE\n")
    finally:
        for img in docker_engine.images.list(name=image.rsplit(":", 1)[0]):
            docker_engine.images.remove(img.id, force=True)
