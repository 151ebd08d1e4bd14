"""The runtime's failure report: it starts at the step's own frames; a stopped step (SIGTERM)
still leaves it, however many SIGTERMs come; a step past its own max_runtime
(``STEPOP_MAX_RUNTIME_S``) ends itself with one, and is ended even if it ignores that."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from airflow_stepop.packaging.staging import StepIdentity, stage_step
from airflow_stepop.runtime.storage import Storage
from tests.step_modules import step_module


@pytest.fixture
def stop_steps(tmp_path, monkeypatch):
    """Steps that stop themselves, importable by name (no Airflow import in their module)."""
    yield from step_module(
        tmp_path,
        monkeypatch,
        "stop_steps",
        """
            import os, signal, sys, threading

            class _SecondStop:
                # A second SIGTERM (one forwarded by each of two layers) that arrives while
                # the runtime writes the report of the first: on its first write to stderr.
                def __init__(self, stream):
                    self.stream, self.sent = stream, False

                def write(self, text):
                    if not self.sent:
                        self.sent = True
                        os.kill(os.getpid(), signal.SIGTERM)
                    return self.stream.write(text)

                def flush(self):
                    self.stream.flush()

            def stopped_twice():
                sys.stderr = _SecondStop(sys.stderr)
                os.kill(os.getpid(), signal.SIGTERM)
                return "not stopped"

            def fails_then_stopped():
                sys.stderr = _SecondStop(sys.stderr)
                raise ValueError("the step's own failure")

            def parse_rows(text):
                return [int(row) for row in text.split(",")]

            def raises():
                return parse_rows("1,2,x")

            def never_ends():
                threading.Event().wait()

            def ignores_its_limit():
                while True:
                    try:
                        threading.Event().wait()
                    except BaseException:
                        print("ignoring it", file=sys.stderr, flush=True)
        """,
    )


def _run_step(tmp_path, function, env=None):
    storage = Storage()
    staged = stage_step(
        function,
        [],
        {},
        root=f"file://{tmp_path}/root",
        step=StepIdentity("dag", "run", function.__name__, -1, 1),
        storage=storage,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")} | (env or {})
    process = subprocess.run(
        [sys.executable, "-m", "airflow_stepop.runtime", staged.spec_uri],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    error_uri = staged.run_uri + "/error.json"
    error = storage.read_json(error_uri) if storage.exists(error_uri) else None
    return process, error


def test_the_report_and_the_log_show_the_traceback_from_the_steps_own_frames(tmp_path, stop_steps):
    process, error = _run_step(tmp_path, stop_steps.raises)

    assert process.returncode == 1
    frames = error["traceback"].splitlines()
    assert frames[0] == "Traceback (most recent call last):"
    assert frames[1].endswith(", in raises"), error["traceback"]  # no runtime frame above it
    assert frames[-1] == "ValueError: invalid literal for int() with base 10: 'x'"
    assert "parse_rows" in error["traceback"]
    assert error["traceback"] in process.stderr  # the log shows the same lines


def test_a_second_sigterm_during_the_report_leaves_the_report_whole(tmp_path, stop_steps):
    process, error = _run_step(tmp_path, stop_steps.stopped_twice)

    assert error is not None, process.stderr  # the report was written
    assert error["type"] == "StepStopped"
    assert "stopped_twice" in error["traceback"]
    assert process.returncode == 143, process.stderr
    assert "During handling of the above exception" not in process.stderr
    assert process.stderr.count("Traceback (most recent call last)") == 1, process.stderr


def test_a_sigterm_while_a_failed_steps_report_is_written_keeps_the_steps_error(
    tmp_path, stop_steps
):
    process, error = _run_step(tmp_path, stop_steps.fails_then_stopped)

    assert error is not None, process.stderr
    assert (error["type"], error["message"]) == ("ValueError", "the step's own failure")
    assert process.returncode == 1, process.stderr
    assert "StepStopped" not in process.stderr


def test_a_step_past_its_max_runtime_ends_itself_and_reports_why(tmp_path, stop_steps):
    process, error = _run_step(tmp_path, stop_steps.never_ends, {"STEPOP_MAX_RUNTIME_S": "1"})

    assert process.returncode == 124, process.stderr
    assert error is not None, process.stderr
    assert error["type"] == "StepTimedOut"
    assert "ran past its max_runtime of 1 s ($STEPOP_MAX_RUNTIME_S)" in error["message"]


def test_a_step_that_ignores_its_max_runtime_is_ended_by_the_kernel(tmp_path, stop_steps):
    process, _ = _run_step(tmp_path, stop_steps.ignores_its_limit, {"STEPOP_MAX_RUNTIME_S": "1"})

    assert "ignoring it" in process.stderr  # StepTimedOut reached the step, which swallowed it
    assert process.returncode == -signal.SIGALRM, process.stderr


def test_a_malformed_max_runtime_is_refused_by_name(tmp_path, stop_steps):
    process, error = _run_step(tmp_path, stop_steps.never_ends, {"STEPOP_MAX_RUNTIME_S": "1h"})

    assert process.returncode != 0
    assert "STEPOP_MAX_RUNTIME_S='1h' must be a whole number of seconds >= 1" in process.stderr
