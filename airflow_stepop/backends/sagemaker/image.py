"""Which images SageMaker's training machines can pull, and the image a step's job runs.

SageMaker pulls training images from Amazon ECR; other registries need ``TrainingImageConfig``
in VPC mode (a registry reachable in the job's VPC), which this provider does not set. So an
``image_uri`` elsewhere is refused before anything is submitted, and a ``DockerSettings`` with
only a parent image elsewhere (``python:3.11-slim`` on Docker Hub) is copied to the image
repository (``builder.service_image`` with ``pullable``). The image repository's own registry
counts as pullable too: that is where built images go, and how the emulated cloud's registry
stands in for ECR.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:
    from airflow_stepop.images.builder import ImageChoice

IMAGE_EXAMPLE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1.0"


def service_can_pull(image: str, repository: str | None) -> bool:
    """Whether SageMaker's training machines can pull ``image``.

    They pull from Amazon ECR (``<account>.dkr.ecr.<region>.amazonaws.com[.cn]/...``). Other
    registries need ``TrainingImageConfig`` in VPC mode, which this provider does not set, so
    only one more host counts: that of the step's image ``repository`` (where built images are
    pushed: the emulated cloud's registry stands in for ECR this way).
    """
    from airflow_stepop.images.reference import ecr_match, registry_host

    host = registry_host(image)
    if ecr_match(host):
        return True
    return repository is not None and host == registry_host(repository)


def check_image_uri(owner: str, image_uri: str, repository: str | None) -> None:
    """Refuse an ``image_uri`` SageMaker cannot pull, before anything is submitted."""
    if service_can_pull(image_uri, repository):
        return
    from airflow_stepop.images.reference import ecr_match, registry_host

    also = ""
    if repository is not None and not ecr_match(repository):
        also = f" or the image repository's registry {registry_host(repository)!r}"
    raise SettingsError(
        f"{owner}.image_uri={image_uri!r} is an image SageMaker cannot pull: training jobs pull "
        f"from Amazon ECR{also} only. Push it to ECR and give that URI (e.g. {IMAGE_EXAMPLE!r}), "
        f"or use docker=DockerSettings(parent_image={image_uri!r}) instead of image_uri= to "
        "have it copied to the image repository before the job starts."
    )


def job_image(backend: Any, request: Any, storage: Any) -> ImageChoice:
    """The image of ``backend.job`` (a ``SageMakerJobConfig``) for ``request``: as given, built
    by the worker's engine, or a CodeBuild build to wait for (``[stepop]
    sagemaker_image_build``)."""
    from airflow_stepop.images.builder import ImageChoice

    job = backend.job
    if job.image_uri:
        return ImageChoice(job.image_uri)
    docker = request.docker
    if docker is None:
        from airflow_stepop.backends.sagemaker.launch import SageMakerConfigError

        raise SageMakerConfigError("SageMaker steps need image_uri= or docker=DockerSettings")
    from airflow_stepop import config
    from airflow_stepop.backends.image_build import build_mode, images_root, start_or_join
    from airflow_stepop.images import builder, registry

    repository = job.image_repository

    def codebuild(plan: Any, present: Callable[[], bool]) -> Any:
        from airflow_stepop.backends.sagemaker.codebuild import CodeBuildBuilder

        service = CodeBuildBuilder(backend.aws_conn_id, backend.region_name,
                                   config.get("sagemaker_codebuild_project"))  # fmt: skip
        return start_or_join(service, plan, storage, images_root(request), request.run_uri,
                             present)  # fmt: skip

    return builder.service_image(
        docker,
        lambda: registry.prepare(
            repository or backend._default_repository(),
            aws_conn_id=backend.aws_conn_id,
            region_name=backend.region_name,
        ),
        pullable=lambda image: service_can_pull(image, repository),
        mode=build_mode("sagemaker"),
        service_build=codebuild,
    )
