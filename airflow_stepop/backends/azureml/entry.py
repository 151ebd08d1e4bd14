"""The Azure ML job's entry point: sets the step's environment, then runs the step runtime.

Standard library only; the backend uploads this file and ``stepop_launch.json`` into the run
directory (the job's ``run`` input), and the job's command is the bootstrap
(``backends/bootstrap.py``), which checks both and the code bundle against the digests the
command carries, puts the bundle in front of ``PYTHONPATH`` and runs
``python3 <checked copy of this file> <checked launch file> name=<path> ...``, one argument per
job input and output, with the paths Azure ML mounted or downloaded them to. The launch
document holds:

* ``path_map``: URI prefix -> input/output name, exported as ``STEPOP_PATH_MAP`` (prefix ->
  local path) so the runtime reads and writes those URIs as local files;
* ``spec_uri``, ``output_uri`` and ``checkpoints`` (the output shared by a task's tries).

Azure ML's PyTorch distribution sets RANK, LOCAL_RANK, WORLD_SIZE, NODE_RANK, MASTER_ADDR and
MASTER_PORT per process; a single process gets rank 0 of 1. Only rank 0 writes the results
Azure ML uploads: other ranks write theirs to a scratch directory. When the step fails, its
exception's type and message are the last line of the log, which Azure ML quotes in the error.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

SINGLE = {"RANK": "0", "LOCAL_RANK": "0", "NODE_RANK": "0", "WORLD_SIZE": "1",
          "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}  # fmt: skip


def parse_paths(args: list) -> dict:
    """``name=path`` arguments -> {name: path}."""
    return dict(arg.split("=", 1) for arg in args if "=" in arg)


def main(argv: list) -> int:
    paths = parse_paths(argv[2:])
    with open(argv[1]) as handle:
        launch = json.load(handle)
    env = dict(os.environ)
    env.update(launch.get("environment", {}))
    for key, value in SINGLE.items():
        env.setdefault(key, value)
    path_map = {prefix: paths[name] for prefix, name in launch["path_map"].items()}
    if launch.get("checkpoints"):
        env["STEPOP_CHECKPOINT_DIR"] = paths[launch["checkpoints"]]
    if env["RANK"] == "0":
        env["STEPOP_OUTPUT_URI"] = launch["output_uri"]
    else:  # only rank 0's outputs are the step's result
        scratch = tempfile.mkdtemp(prefix=f"stepop-rank{env['RANK']}-")
        env["STEPOP_OUTPUT_URI"] = scratch
        path_map.pop(launch["output_uri"], None)
    env["STEPOP_PATH_MAP"] = json.dumps(path_map)
    child = subprocess.Popen([sys.executable, "-m", "airflow_stepop.runtime", launch["spec_uri"]],
                             env=env)  # fmt: skip
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    status = child.wait()
    if status != 0 and env["RANK"] == "0":
        _report_failure(os.path.join(path_map.get(launch["output_uri"], ""), "error.json"))
    return status


def _report_failure(error_file: str) -> None:
    """The step's exception as the log's last line (Azure ML quotes the log's end)."""
    try:
        with open(error_file) as handle:
            error = json.load(handle)
        print(f"{error['type']}: {error['message']}"[:900], file=sys.stderr, flush=True)
    except (OSError, ValueError, KeyError):
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
