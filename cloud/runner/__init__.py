"""The job runner every fake uses to really run a job: one local process or container per node.

A fake translates its service's request into a :class:`JobLaunch` (image, entrypoint and args,
env, mounts, nodes) and hands it to :class:`Runner`. The runner starts one process or container
per node, streams every output line to a callback (so the fake can write it to CloudWatch Logs or
wherever its service keeps logs), reports exit codes and stops nodes (SIGTERM, then SIGKILL).

Three modes, same contract. Which one a job gets (:meth:`Runner.mode_for`, the rule in
:mod:`~cloud.runner.images`): the job's own mode when its fake honours one (the
``stepop_fake_mode`` label or tag); else the runner's mode, except that a ``process`` runner runs
only the stack's plain base image in a process and every other image (one built with
requirements, apt packages, an environment or a Dockerfile) in a container, so a step always
runs in what was built for it. The plain base image is ``STEPOP_TEST_BASE_IMAGE`` as a local
name or in the stack's registry, or any image with its image ID (the config digest: a copy
built ``FROM`` it alone has it), read from the registry's v2 API or the engine.

``process`` (default; container creation costs seconds here; the plain base image only)
    Each node gets its own root directory under a per-job temporary directory. Every mount's
    container path is a symlink under that root to the mount's host directory, so
    ``/opt/ml/model`` becomes ``<tmp>/<node>/opt/ml/model``. Container paths that appear in the
    entrypoint, the args or the env values are rewritten to the re-rooted paths (only paths that
    start with a mount path, the working dir or a prefix of ``JobLaunch.reroot``). A job that
    hard-codes a path in its own code is not re-rooted: pass paths through args or env. A leading
    ``python``/``python3`` runs with the current interpreter, which also means the job sees this
    virtualenv's packages, not the image's (hence the base image only). Read-only mounts are not
    enforced. The process gets a fresh environment (PATH, LANG, HOME under its root, then the
    launch's env), never ours.

``container`` (also a process runner's job whose image is not the plain base image)
    docker SDK: pulls the image (from the local registry), runs one detached container per node
    with ``network_mode="host"`` (dockerd runs with ``--bridge=none``), bind mounts, every node's
    host name mapped to 127.0.0.1, and labels ``stepop.fake``/``stepop.job``/``stepop.node`` so
    leftovers can be found and removed.

``timer`` (scale benchmarks; whatever the image)
    No process at all: each node prints one line, "runs" for ``STEPOP_FAKE_TIMER_SECONDS``
    (default 60) and exits 0, so a thousand jobs fit on a small machine. With
    ``STEPOP_FAKE_TIMER_END_FILE`` set, every node runs instead until the wall-clock time (epoch
    seconds) written in that file, however long its job took to submit: a benchmark that submits
    jobs for minutes ends them all when it has measured enough. The job's code never runs, so it
    leaves no result: use it to measure the control plane, not a step.
    :func:`write_local_timer` gives the local backend the same kind of job: a stand-in for its
    interpreter (``LocalBackend(python=...)``) that keeps the supervisor's protocol (holds the
    job's lock, writes ``output.log`` and ``exit_code``) with one ``sh`` and one ``sleep`` (or
    one ``cat`` of a FIFO: the job ends when the FIFO's last writer closes it).

Nodes are independent: multi-node jobs pass per-node host/rank information in
:class:`NodeSpec` (env and extra mounts such as a per-node resourceconfig.json). A job has
failed as soon as one node exits non-zero (the others are then stopped, as the services do); it
has succeeded when every node exits 0.

Where each part lives: :mod:`~cloud.runner.launch` (:class:`JobLaunch`, :class:`NodeSpec`,
:class:`Mount`, the modes, :class:`LaunchError`), :mod:`~cloud.runner.images` (which mode a
job's image runs in: :class:`BaseImage`), :mod:`~cloud.runner.nodes` (one node per mode:
:class:`ProcessNode`, :class:`TimerNode`, :class:`ContainerNode`), :mod:`~cloud.runner.jobs`
(:class:`Runner`, :class:`JobRun`, :func:`stop_job_threads`) and :mod:`~cloud.runner.local_timer`
(:func:`write_local_timer`). Every name is importable from ``cloud.runner`` itself.
"""

from cloud.runner.images import BaseImage, image_id
from cloud.runner.jobs import JobRun, Runner, stop_job_threads
from cloud.runner.launch import (
    MODE_CONTAINER,
    MODE_PROCESS,
    MODE_TIMER,
    MODES,
    STDERR,
    STDOUT,
    JobLaunch,
    LaunchError,
    LineCallback,
    Mount,
    NodeSpec,
)
from cloud.runner.local_timer import LOCAL_TIMER, write_local_timer
from cloud.runner.nodes import ContainerNode, Node, ProcessNode, TimerNode

__all__ = [
    "LOCAL_TIMER",
    "MODES",
    "MODE_CONTAINER",
    "MODE_PROCESS",
    "MODE_TIMER",
    "STDERR",
    "STDOUT",
    "BaseImage",
    "ContainerNode",
    "JobLaunch",
    "JobRun",
    "LaunchError",
    "LineCallback",
    "Mount",
    "Node",
    "NodeSpec",
    "ProcessNode",
    "Runner",
    "TimerNode",
    "image_id",
    "stop_job_threads",
    "write_local_timer",
]
