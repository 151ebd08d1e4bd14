"""The local "service": supervises one step process, the way a job service would.

``python .../local_supervisor.py JOB_DIR -- COMMAND...`` runs COMMAND with
its output appended to JOB_DIR/output.log, forwards SIGTERM/SIGINT to it, and records its exit
code in JOB_DIR/exit_code when it ends. It runs detached from the worker (its own session), so
the job outlives the task process that started it; the exit code survives the worker too.
Standard library only: it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

OUTPUT_LOG = "output.log"
EXIT_CODE = "exit_code"
CHILD_PID = "child.pid"


def main(argv: list[str]) -> int:
    job_dir = Path(argv[0])
    command = argv[argv.index("--") + 1 :]
    with open(job_dir / OUTPUT_LOG, "ab", buffering=0) as log:
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        (job_dir / CHILD_PID).write_text(str(child.pid))

        def forward(signum: int, frame: object) -> None:
            child.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        code = child.wait()
    tmp = job_dir / f".{EXIT_CODE}.tmp"
    tmp.write_text(str(code))
    os.replace(tmp, job_dir / EXIT_CODE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
