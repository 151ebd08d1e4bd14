"""The local "service": supervises one step process, the way a job service would.

``python .../supervisor.py JOB_DIR -- COMMAND...`` runs COMMAND with
its output appended to JOB_DIR/output.log, forwards SIGTERM/SIGINT to it, and records its exit
code in JOB_DIR/exit_code when it ends. It runs detached from the worker (its own session), so
the job outlives the task process that started it; the exit code survives the worker too.
It records the step's pid and start time in JOB_DIR/child.pid, so that a step that outlived its
supervisor (killed with SIGKILL) can still be found and stopped, and a reused pid is not.
The step's temporary directory (JOB_DIR/tmp, its ``TMPDIR``: the bootstrap's checked copy of the
code bundle, the step's own scratch files) is removed when it ends, as a container's would be.
Standard library only: it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

OUTPUT_LOG = "output.log"
SCRATCH = "tmp"
EXIT_CODE = "exit_code"
CHILD_PID = "child.pid"
FORWARDED = (signal.SIGTERM, signal.SIGINT)


def main(argv: list[str]) -> int:
    job_dir = Path(argv[0])
    command = argv[argv.index("--") + 1 :]
    # A stop that comes while the step starts is held back until the handlers can forward it:
    # with the default action it would end the supervisor, and the step would run on unwatched.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    with open(job_dir / OUTPUT_LOG, "ab", buffering=0) as log:
        child = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=_unblock_forwarded
        )
        started = process_stat(child.pid)
        _write(job_dir, CHILD_PID, f"{child.pid} {started[0]}" if started else str(child.pid))

        def forward(signum: int, frame: object) -> None:
            child.send_signal(signum)

        for signum in FORWARDED:
            signal.signal(signum, forward)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)  # a pending stop goes out now
        code = child.wait()
    shutil.rmtree(job_dir / SCRATCH, ignore_errors=True)
    _write(job_dir, EXIT_CODE, str(code))
    return 0


def _unblock_forwarded() -> None:
    """In the step's process, before its exec: a signal mask is inherited across exec, and a
    step that never sees SIGTERM could not be stopped gracefully."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)


def _write(job_dir: Path, name: str, text: str) -> None:
    """Whole or not at all: a reader never sees a half-written record."""
    tmp = job_dir / f".{name}.tmp"
    tmp.write_text(text)
    os.replace(tmp, job_dir / name)


def process_stat(pid: int) -> tuple[str, int] | None:
    """A live process's start time (clock ticks since boot) and process group, from /proc.

    The pid and the start time name one process for good, where a pid alone may be reused.
    None when it is gone or a zombie, or without /proc (not Linux).
    """
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X"):
            return None
        return fields[19], int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
