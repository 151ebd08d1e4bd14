"""Vertex AI's Dynamic Workload Scheduler: ``scheduling.strategy=FLEX_START``.

A FLEX_START job waits PENDING in Vertex AI's queue until its GPUs are free, up to
``scheduling.maxWaitDuration`` (Vertex's default one day; 0 waits without end), instead of
failing for want of them. Google's rules ("Schedule training jobs based on resource
availability"): the job asks for L4, A100, H100, H200 or B200 GPUs, its timeout is at most seven
days, and every worker pool has the same machine (ours always do). Checked at parse here, so a
step that cannot queue fails the import, not its job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.backends.vertex.machines import catalog, split_machine
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.settings import ResourceSettings

FLEX_START_ACCELERATORS = frozenset({
    "NVIDIA_L4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB", "NVIDIA_B200",
})  # fmt: skip
FLEX_START_MAX_RUNTIME_S = 7 * 24 * 3600
MAX_WAIT_HIGH_S = 30 * 24 * 3600  # ours: a month is longer than any task waits for a GPU
_GPUS = "L4, A100, H100, H200 or B200"


def flex_start_wait(
    owner: str, flex_start: Any, max_wait: Any, *, spot: bool, persistent_resource_id: Any,
    max_runtime_s: int,
) -> int | None:  # fmt: skip
    """``flex_start_max_wait`` in seconds (None: Vertex's default); refuses what cannot queue."""
    if not check.boolean(owner, "flex_start", flex_start):
        if max_wait is not None:
            raise SettingsError(
                f"{owner}.flex_start_max_wait={max_wait!r} applies to FLEX_START jobs only; set "
                "flex_start=True or drop flex_start_max_wait."
            )
        return None
    if spot:
        raise SettingsError(
            f"{owner}: spot=True and flex_start=True are two scheduling strategies (SPOT and "
            "FLEX_START); a job has one. Drop one of them."
        )
    if persistent_resource_id is not None:
        raise SettingsError(
            f"{owner}: flex_start=True with persistent_resource_id={persistent_resource_id!r}: "
            "a job on a persistent resource runs on machines Vertex AI holds already and does "
            "not queue for new ones. Drop one of them."
        )
    if max_runtime_s > FLEX_START_MAX_RUNTIME_S:
        raise SettingsError(
            f"{owner}: flex_start=True needs a timeout of at most 7 days, and this step's is "
            f"{max_runtime_s} s (max_runtime, or execution_timeout plus 5 minutes). Shorten it."
        )
    if max_wait is None:
        return None
    return check.seconds(owner, "flex_start_max_wait", max_wait, low=0, high=MAX_WAIT_HIGH_S,
                         service="Vertex AI's maxWaitDuration (0: no limit)")  # fmt: skip


def flex_start_machines(
    owner: str,
    chosen: str | None,
    fallbacks: tuple[str, ...],
    *,
    named: bool,
    listed: bool,
    resources: ResourceSettings | None,
    resources_as: str,
) -> tuple[str | None, tuple[str, ...]]:
    """The machine and fallbacks of a FLEX_START step, each with GPUs Dynamic Workload
    Scheduler gives: a machine chosen from ``resources`` is the cheapest fitting such one (and
    the failover list the others), a named one or a listed fallback of another GPU is refused."""
    if named or resources is None:
        if chosen is None or not _queues(chosen):
            shown = chosen or "[stepop] vertex_default_machine_type"
            raise SettingsError(
                f"{owner}: flex_start=True needs {_GPUS} GPUs, and the machine {shown!r} has "
                "none of them. Name such a machine (e.g. machine_type='g2-standard-8' for an L4) "
                f"or ask with {resources_as}=ResourceSettings(gpu_type='L4', ...)."
            )
    else:
        fitting = [m.name for m in catalog().fitting(resources) if _queues(m.name)]
        if not fitting:
            raise SettingsError(
                f"{owner}: flex_start=True needs {_GPUS} GPUs, and no machine with them fits "
                f"{resources_as}={resources!r}. Ask for one, e.g. gpu_type='A100'."
            )
        chosen = fitting[0]
        if not listed:  # the other fitting machines that queue; a user's list is checked below
            fallbacks = tuple(fitting[1:])
    for index, name in enumerate(fallbacks):
        if not _queues(name):
            raise SettingsError(
                f"{owner}.fallback_types[{index}]={name!r} has no {_GPUS} GPUs, which "
                "flex_start=True needs. Drop it, or name one that has them."
            )
    return chosen, fallbacks


def scheduling_fields(max_wait_s: int | None) -> dict[str, Any]:
    """What a FLEX_START job adds to ``jobSpec.scheduling``."""
    fields: dict[str, Any] = {"strategy": "FLEX_START"}
    if max_wait_s is not None:
        fields["max_wait_duration"] = f"{max_wait_s}s"
    return fields


def _queues(name: str) -> bool:
    return split_machine(name)[1] in FLEX_START_ACCELERATORS
