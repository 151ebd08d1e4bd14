"""Which mode a fake's job runs in (cloud.runner.images): the plain base image in a process,
any other image in a container, so a step never passes on this virtualenv's packages instead of
its image's."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from cloud.runner import MODE_CONTAINER, MODE_PROCESS, MODE_TIMER, BaseImage, LaunchError, Runner

BASE = BaseImage("stepop-base/python:3.11-bookworm", "127.0.0.1:5000")


def test_the_base_image_by_name_runs_in_a_process_and_any_other_image_in_a_container() -> None:
    for image in (
        "stepop-base/python:3.11-bookworm",
        "127.0.0.1:5000/stepop-base/python:3.11-bookworm",
        "docker.io/stepop-base/python:3.11-bookworm",
    ):
        assert BASE.choose(image, MODE_PROCESS, None) == MODE_PROCESS, image
    for image in (
        "127.0.0.1:5000/stepop/nowhere:v1",  # the registry has no such image
        "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",  # nor does anyone here
        "stepop-base/python:3.12-bookworm",
    ):
        assert BASE.choose(image, MODE_PROCESS, None) == MODE_CONTAINER, image


def test_a_jobs_own_mode_wins_and_container_and_timer_runners_stay_as_they_are() -> None:
    other = "127.0.0.1:5000/stepop/nowhere:v1"
    assert BASE.choose(other, MODE_PROCESS, MODE_PROCESS) == MODE_PROCESS
    assert BASE.choose(BASE.reference, MODE_PROCESS, MODE_CONTAINER) == MODE_CONTAINER
    assert BASE.choose(other, MODE_TIMER, None) == MODE_TIMER
    assert BASE.choose(BASE.reference, MODE_CONTAINER, None) == MODE_CONTAINER
    with pytest.raises(LaunchError, match="stepop_fake_mode='fast': use one of"):
        BASE.choose(other, MODE_PROCESS, "fast")
    runner = Runner(MODE_PROCESS, base_image=BASE)
    assert runner.mode_for(BASE.reference) == MODE_PROCESS
    assert runner.mode_for(other) == MODE_CONTAINER


@pytest.fixture
def built(docker_engine: Any, registry_image: str) -> Iterator[Any]:
    """Build a one-off image on the base: ``built(dockerfile_lines) -> reference``; removed
    from the engine afterwards (a pushed one stays in the registry, as other tests' do)."""
    tags: list[str] = []

    def build(*lines: str) -> str:
        registry = registry_image.split("/", 1)[0]
        tag = f"{registry}/stepop-runner-images:{uuid.uuid4().hex[:12]}"
        text = "\n".join([f"FROM {registry_image}", *lines]) + "\n"
        docker_engine.images.build(fileobj=io.BytesIO(text.encode()), tag=tag, rm=True)
        tags.append(tag)
        return tag

    yield build
    for tag in tags:
        docker_engine.images.remove(tag, force=True)


@pytest.mark.container
def test_a_copy_of_the_base_is_the_base_by_content_and_one_more_line_is_not(
    built: Any, docker_engine: Any, registry_image: str
) -> None:
    base = BaseImage("stepop-base/python:3.11-bookworm", registry_image.split("/", 1)[0])
    engine = lambda: docker_engine  # noqa: E731 - the engine factory the runner passes

    copy = built()  # a Dockerfile that is only FROM <base>: the base's image ID
    assert base.is_base(copy, engine)  # the engine's image store knows it
    assert not base.is_base(copy)  # not pushed: the registry alone does not know it
    docker_engine.images.push(copy.rsplit(":", 1)[0], tag=copy.rsplit(":", 1)[1])
    assert base.is_base(copy)  # the registry's manifest names the base's config

    with_env = built("ENV STEPOP_SALT=1")  # one setting more: another image
    assert not base.is_base(with_env, engine)
    assert base.choose(with_env, MODE_PROCESS, None, engine) == MODE_CONTAINER
    assert base.choose(copy, MODE_PROCESS, None, engine) == MODE_PROCESS
