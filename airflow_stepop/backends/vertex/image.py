"""The image a Vertex AI step's job runs: as given, built by the worker's engine, or built by
Cloud Build while the task is deferred (``[stepop] vertex_image_build``).

Vertex AI pulls public images and Artifact Registry's, so a parent image alone is used as it is.
A built one goes to ``image_repository=``, ``[stepop] vertex_image_repository``, or the
repository ``<location>-docker.pkg.dev/<project>/airflow-stepop`` (created once by the user).
"""

from __future__ import annotations

from typing import Any

from airflow_stepop.backends.vertex.job import VertexConfigError
from airflow_stepop.images.builder import ImageChoice


def job_image(backend: Any, request: Any, storage: Any) -> ImageChoice:
    """The image of ``backend.job`` (a ``VertexJobConfig``) for ``request``."""
    job, access = backend.job, backend.access
    if job.image_uri:
        return ImageChoice(job.image_uri)
    if request.docker is None:
        raise VertexConfigError("Vertex steps need image_uri= or docker=DockerSettings")
    from airflow_stepop import config
    from airflow_stepop.backends.image_build import build_mode, images_root, start_or_join
    from airflow_stepop.images import builder, registry

    repository = (
        job.image_repository
        or config.get("vertex_image_repository")
        or f"{access.region}-docker.pkg.dev/{access.project}/airflow-stepop"
    )

    def cloud_build(plan: Any, present: Any) -> Any:
        from airflow_stepop.backends.vertex.cloud_build import CloudBuildBuilder

        service = CloudBuildBuilder(
            backend.gcp_conn_id, access.project, access.region, backend.impersonation_chain
        )
        return start_or_join(service, plan, storage, images_root(request), request.run_uri,
                             present)  # fmt: skip

    return builder.service_image(
        request.docker,
        lambda: registry.prepare_google(repository, access.registry_password),
        mode=build_mode("vertex"),
        service_build=cloud_build,
    )
