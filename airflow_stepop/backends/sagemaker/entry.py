"""The SageMaker job's entry point: sets the step's environment, then runs the step runtime.

Standard library only; the backend uploads this file and ``stepop_launch.json`` into the job's
run channel, and the job's command is the bootstrap (``backends/bootstrap.py``), which checks
both and the code bundle against the digests the command carries, puts the bundle in front of
``PYTHONPATH`` and runs ``python3 <checked copy of this file> <checked launch file> /opt/ml``.
The launch document holds:

* ``environment``: values the service's Environment cannot carry (longer than 512 characters);
* ``path_map``: URI prefix -> path relative to /opt/ml (channels, the model directory), exported
  as ``STEPOP_PATH_MAP`` so the runtime reads and writes those URIs as local files;
* ``spec_uri`` and ``output_uri``.

From ``/opt/ml/input/config/resourceconfig.json`` it exports torch-style MASTER_ADDR,
MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK and LOCAL_RANK (one process per node). Only rank 0
writes the outputs the service uploads: other ranks write theirs to a scratch directory. When the
step fails, the exception's type and message go to /opt/ml/output/failure, which the service
reports as the job's FailureReason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

DEFAULT_MASTER_PORT = "29500"


def rank_environment(resource_config: dict) -> dict:
    hosts = list(resource_config.get("hosts") or [resource_config.get("current_host", "algo-1")])
    current = resource_config.get("current_host", hosts[0])
    rank = hosts.index(current) if current in hosts else 0
    return {
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": os.environ.get("MASTER_PORT") or DEFAULT_MASTER_PORT,
        "WORLD_SIZE": str(len(hosts)),
        "RANK": str(rank),
        "NODE_RANK": str(rank),
        "LOCAL_RANK": "0",
    }


def main(argv: list) -> int:
    launch_file, ml = argv[1], argv[2]
    with open(launch_file) as handle:
        launch = json.load(handle)
    env = dict(os.environ)
    env.update(launch.get("environment", {}))
    config_file = os.path.join(ml, "input", "config", "resourceconfig.json")
    resource_config = {}
    if os.path.exists(config_file):
        with open(config_file) as handle:
            resource_config = json.load(handle)
    env.update(rank_environment(resource_config))
    path_map = {prefix: os.path.join(ml, rel) for prefix, rel in launch["path_map"].items()}
    output_dir = os.path.join(ml, "model")
    if env["RANK"] == "0":
        env["STEPOP_OUTPUT_URI"] = launch["output_uri"]
    else:  # only rank 0's outputs are the step's result
        output_dir = tempfile.mkdtemp(prefix=f"stepop-rank{env['RANK']}-")
        env["STEPOP_OUTPUT_URI"] = output_dir
        path_map.pop(launch["output_uri"], None)
    env["STEPOP_PATH_MAP"] = json.dumps(path_map)
    child = subprocess.Popen([sys.executable, "-m", "airflow_stepop.runtime", launch["spec_uri"]],
                             env=env)  # fmt: skip
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    code = child.wait()
    if code != 0:
        _report_failure(os.path.join(output_dir, "error.json"), os.path.join(ml, "output"))
    return code


def _report_failure(error_file: str, output_dir: str) -> None:
    """The step's exception as the job's FailureReason (the service reads output/failure)."""
    try:
        with open(error_file) as handle:
            error = json.load(handle)
        text = f"{error['type']}: {error['message']}"
    except (OSError, ValueError, KeyError):
        return
    try:
        os.makedirs(output_dir, exist_ok=True)
        with open(os.path.join(output_dir, "failure"), "w") as handle:
            handle.write(text[:900])
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv))
