"""The local backend's supervisor: a stop must reach the step however early it comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from airflow_stepop.backends.local import supervisor as local_supervisor
from tests.processes import process_alive
from tests.waiting import wait_for


def test_a_stop_that_comes_while_the_step_starts_reaches_the_step(tmp_path):
    """SIGTERM to the supervisor just after it started the step (a task killed right after its
    submit) must be forwarded to the step, not end the supervisor alone: that left the step
    running with nobody to stop it or record its end, and its job read as stopped.

    The supervisor is held in that moment, deterministically: its record of the step's pid is
    a FIFO, so a supervisor that writes the record in place waits there until it is read."""
    job_dir, started = tmp_path / "job", tmp_path / "started"
    job_dir.mkdir()
    os.mkfifo(job_dir / local_supervisor.CHILD_PID)
    step = f"import os, time; open({str(started)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    command = [sys.executable, "-c", step]
    supervisor = subprocess.Popen(
        [sys.executable, local_supervisor.__file__, str(job_dir), "--", *command],
        start_new_session=True,
    )
    step_pid = None
    try:
        step_pid = int(wait_for(lambda: started.exists() and started.read_text(), 60, "a step"))
        supervisor.send_signal(signal.SIGTERM)
        reader = os.open(job_dir / local_supervisor.CHILD_PID, os.O_RDONLY | os.O_NONBLOCK)
        try:  # a supervisor that waits to write the FIFO goes on
            supervisor.wait(60)
        finally:
            os.close(reader)
        exit_code = job_dir / local_supervisor.EXIT_CODE
        assert exit_code.exists(), "the supervisor ended before the step"
        assert exit_code.read_text() == str(-signal.SIGTERM)  # the step got the stop
        assert not process_alive(step_pid)
    finally:
        if step_pid is not None and process_alive(step_pid):
            os.kill(step_pid, signal.SIGKILL)
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()
