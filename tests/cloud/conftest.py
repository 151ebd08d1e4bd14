"""Fixtures of the emulated clouds (see cloud/pytest_plugin.py and docs/testing.md)."""

from cloud.pytest_plugin import (  # noqa: F401 - fixtures and the `live` skip hook
    aws_target,
    azure_target,
    cloud_environ,
    cloud_stack,
    docker_engine,
    gcp_target,
    pytest_collection_modifyitems,
    registry_image,
)
