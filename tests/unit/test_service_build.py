"""One service build per image tag, whoever needs it: what ``start_or_join`` decides, and the
build context and buildspec every builder is given."""

from __future__ import annotations

import io
import json
import threading
import zipfile
from typing import Any, ClassVar

import pytest

from airflow_stepop.backends.base import JobStatus
from airflow_stepop.backends.image_build import ImageBuilder, start_or_join
from airflow_stepop.backends.sagemaker.buildspec import buildspec
from airflow_stepop.images import builder
from airflow_stepop.images.build_context import MANIFEST, build_plan, layer_files
from airflow_stepop.runtime.storage import Storage
from airflow_stepop.settings import DockerSettings

SETTINGS = DockerSettings(parent_image="python:3.11-slim", requirements=["tabulate==0.9.0"],
                          environment={"GREETING": "it's $HOME"})  # fmt: skip
REFERENCE = builder.image_reference(SETTINGS, "registry.example/env")


class CountingBuilder(ImageBuilder):
    """Starts builds in memory; says what each builds and whether it still runs."""

    name = "Counting"
    archive_kind = "zip"
    started: ClassVar[list[str]] = []
    states: ClassVar[dict[str, str]] = {}
    images: ClassVar[dict[str, str]] = {}

    def serialize(self):
        return {}

    def start(self, plan, source_uri, folder_uri, token):
        build = f"build-{len(self.started) + 1}"
        self.started.append(source_uri)
        self.states[build] = "running"
        self.images[build] = plan.reference
        return build

    def handle_of(self, build_id, folder_uri):
        return {"job_id": build_id} if build_id in self.states else None

    def image_of(self, handle):
        return JobStatus(self.states[handle["job_id"]]), self.images[handle["job_id"]]

    def stop(self, handle):
        self.states[handle["job_id"]] = "stopped"

    async def astatus(self, handle):
        return JobStatus(self.states[handle["job_id"]])

    async def alogs(self, handle, cursor):
        return [], cursor

    async def astop(self, handle):
        self.stop(handle)


@pytest.fixture
def images(tmp_path, monkeypatch):
    monkeypatch.setattr(builder, "lock_dir", lambda: tmp_path / "locks")
    CountingBuilder.started, CountingBuilder.states, CountingBuilder.images = [], {}, {}
    return str(tmp_path / "root" / "images")


def _plan():
    return build_plan(SETTINGS, REFERENCE, "python:3.11-slim")


def test_ten_tasks_needing_one_new_tag_start_one_build_and_follow_it(images, tmp_path):
    storage, plan = Storage(), _plan()
    builds: list[Any] = []

    def task(number: int) -> None:
        run_uri = str(tmp_path / f"run-{number}")
        builds.append(
            start_or_join(CountingBuilder(), plan, storage, images, run_uri, lambda: False)
        )

    threads = [threading.Thread(target=task, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(CountingBuilder.started) == 1
    assert {b.handle["job_id"] for b in builds} == {"build-1"}
    assert sum(bool(b.handle.get("joined")) for b in builds) == 9
    assert {b.handle["image"] for b in builds} == {REFERENCE}
    assert len({b.handle["run_uri"] for b in builds}) == 10  # each relays into its own run


def test_a_tag_in_the_registry_meanwhile_needs_no_build(images, tmp_path):
    assert start_or_join(CountingBuilder(), _plan(), Storage(), images, "r", lambda: True) is None
    assert CountingBuilder.started == []


def test_an_ended_or_foreign_build_in_the_record_is_not_waited_for(images, tmp_path):
    storage, plan = Storage(), _plan()
    first = start_or_join(CountingBuilder(), plan, storage, images, "r1", lambda: False)
    CountingBuilder.states[first.handle["job_id"]] = "failed"
    second = start_or_join(CountingBuilder(), plan, storage, images, "r2", lambda: False)
    assert second.handle["job_id"] == "build-2" and not second.handle.get("joined")

    # a record rewritten to name a running build of another image (the artifact root is
    # writable by jobs) is a hint never taken: this step starts its own
    CountingBuilder.states["build-2"] = "failed"
    CountingBuilder.states["other"], CountingBuilder.images["other"] = "running", "evil/img:1"
    record = f"{images}/{REFERENCE.rsplit(':', 1)[1]}/build.json"
    storage.write_bytes(record, json.dumps({"build_id": "other"}).encode())
    third = start_or_join(CountingBuilder(), plan, storage, images, "r3", lambda: False)
    assert third.handle["job_id"] == "build-3" and third.handle["image"] == REFERENCE


def test_the_archive_holds_the_engine_paths_files_and_is_the_same_bytes_each_time():
    plan = _plan()
    archive = zipfile.ZipFile(io.BytesIO(plan.archive("zip")))
    files, args = layer_files(SETTINGS, "python:3.11-slim", None)
    held = {n: archive.read(n) for n in archive.namelist()}
    assert held.pop(MANIFEST) == plan.manifest()  # what the build checks the rest against
    assert {n.removeprefix("stepop/"): data for n, data in held.items()} == files
    assert plan.builds[-1].build_args == args and plan.builds[-1].tag == REFERENCE
    assert plan.archive("zip") == _plan().archive("zip")
    assert plan.archive("tar.gz") == _plan().archive("tar.gz")


def test_a_users_dockerfile_directory_goes_whole_less_its_dockerignore(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim\nCOPY app.py /app.py\n")
    (tmp_path / "app.py").write_text("print('hi')\n")
    (tmp_path / "install.sh").write_text("#!/bin/sh\necho installed\n")
    (tmp_path / "install.sh").chmod(0o755)
    (tmp_path / "data.bin").write_bytes(b"\0" * 10)
    (tmp_path / ".dockerignore").write_text("data.bin\n")
    settings = DockerSettings(dockerfile=tmp_path / "Dockerfile", requirements=["six"])
    reference = builder.image_reference(settings, "registry.example/env")
    plan = build_plan(settings, reference, "python:3.11-slim")

    assert {"user/Dockerfile", "user/app.py"} <= set(plan.files)
    assert "user/data.bin" not in plan.files
    assert [b.tag for b in plan.builds] == [f"{reference}-base", reference]
    with zipfile.ZipFile(io.BytesIO(plan.archive("zip"))) as archive:  # RUN ./install.sh works
        modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
    assert modes["user/install.sh"] == 0o755 and modes["user/app.py"] == 0o644
    assert plan.files["stepop/Dockerfile"].startswith(f"FROM {reference}-base\n".encode())


def test_the_buildspec_quotes_every_value_and_logs_in_to_ecr_only():
    ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com/env"
    spec = json.loads(buildspec(build_plan(SETTINGS, builder.image_reference(SETTINGS, ecr),
                                           "python:3.11-slim")))  # fmt: skip
    assert "aws ecr get-login-password" in spec["phases"]["pre_build"]["commands"][0]
    build, push = spec["phases"]["build"]["commands"]
    assert """--build-arg 'STEPOP_ENV_GREETING=it'"'"'s $HOME'""" in build  # as given, no $
    assert push.startswith("docker push 123456789012.dkr.ecr.")

    local = json.loads(buildspec(_plan()))
    assert "pre_build" not in local["phases"]  # another registry: the engine's own login


def test_a_build_runs_only_the_context_the_worker_wrote(tmp_path):
    """The archive lies where jobs can write: the build's first step checks every file."""
    import subprocess

    plan = _plan()
    with zipfile.ZipFile(io.BytesIO(plan.archive("zip"))) as archive:
        archive.extractall(tmp_path)

    def verify() -> subprocess.CompletedProcess:
        script = plan.verify_script()
        return subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True)

    assert verify().returncode == 0
    (tmp_path / MANIFEST).write_text("")  # a manifest of the job's own naming nothing
    assert verify().returncode != 0
    (tmp_path / MANIFEST).write_bytes(plan.manifest())
    (tmp_path / "stepop" / "extra.py").write_text("import os; os.system('curl evil')\n")
    assert verify().returncode != 0  # a file the worker did not write
    (tmp_path / "stepop" / "extra.py").unlink()
    (tmp_path / "stepop" / "stepop-requirements.txt").write_text("evil-package\n")
    assert verify().returncode != 0  # a file the worker wrote, rewritten
    assert "$" not in plan.verify_script()  # Cloud Build would substitute it


def test_cloud_build_gets_every_dollar_doubled_so_values_arrive_as_given():
    from airflow_stepop.backends.vertex.cloud_build import _docker_args

    plan = _plan()
    assert "STEPOP_ENV_GREETING=it's $$HOME" in _docker_args(plan, plan.builds[-1])


def test_the_buildspec_runs_in_bash_and_logs_in_to_the_ecr_registrys_own_region():
    ecr = "123456789012.dkr.ecr.eu-west-1.amazonaws.com/env"
    spec = json.loads(buildspec(build_plan(SETTINGS, builder.image_reference(SETTINGS, ecr),
                                           "python:3.11-slim")))  # fmt: skip
    assert spec["env"]["shell"] == "bash"  # the check's process substitution needs bash
    assert "--region eu-west-1 " in spec["phases"]["pre_build"]["commands"][0]


@pytest.mark.parametrize("minutes", ["0", "-5", "100000"])
def test_a_build_timeout_out_of_range_is_refused_before_any_build(images, monkeypatch, minutes):
    monkeypatch.setenv("AIRFLOW__STEPOP__IMAGE_BUILD_TIMEOUT_MINUTES", minutes)
    # the field, the value, and what to give instead
    with pytest.raises(ValueError, match=rf"image_build_timeout_minutes='?{minutes}'?.*\b60\b"):
        start_or_join(CountingBuilder(), _plan(), Storage(), images, "r", lambda: False)
    assert CountingBuilder.started == []
