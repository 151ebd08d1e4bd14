"""Vertex AI machine types and their accelerators: which GPUs go with which machine.

An n1 type takes attached GPUs (``N1_GPU_COUNTS``); an accelerator-optimized type (a2, a3, g2,
TPUs) comes with its own (``BUNDLED_FAMILIES``), filled in from the packaged catalog
(``backends/vertex/catalog.csv``), whose rows name a machine with GPUs as
``MACHINE+ACCELERATOR_TYPExCOUNT`` (e.g. ``n1-standard-8+NVIDIA_TESLA_T4x1``). Both
``machine_type=`` (at parse) and ``[stepop] vertex_default_machine_type`` (when the task runs)
go through these rules.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from airflow_stepop.backends import arguments as check
from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.catalog.resolver import Catalog
    from airflow_stepop.settings import ResourceSettings

CATALOG = "airflow_stepop.backends.vertex"
ACCELERATORS = (
    "NVIDIA_TESLA_K80", "NVIDIA_TESLA_P100", "NVIDIA_TESLA_V100", "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_T4", "NVIDIA_TESLA_A100", "NVIDIA_A100_80GB", "NVIDIA_L4", "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB", "NVIDIA_B200", "NVIDIA_GB200",
    "NVIDIA_RTX_PRO_6000", "TPU_V2", "TPU_V3", "TPU_V4_POD", "TPU_V5_LITEPOD",
)  # fmt: skip
# How many of each GPU an n1 machine takes (Compute Engine's GPU platforms: T4, P4 and P100 in
# ones, twos and fours; V100 and K80 up to eight).
N1_GPU_COUNTS = {
    "NVIDIA_TESLA_T4": (1, 2, 4), "NVIDIA_TESLA_P4": (1, 2, 4), "NVIDIA_TESLA_P100": (1, 2, 4),
    "NVIDIA_TESLA_V100": (1, 2, 4, 8), "NVIDIA_TESLA_K80": (1, 2, 4, 8),
}  # fmt: skip
# Accelerator-optimized (GPU- or TPU-bundled) machine families and the accelerators they come
# with (Vertex AI "Configure compute resources for custom training"; the a4x, g4 and ct4p entries
# were not checked against a live project); their machine types take no other. A type of these
# families the catalog lists gets its accelerators filled in; one it does not list must name
# them. Every other accelerator attaches to n1 types (N1_GPU_COUNTS).
BUNDLED_FAMILIES = {
    "a2": ("NVIDIA_TESLA_A100", "NVIDIA_A100_80GB"),
    "a3": ("NVIDIA_H100_80GB", "NVIDIA_H100_MEGA_80GB", "NVIDIA_H200_141GB"),
    "a4": ("NVIDIA_B200",), "a4x": ("NVIDIA_GB200",),
    "g2": ("NVIDIA_L4",), "g4": ("NVIDIA_RTX_PRO_6000",),
    "cloud-tpu": ("TPU_V2", "TPU_V3"), "ct4p": ("TPU_V4_POD",), "ct5lp": ("TPU_V5_LITEPOD",),
}  # fmt: skip
_BUNDLED_COUNT = r"-(\d+)[gt]$"  # a3-megagpu-8g: 8 GPUs; ct5lp-hightpu-4t: 4 chips
_MACHINE = r"[a-z][a-z0-9]*-[a-z0-9]+(-[a-z0-9]+)*"
_MACHINE_WITH_ACCELERATORS = _MACHINE + r"(\+[A-Z0-9_]+x[1-9][0-9]*)?"  # the catalog's names
MACHINE_CHOICE = _MACHINE_WITH_ACCELERATORS  # a machine choice's name (``machine_name``)


def machine_name(machine_type: str, accelerator_type: str | None, count: int) -> str:
    return f"{machine_type}+{accelerator_type}x{count}" if accelerator_type else machine_type


def split_machine(name: str) -> tuple[str, str | None, int]:
    """``n1-standard-8+NVIDIA_TESLA_T4x1`` -> ("n1-standard-8", "NVIDIA_TESLA_T4", 1)."""
    machine, _, accelerator = name.partition("+")
    if not accelerator:
        return machine, None, 0
    kind, _, count = accelerator.rpartition("x")
    return machine, kind, int(count)


def default_machine(value: Any) -> tuple[str, str | None, int]:
    """``[stepop] vertex_default_machine_type``: a machine type, or one in the catalog's
    ``MACHINE+ACCELERATOR_TYPExCOUNT`` form. A GPU type the catalog lists gets its GPUs filled
    in, as for ``machine_type=``; Vertex refuses a GPU type's job without them."""
    option = "vertex_default_machine_type"
    check.option(option, value, _MACHINE_WITH_ACCELERATORS, "a Vertex machine type",
                 "n1-standard-4")  # fmt: skip
    machine, accelerator, count = split_machine(value)
    if accelerator is not None and accelerator not in ACCELERATORS:
        raise SettingsError(
            f"[stepop] {option}={value!r} names {accelerator!r}, which is not a Vertex "
            "accelerator type; use e.g. 'n1-standard-8+NVIDIA_TESLA_T4x1'."
        )
    if accelerator is None:
        accelerator, count = _accelerators_of(machine) or (None, 0)
    family = bundled_family(machine)
    if accelerator is None and family is not None:
        suffix = re.search(_BUNDLED_COUNT, machine)
        kinds = ", ".join(repr(kind) for kind in BUNDLED_FAMILIES[family])
        raise SettingsError(
            f"[stepop] {option}={value!r} is not in the catalog, so the accelerators it comes "
            f"with are not known, and Vertex needs them named: write them after a '+', "
            f"'{machine}+KINDx{suffix.group(1) if suffix else 'N'}' with KIND one of {kinds}."
        )
    return machine, accelerator, count


FALLBACK_EXAMPLE = "n1-standard-8+NVIDIA_TESLA_T4x1"


def fallback_machine(owner: str, field: str, value: Any) -> str:
    """One item of ``fallback_types=``: a whole machine choice, as a name. A machine type
    (``g2-standard-8``, ``a2-highgpu-1g``: a GPU type the catalog lists gets its accelerators
    filled in, as for ``machine_type=``), or one with its accelerators in the catalog's
    ``MACHINE+ACCELERATOR_TYPExCOUNT`` form (``n1-standard-8+NVIDIA_TESLA_T4x1``), which an n1
    type with attached GPUs needs: its plain name is the machine without any. The same pairing
    rules as ``machine_type=`` apply. Returns the catalog's name of the choice."""
    check.refuse_template(owner, field, value, FALLBACK_EXAMPLE)
    if not isinstance(value, str) or not re.fullmatch(_MACHINE_WITH_ACCELERATORS, value):
        raise SettingsError(
            f"{owner}.{field}={value!r} is not a Vertex machine type; use e.g. 'g2-standard-8', "
            f"or {FALLBACK_EXAMPLE!r} for one with attached GPUs (MACHINE+ACCELERATOR_TYPExCOUNT)."
        )
    machine, accelerator, count = split_machine(value)
    if accelerator is not None and accelerator not in ACCELERATORS:
        raise SettingsError(
            f"{owner}.{field}={value!r} names {accelerator!r}, which is not a Vertex accelerator "
            f"type; use e.g. {FALLBACK_EXAMPLE!r}."
        )
    bundled = _accelerators_of(machine)
    if bundled is not None:  # the catalog knows what it comes with
        if accelerator is not None and (accelerator, count) != bundled:
            raise SettingsError(
                f"{owner}.{field}={value!r}: {machine!r} comes with {bundled[1]} x {bundled[0]}; "
                f"write {machine!r} (its accelerators are filled in) or "
                f"{machine_name(machine, *bundled)!r}."
            )
        return machine_name(machine, *bundled)
    family = bundled_family(machine)
    if family is not None:
        kinds = BUNDLED_FAMILIES[family]
        if accelerator not in kinds:
            suffix = re.search(_BUNDLED_COUNT, machine)
            shown = " or ".join(repr(kind) for kind in kinds)
            raise SettingsError(
                f"{owner}.{field}={value!r}: {machine!r} is not in the catalog, so the "
                "accelerators it comes with are not known, and Vertex needs them named: write "
                f"'{machine}+KINDx{suffix.group(1) if suffix else 'N'}' with KIND {shown}."
            )
        return value
    if accelerator is None:
        return machine
    if not machine.startswith("n1-") or accelerator not in N1_GPU_COUNTS:
        families = [f for f, kinds in BUNDLED_FAMILIES.items() if accelerator in kinds]
        where = (
            f"{accelerator} attaches to n1 types, e.g. 'n1-standard-8+{accelerator}x1'"
            if accelerator in N1_GPU_COUNTS
            else f"{accelerator} comes only with {'/'.join(families)} machine types: name one"
        )
        raise SettingsError(
            f"{owner}.{field}={value!r}: {accelerator} cannot be attached to {machine!r}; {where}."
        )
    allowed = N1_GPU_COUNTS[accelerator]
    if count not in allowed:
        raise SettingsError(
            f"{owner}.{field}={value!r}: an n1 machine takes {', '.join(map(str, allowed))} x "
            f"{accelerator}, not {count}; e.g. '{machine}+{accelerator}x{allowed[0]}'."
        )
    return value


def _accelerators_of(machine_type: str) -> tuple[str, int] | None:
    """The accelerators an accelerator-optimized type the catalog lists comes with (an n1 row's
    GPUs are attached, not bundled)."""
    if machine_type.startswith("n1-"):
        return None
    fixed = {split_machine(m.name)[1:] for m in catalog().types
             if m.name.startswith(machine_type + "+")}  # fmt: skip
    return next(iter(fixed)) if fixed else None


def catalog() -> Catalog:
    """The machine types with their accelerators and prices; read where a step names a machine
    or asks for hardware, and when a job is priced (no cost to a parse that does neither)."""
    from airflow_stepop.catalog import load

    return load(CATALOG)


def hardware(
    owner: str,
    resources: ResourceSettings | None,
    machine_type: Any,
    accelerator_type: Any,
    accelerator_count: Any,
    *,
    resources_as: str,
) -> tuple[str | None, str | None, int]:
    """An explicit machine (checked against the catalog's pairings) wins over ``resources=``."""
    if accelerator_type is not None and accelerator_type not in ACCELERATORS:
        raise SettingsError(
            f"{owner}.accelerator_type={accelerator_type!r} is not a Vertex accelerator type; "
            "use e.g. 'NVIDIA_TESLA_T4', 'NVIDIA_L4' or 'NVIDIA_TESLA_A100'."
        )
    if accelerator_count is not None:
        check.whole_number(owner, "accelerator_count", accelerator_count, low=1, high=16)
    if accelerator_count is not None and accelerator_type is None and machine_type is None:
        raise _count_without_type(owner, accelerator_count)
    if machine_type is None:
        if accelerator_type is not None and resources is not None:
            raise SettingsError(
                f"{owner}.accelerator_type={accelerator_type!r} comes with machine_type= only: "
                f"{resources_as}= picks the machine and its GPUs. Drop accelerator_type= (a GPU "
                "model goes in ResourceSettings(gpu_type=...)), or give machine_type= too."
            )
        if accelerator_type is not None:
            raise SettingsError(
                f"{owner}.accelerator_type={accelerator_type!r} needs machine_type=, e.g. "
                "machine_type='n1-standard-8' (or ask with resources=ResourceSettings(...))."
            )
        if resources is None:
            return None, None, 0
        chosen = catalog().resolve(resources, owner=f"{owner}.{resources_as}",
                                 explicit="machine_type", count="replica_count")  # fmt: skip
        return split_machine(chosen.name)
    check.refuse_template(owner, "machine_type", machine_type, "n1-standard-8")
    if not isinstance(machine_type, str) or not re.fullmatch(_MACHINE, machine_type):
        raise SettingsError(
            f"{owner}.machine_type={machine_type!r} is not a Vertex machine type; use e.g. "
            "'n1-standard-8', 'e2-standard-4' or 'a2-highgpu-1g'."
        )
    # Accelerator-optimized types come with their GPUs: the catalog knows which.
    bundled = _accelerators_of(machine_type)
    if bundled is not None:
        kind, count = bundled
        if (accelerator_type, accelerator_count) not in {(None, None), (kind, None), (kind, count)}:
            raise SettingsError(
                f"{owner}: machine_type={machine_type!r} comes with {count} x {kind}; leave "
                f"accelerator_type and accelerator_count out or set accelerator_type={kind!r}, "
                f"accelerator_count={count}."
            )
        return machine_type, kind, count
    family = bundled_family(machine_type)
    if family is not None:
        return _bundled(
            owner, machine_type, BUNDLED_FAMILIES[family], accelerator_type, accelerator_count
        )
    if accelerator_count is not None and accelerator_type is None:
        raise _count_without_type(owner, accelerator_count)
    if accelerator_type is None:
        return machine_type, None, 0  # not in the catalog: accepted as given, without a price
    if not machine_type.startswith("n1-") or accelerator_type not in N1_GPU_COUNTS:
        raise SettingsError(
            f"{owner}.accelerator_type={accelerator_type!r} cannot be attached to "
            f"machine_type={machine_type!r}. {_where_it_goes(accelerator_type)}"
        )
    count = accelerator_count or 1
    allowed = N1_GPU_COUNTS[accelerator_type]
    if count not in allowed:
        raise SettingsError(
            f"{owner}.accelerator_count={count} is not a count of {accelerator_type} an n1 "
            f"machine takes: use one of {', '.join(map(str, allowed))}."
        )
    return machine_type, accelerator_type, count


def _count_without_type(owner: str, count: Any) -> SettingsError:
    return SettingsError(
        f"{owner}.accelerator_count={count!r} needs accelerator_type=, e.g. "
        "accelerator_type='NVIDIA_TESLA_T4'."
    )


def bundled_family(machine_type: str) -> str | None:
    """'a3-megagpu-8g' -> 'a3', 'a4x-highgpu-4g' -> 'a4x', 'cloud-tpu' -> 'cloud-tpu',
    'n1-standard-8' -> None."""
    found = [f for f in BUNDLED_FAMILIES if f"{machine_type}-".startswith(f + "-")]
    return max(found, key=len) if found else None


def _bundled(
    owner: str,
    machine_type: str,
    kinds: tuple[str, ...],
    accelerator_type: Any,
    accelerator_count: Any,
) -> tuple[str, str, int]:
    """A type of an accelerator-optimized family the catalog does not list: as given, but
    Vertex needs its accelerators named (a machine spec without them is refused)."""
    suffix = re.search(_BUNDLED_COUNT, machine_type)
    count = accelerator_count or (int(suffix.group(1)) if suffix else None)
    example = (
        f"accelerator_type= one of {', '.join(repr(k) for k in kinds)} and "
        f"accelerator_count={count or 'N'} (what the machine type comes with)"
    )
    if accelerator_type is None:
        raise SettingsError(
            f"{owner}.machine_type={machine_type!r} is not in the catalog, so the accelerators "
            f"it comes with are not known, and Vertex needs them named: give {example}; or ask "
            "with resources=ResourceSettings(gpu_type=..., gpu_count=...) for a catalog type."
        )
    if accelerator_type not in kinds:
        raise SettingsError(
            f"{owner}.accelerator_type={accelerator_type!r} does not come with "
            f"machine_type={machine_type!r}: give {example}."
        )
    if count is None:
        raise SettingsError(
            f"{owner}.machine_type={machine_type!r} needs accelerator_count= (how many "
            f"{accelerator_type} it comes with), e.g. accelerator_count=8."
        )
    return machine_type, accelerator_type, count


def _where_it_goes(accelerator: str) -> str:
    """The fix for an accelerator on a machine type that cannot take it."""
    if accelerator in N1_GPU_COUNTS:
        return f"{accelerator} attaches to n1 types, e.g. machine_type='n1-standard-8'."
    families = [f for f, kinds in BUNDLED_FAMILIES.items() if accelerator in kinds]
    listed = [m.name.partition("+")[0] for m in catalog().types if f"+{accelerator}x" in m.name]
    example = f", e.g. machine_type={listed[0]!r}" if listed else ""
    return (
        f"{accelerator} comes only with {'/'.join(families)} machine types{example}: name one "
        "(its accelerators are filled in when the catalog lists it)."
    )


__all__ = [
    "ACCELERATORS", "BUNDLED_FAMILIES", "CATALOG", "FALLBACK_EXAMPLE", "MACHINE_CHOICE",
    "N1_GPU_COUNTS", "bundled_family", "catalog", "default_machine", "fallback_machine",
    "hardware", "machine_name", "split_machine",
]  # fmt: skip
