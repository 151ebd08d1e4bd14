"""The Vertex job's entry point: sets the step's environment, then runs the step runtime.

Standard library only; the backend uploads this file into the attempt's run directory, and the
worker pool's command is the bootstrap (``backends/bootstrap.py``), which checks this file and
the code bundle against the digests the command carries, puts the bundle in front of
``PYTHONPATH`` and runs this file's checked copy. Everything else comes from the environment
the CustomJob sets (paths under /gcs travel in environment values):

* ``STEPOP_PATH_MAP``: ``{"gs://<bucket>": "/gcs/<bucket>"}`` for every bucket the step reads or
  writes, so the runtime uses Cloud Storage FUSE files and the image needs no Google SDK;
* ``STEPOP_SPEC_URI``;
* ``AIP_CHECKPOINT_DIR`` (from the job's baseOutputDirectory, shared by the task's tries) ->
  ``STEPOP_CHECKPOINT_DIR`` as a local directory;
* ``CLUSTER_SPEC`` -> torch-style MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK and
  LOCAL_RANK when the service has not set them. Only rank 0 writes the step's results; other
  ranks write theirs to a scratch directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile

DEFAULT_MASTER_PORT = "29500"


def local_path(uri: str, path_map: dict) -> str | None:
    """The /gcs path of a gs:// URI (longest mapped prefix), or None."""
    for prefix in sorted(path_map, key=len, reverse=True):
        if uri == prefix or uri.startswith(prefix.rstrip("/") + "/"):
            return path_map[prefix].rstrip("/") + uri[len(prefix.rstrip("/")) :]
    return None


def rank_environment(env: dict) -> dict:
    """Rank variables from CLUSTER_SPEC (pools in order: workerpool0 is the master)."""
    try:
        spec = json.loads(env.get("CLUSTER_SPEC") or "{}")
    except ValueError:
        spec = {}
    cluster = spec.get("cluster") or {}
    task = spec.get("task") or {"type": "workerpool0", "index": 0}
    pools = sorted(cluster) or ["workerpool0"]
    rank = 0
    for pool in pools:
        if pool == task.get("type"):
            rank += int(task.get("index", 0))
            break
        rank += len(cluster.get(pool) or [])
    master = (cluster.get("workerpool0") or ["localhost"])[0]
    host, _, port = master.partition(":")
    out = {
        "MASTER_ADDR": env.get("MASTER_ADDR") or host,
        "MASTER_PORT": env.get("MASTER_PORT") or port or DEFAULT_MASTER_PORT,
        "WORLD_SIZE": env.get("WORLD_SIZE") or str(sum(len(v) for v in cluster.values()) or 1),
        "RANK": env.get("RANK") or str(rank),
    }
    out["NODE_RANK"] = out["RANK"]
    out["LOCAL_RANK"] = "0"
    return out


def main() -> int:
    env = dict(os.environ)
    path_map = json.loads(env["STEPOP_PATH_MAP"])
    env.update(rank_environment(env))
    checkpoints = local_path(env.get("AIP_CHECKPOINT_DIR", ""), path_map)
    if checkpoints:
        os.makedirs(checkpoints, exist_ok=True)
        env["STEPOP_CHECKPOINT_DIR"] = checkpoints
    if env["RANK"] != "0":  # only rank 0's outputs are the step's result
        env["STEPOP_OUTPUT_URI"] = tempfile.mkdtemp(prefix=f"stepop-rank{env['RANK']}-")
    argv = [sys.executable, "-m", "airflow_stepop.runtime", env["STEPOP_SPEC_URI"]]
    child = subprocess.Popen(argv, env=env)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
