"""Vertex AI steps on a worker with no container engine: Cloud Build builds their images."""

from __future__ import annotations

import os

import pytest

from tests.integration.service_builds import PARENT, TASKS, prepare_mapped


def test_ten_mapped_tasks_needing_one_new_tag_start_one_cloud_build(gcp, monkeypatch):
    from airflow_stepop.backends.vertex.backend import VertexBackend
    from airflow_stepop.backends.vertex.cloud_build import CloudBuildBuilder
    from airflow_stepop.backends.vertex.config import VertexJobConfig

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")  # no engine answers this worker
    backend = VertexBackend(job=VertexJobConfig(machine_type="n1-standard-4"))

    prepared = prepare_mapped(backend, gcp["root"], "google_cloud_default")

    image = prepared[0].image_build.handle["image"]
    assert {p.body["image"] for p in prepared} == {image}
    assert len({p.image_build.handle["job_id"] for p in prepared}) == 1
    assert sum(bool(p.image_build.handle.get("joined")) for p in prepared) == TASKS - 1
    builder = CloudBuildBuilder(project_id=backend.access.project, location=backend.access.region)
    tag = "stepop-" + image.rsplit(":", 1)[1]
    found = builder.client.list_builds(
        request={"parent": backend.access.parent, "project_id": backend.access.project,
                 "filter": f'tags="{tag}"'}
    )  # fmt: skip
    assert len(list(found)) == 1  # Cloud Build was asked for one build, whoever started it
    prepared[0].image_build.wait(poll_seconds=0.5, timeout=300)


def test_a_build_context_rewritten_in_the_store_before_the_build_fails_the_build(gcp, monkeypatch):
    """A job can write the artifact root, where the context waits for Cloud Build: the build's
    first step checks the files against the worker's sums (carried in the build request)."""
    import io
    import tarfile

    from airflow_stepop.backends.image_build import ImageBuildFailedError
    from airflow_stepop.backends.vertex.backend import VertexBackend
    from airflow_stepop.backends.vertex.config import VertexJobConfig
    from cloud.control import FakeControl

    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    backend = VertexBackend(job=VertexJobConfig(machine_type="n1-standard-4"))
    cloudbuild = FakeControl(os.environ["STEPOP_CLOUDBUILD_ENDPOINT"])
    with cloudbuild.faulted({"kind": "provisioning_delay", "seconds": 3}):
        [prepared] = prepare_mapped(backend, gcp["root"], "google_cloud_default", 1)
        handle = prepared.image_build.handle
        builder = prepared.image_build.builder()
        source = builder.client.get_build(request={"name": handle["name"]}).source.storage_source
        evil = io.BytesIO()
        with tarfile.open(fileobj=evil, mode="w:gz") as archive:  # as a job could write it
            text = f"FROM {PARENT}\nRUN echo evil > /evil\n".encode()
            info = tarfile.TarInfo("stepop/Dockerfile")
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text))
        gcp["gcs"].bucket(source.bucket).blob(source.object_).upload_from_string(evil.getvalue())
    with pytest.raises(ImageBuildFailedError, match="failed"):
        prepared.image_build.wait(poll_seconds=0.5, timeout=300)
    build = builder.client.get_build(request={"name": handle["name"]})
    assert build.steps[0].status.name == "FAILURE"  # the check, before any docker build
