"""Vertex AI steps on a worker with no container engine: Cloud Build builds their images."""

from __future__ import annotations

from tests.integration.service_builds import TASKS, prepare_mapped


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
