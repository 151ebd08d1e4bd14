"""A local container's log relay: each line once, in order, reading only what is new, over
one engine client per backend."""

from __future__ import annotations

import asyncio

import pytest

from airflow_stepop import DockerSettings
from airflow_stepop.backends.local.backend import LocalBackend
from airflow_stepop.backends.log_lines import CONTINUES
from tests.integration.test_local_backend import _submit, steps  # noqa: F401 - the fixture
from tests.waiting import wait_for

EXPECTED_OUT = [f"out {b} {i}" for b in range(5) for i in range(100)] + ["x" * 40000, "out end"]
EXPECTED_ERR = [f"err {b} {i}" for b in range(5) for i in range(0, 100, 10)]
EXPECTED_AFTER = [f"after {i}" for i in range(50)]


def joined(records: list[str]) -> list[str]:
    """The lines the records stand for: a line longer than a task-log record comes in pieces,
    each but its last marked (backends/log_lines.py)."""
    lines, begun = [], ""
    for record in records:
        if record.endswith(CONTINUES):
            begun += record[: -len(CONTINUES)]
        else:
            lines.append(begun + record)
            begun = ""
    return lines


class EngineReads:
    """What the engine sent for each logs call of the backend (the SDK's answer, passed on)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from docker.models.containers import Container

        self.sizes: list[int] = []
        logs = Container.logs

        def measured(container, **kwargs):
            answer = logs(container, **kwargs)
            if isinstance(answer, bytes):
                self.sizes.append(len(answer))
                return answer
            frames = list(answer)
            answer.close()
            self.sizes.append(sum(len(frame) for frame in frames))
            return _Frames(frames)

        monkeypatch.setattr(Container, "logs", measured)


class _Frames(list):
    def close(self) -> None:
        pass


@pytest.mark.container
def test_container_logs_relay_each_line_once_reading_only_new_output_over_one_client(
    tmp_path,
    steps,  # noqa: F811
    docker_client,
    monkeypatch,
):
    from airflow_stepop.images import builder
    from tests.integration.conftest import BASE_IMAGE

    made = []  # every engine client a backend makes
    engine_client = builder.engine_client

    def counted(*args, **kwargs):
        made.append(engine_client(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(builder, "engine_client", counted)
    release = tmp_path / "root" / "release"  # the artifact root is mounted as is
    backend, handle, _, storage = _submit(
        tmp_path, steps.bursts, [str(release)], docker=DockerSettings(parent_image=BASE_IMAGE)
    )
    polls = LocalBackend(**backend.serialize())  # as a triggerer rebuilds it
    reads = EngineReads(monkeypatch)
    made.clear()  # the submit's own client (closed with it) is not the polls'
    relayed: list[str] = []
    cursor = None

    def poll() -> bool:
        nonlocal cursor
        lines, cursor = polls._logs(handle, cursor)
        relayed.extend(line for line in lines if line.startswith(("out", "err", "after", "x")))
        return polls._status(handle).terminal

    try:
        wait_for(lambda: poll() or relayed[-1:] == ["out end"], 180, "the first phase")
        assert joined([line for line in relayed if not line.startswith("err")]) == EXPECTED_OUT
        assert [line for line in relayed if line.startswith("err")] == EXPECTED_ERR
        poll()  # nothing new: little comes from the engine
        assert relayed[-1] == "out end"
        assert len(reads.sizes) >= 2 and max(reads.sizes[-2:]) < 1024  # the output is 50 KB

        release.touch()
        wait_for(poll, 120, "the step to end")
        poll()  # the last read, as the trigger's
        assert joined(relayed)[len(EXPECTED_OUT) + len(EXPECTED_ERR) :] == EXPECTED_AFTER
        assert storage.read_json(handle["run_uri"] + "/result.json")["outputs"]["inline"] == "done"
        assert len(made) == 1  # one client for every status and logs call
        closed = []
        monkeypatch.setattr(made[0], "close", lambda: closed.append(True))
        asyncio.run(polls.aclose())
        assert closed == [True]
    finally:
        for container in docker_client.containers.list(
            all=True, filters={"name": handle["job_id"]}
        ):
            container.remove(force=True)
