"""The local backend's timer job, :func:`write_local_timer`: the ``timer`` mode of
:mod:`cloud.runner` for ``LocalBackend`` (scale benchmarks only)."""

from __future__ import annotations

import os

LOCAL_TIMER = """#!/bin/sh
# A timer job for LocalBackend(python=THIS): called as `THIS SUPERVISOR JOB_DIR -- COMMAND...`, it
# keeps the supervisor's protocol (the inherited job lock, output.log, exit_code) and runs nothing.
job_dir=$2
finish() {{
  echo "$1" > "$job_dir/.{exit_code}.tmp" && mv "$job_dir/.{exit_code}.tmp" "$job_dir/{exit_code}"
  exit 0
}}
trap 'kill $pid 2>/dev/null; finish -15' TERM INT
echo "timer job: ends {when}"
{wait} & pid=$!
echo $pid > "$job_dir/{child_pid}"
wait $pid
finish 0
"""


def write_local_timer(path: str, seconds: float = 60.0, fifo: str | None = None) -> str:
    """Write the local backend's timer interpreter (the ``timer`` mode of cloud.runner); its path.

    ``LocalBackend(python=path).submit(...)`` then starts a job that ends with exit code 0 after
    ``seconds``, or with ``fifo`` (a named pipe that someone holds open for writing, e.g.
    ``os.open(fifo, os.O_RDWR)``) when its last writer closes it; -15 when stopped. So a
    thousand local jobs fit on a small machine. The step's code never runs: a control-plane
    benchmark only.
    """
    from airflow_stepop.backends.local import supervisor

    text = LOCAL_TIMER.format(
        exit_code=supervisor.EXIT_CODE,
        child_pid=supervisor.CHILD_PID,
        when=f"when {fifo} closes" if fifo else f"in {seconds:g}s",
        wait=f"cat '{fifo}' > /dev/null" if fifo else f"sleep {seconds:g}",
    )
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)
    return path
