"""Timer jobs of the scale benchmark: they end when told, and the backends read them as jobs."""

from __future__ import annotations

import os
import time
from pathlib import Path

from airflow_stepop.backends.base import JobRequest
from airflow_stepop.backends.local.backend import LocalBackend
from cloud.runner import MODE_TIMER, JobLaunch, Runner, write_local_timer
from tests.waiting import wait_for


def test_timer_nodes_run_until_the_time_in_the_end_file(tmp_path, monkeypatch):
    end_file = tmp_path / "end"
    monkeypatch.setenv("STEPOP_FAKE_TIMER_SECONDS", "0")  # the end file overrides it
    monkeypatch.setenv("STEPOP_FAKE_TIMER_END_FILE", str(end_file))
    lines: list[str] = []
    run = Runner(MODE_TIMER).launch(
        JobLaunch(fake="test", name="timer", image="none", entrypoint=None),
        on_line=lambda node, stream, line, at: lines.append(line),
    )
    assert run.wait(timeout=1.5) is None  # no end file yet: still running
    end_file.write_text(repr(time.time() + 0.5))
    assert run.wait(timeout=10) == 0
    assert lines == [f"timer node node-0: ends at the time in {end_file}"]


def _request(tmp_path: Path, name: str) -> JobRequest:
    bundle = tmp_path / "code.zip"
    bundle.write_bytes(b"")  # the timer never runs the step's code
    return JobRequest(
        job_name=name,
        task_key=f"dag/run/{name}/-1",
        spec_uri=f"file://{tmp_path}/spec.json",
        run_uri=f"file://{tmp_path}/run",
        code_uri=f"file://{bundle}",
    )


def test_local_timer_jobs_end_when_the_fifo_closes_or_when_stopped(tmp_path):
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    held = os.open(fifo, os.O_RDWR)
    timer = write_local_timer(str(tmp_path / "timer.sh"), fifo=str(fifo))
    backend = LocalBackend(jobs_dir=str(tmp_path / "jobs"), python=timer)
    ending, stopped = (backend.submit(_request(tmp_path, n)) for n in ("ending", "stopped"))
    try:
        assert backend.status(ending).state == "running"
        backend.stop(stopped)
        assert backend.status(stopped).state == "stopped"
        assert backend.status(ending).state == "running"
    finally:
        os.close(held)
    wait_for(lambda: backend.status(ending).terminal, timeout=10, what="the timer job's end")
    assert backend.status(ending).state == "succeeded"
    lines, _ = backend._logs(ending, None)
    assert lines == [f"timer job: ends when {fifo} closes"]
