"""What a fake hands the runner: a :class:`JobLaunch` of nodes and mounts, in one of :data:`MODES`.

Also the callback every output line goes to (:data:`LineCallback`) and :class:`LaunchError`, the
start failure a fake reports as its service's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

MODE_PROCESS = "process"
MODE_CONTAINER = "container"
MODE_TIMER = "timer"
MODES = (MODE_PROCESS, MODE_CONTAINER, MODE_TIMER)

STDOUT = "stdout"
STDERR = "stderr"


@dataclass(frozen=True)
class Mount:
    """A host directory the job sees at ``container_path``."""

    host_dir: str
    container_path: str
    read_only: bool = False


@dataclass
class NodeSpec:
    """One node of a job: its host name, rank and what only this node gets."""

    host: str
    rank: int = 0
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)


@dataclass
class JobLaunch:
    """What a service would start for a job, in terms every service shares.

    ``entrypoint`` None means the image's own ENTRYPOINT and ``args`` None its CMD (container
    mode only: process mode needs an explicit entrypoint). ``hosts`` are more host names that
    resolve to this machine in a container (the nodes' own always do), such as the DNS names
    of a Kubernetes Job's other pods.
    """

    fake: str
    name: str
    image: str
    entrypoint: list[str] | None
    args: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    workdir: str | None = None
    nodes: list[NodeSpec] = field(default_factory=lambda: [NodeSpec("node-0")])
    labels: dict[str, str] = field(default_factory=dict)
    reroot: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()


# (node, stream name "stdout"/"stderr", line without its newline, epoch seconds when read)
LineCallback = Callable[[NodeSpec, str, str, float], None]


class LaunchError(RuntimeError):
    """The job could not be started (the fake reports it as the service's start failure)."""
