"""A machine catalog and the resolver ResourceSettings -> cheapest fitting machine type.

Generic over services: a catalog is the ``catalog.csv`` of a service's package, with the columns
``instance_type, vcpu, memory_gib, gpu_count, gpu_model, gpu_memory_gib, price_per_hour`` (and
optionally ``spot_price_per_hour``) and ``# key: value`` header lines (``catalog_date``,
``region``, ``currency``). Nothing here knows a service's names beyond what its file says.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources as package_files
from typing import TYPE_CHECKING, Any

from airflow_stepop.setting_values import SettingsError

if TYPE_CHECKING:  # annotations only: a DAG without settings never builds one
    from airflow_stepop.settings import ResourceSettings

GIB = 2**30
CLOSEST_SHOWN = 3


class NoFittingMachineError(SettingsError):
    """A ResourceSettings that no machine type of a catalog satisfies."""


def normalize_gpu(name: str) -> str:
    """'a100', 'NVIDIA_TESLA_A100', 'nvidia-a100' -> 'A100' (how catalogs name GPU models);
    'NVIDIA_H100_80GB' -> 'H10080GB', which :meth:`MachineType.gpu_names` matches to an 80 GiB
    'H100'."""
    upper = name.upper().replace("-", "_")
    for prefix in ("NVIDIA_", "TESLA_"):
        upper = upper.removeprefix(prefix)
    return upper.replace("_", "")


@dataclass(frozen=True)
class MachineType:
    name: str
    vcpu: int
    memory_gib: float
    gpu_count: int
    gpu_model: str | None
    gpu_memory_gib: float
    price_per_hour: float | None
    spot_price_per_hour: float | None = None

    def hourly_price(self, spot: bool = False) -> float | None:
        """USD per machine-hour: the Spot (low-priority) price for a Spot machine when the
        catalog has one, else the on-demand price, what a Spot machine costs at most."""
        if spot and self.spot_price_per_hour is not None:
            return self.spot_price_per_hour
        return self.price_per_hour

    def gpu_names(self) -> frozenset[str]:
        """The normalized names its GPU answers to: the catalog's model, and that model with its
        memory (an 80 GiB 'H100' is also 'NVIDIA_H100_80GB', the name Vertex AI gives it)."""
        if not self.gpu_model:
            return frozenset()
        model = normalize_gpu(self.gpu_model)
        return frozenset({model, f"{model}{self.gpu_memory_gib:g}GB"})

    def describe(self) -> str:
        gpus = (
            f", {self.gpu_count} x {self.gpu_model} {self.gpu_memory_gib:g} GiB"
            if self.gpu_count
            else ", no GPU"
        )
        price = f", ${self.price_per_hour:g}/h" if self.price_per_hour is not None else ""
        return f"{self.name} ({self.vcpu} vCPU, {self.memory_gib:g} GiB{gpus}{price})"

    def shortfall(self, want: ResourceSettings) -> float:
        """0 when the machine fits; otherwise how far it falls short (for 'closest')."""
        miss = 0.0
        if want.cpu_count and self.vcpu < want.cpu_count:
            miss += want.cpu_count / self.vcpu - 1
        if want.memory_bytes and self.memory_gib * GIB < want.memory_bytes:
            miss += want.memory_bytes / (self.memory_gib * GIB) - 1
        gpus = want.gpu_count if want.gpu_count is not None else (1 if want.gpu_type else None)
        if gpus == 0 and self.gpu_count:
            miss += 1.0
        elif gpus and self.gpu_count < gpus:
            miss += (gpus - self.gpu_count) / gpus * 2
        if want.gpu_type and normalize_gpu(want.gpu_type) not in self.gpu_names():
            miss += 1.0
        return miss

    def fits(self, want: ResourceSettings) -> bool:
        return self.shortfall(want) == 0.0


@dataclass(frozen=True)
class Catalog:
    service: str
    date: str
    region: str
    currency: str
    types: tuple[MachineType, ...]
    # A pattern of the type names whose family has no GPU, listed here or not (the file's
    # ``no_gpu_types`` line): a GPU request beside one is refused even when it is not listed.
    no_gpu_types: str | None = None

    def get(self, name: str) -> MachineType | None:
        for machine in self.types:
            if machine.name == name:
                return machine
        return None

    def named_without_gpu(self, name: str) -> bool:
        """Whether the name is of a family without GPUs (``no_gpu_types``), listed or not."""
        return bool(self.no_gpu_types and re.fullmatch(self.no_gpu_types, name))

    def check_explicit(
        self,
        name: str,
        want: ResourceSettings | None,
        *,
        owner: str,
        explicit: str,
        written: str | None = None,
        wanted: str = "resources",
    ) -> None:
        """A type named explicitly wins over ``resources=``; one the catalog knows to lack what
        ``resources`` asks for (a GPU, memory, vCPUs) is refused, not run without it. A type the
        catalog does not list is taken as given, unless its name says it has no GPU and
        ``resources`` asks for one (``no_gpu_types``). ``written``: the arguments as the user wrote
        them, when the catalog's row name differs (default ``explicit=name``); ``wanted``: how
        they wrote ``want`` (``resources`` or ``default_args['step_resources']``)."""
        machine = self.get(name)
        if want is None or (machine is not None and machine.fits(want)):
            return
        written = written or f"{explicit}={name!r}"
        if machine is None:
            if want.gpu_count and self.named_without_gpu(name):
                raise NoFittingMachineError(
                    f"{owner}.{written} is of a family with no GPU on {self.service}, and "
                    f"{wanted}={want.shown()} asks for one; {explicit} wins over {wanted}, so "
                    f"the step would run without it. Drop {explicit} to get the cheapest type "
                    "that fits, or name a GPU type."
                )
            return
        raise NoFittingMachineError(
            f"{owner}.{written} is {machine.describe()}, which lacks what "
            f"{wanted}={want.shown()} asks for; {explicit} wins over {wanted}, so the step "
            f"would run without it. Drop {explicit} to get the cheapest type that fits, or name "
            "one that fits."
        )

    def fitting(self, want: ResourceSettings) -> list[MachineType]:
        """Every type that fits ``want``, the cheapest first (``resolve``'s order): what a step
        fails over to when the service has no capacity for the one before."""
        return sorted((m for m in self.types if m.fits(want)), key=_cost_order)

    def resolve(
        self,
        want: ResourceSettings,
        *,
        owner: str = "resources",
        explicit: str = "instance_type",
        count: str = "instance_count",
    ) -> MachineType:
        """The cheapest type that fits ``want`` (ties: fewer GPUs, vCPUs, memory, then name).

        ``explicit`` and ``count`` are the operator's own argument names for a machine type and
        a machine count, so that the error tells the user what to write.
        """
        fitting = self.fitting(want)
        if fitting:
            return fitting[0]
        models = sorted({m.gpu_model for m in self.types if m.gpu_model})
        known = frozenset().union(*(m.gpu_names() for m in self.types))
        if want.gpu_type and normalize_gpu(want.gpu_type) not in known:
            raise NoFittingMachineError(
                f"{owner}={want.shown()}: no {self.service} machine type in the catalog has a "
                f"{want.gpu_type!r} GPU (catalog date {self.date}). Its GPU models: "
                f"{', '.join(models)}. Use one of them for gpu_type, or name a type explicitly "
                f"with {explicit}=."
            )
        closest = sorted(self.types, key=lambda m: (m.shortfall(want), _cost_order(m)))
        shown = "; ".join(m.describe() for m in closest[:CLOSEST_SHOWN])
        raise NoFittingMachineError(
            f"{owner}={want.shown()} fits no {self.service} machine type in the catalog "
            f"(catalog date {self.date}). Closest: {shown}. Ask for less (or more machines with "
            f"{count}), or name a type explicitly with {explicit}=."
        )


def _cost_order(machine: MachineType) -> tuple[Any, ...]:
    price = machine.price_per_hour if machine.price_per_hour is not None else float("inf")
    return (price, machine.gpu_count, machine.vcpu, machine.memory_gib, machine.name)


def parse(text: str, service: str) -> Catalog:
    meta: dict[str, str] = {}
    rows: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            match = re.match(r"#\s*([a-z_]+):\s*(.+?)\s*$", line)
            if match:
                meta[match.group(1)] = match.group(2)
        elif line.strip():
            rows.append(line)
    types = []
    for row in csv.DictReader(io.StringIO("\n".join(rows))):
        price = row["price_per_hour"].strip()
        spot = (row.get("spot_price_per_hour") or "").strip()
        types.append(
            MachineType(
                name=row["instance_type"].strip(),
                vcpu=int(row["vcpu"]),
                memory_gib=float(row["memory_gib"]),
                gpu_count=int(row["gpu_count"]),
                gpu_model=row["gpu_model"].strip() or None,
                gpu_memory_gib=float(row["gpu_memory_gib"] or 0),
                price_per_hour=float(price) if price else None,
                spot_price_per_hour=float(spot) if spot else None,
            )
        )
    return Catalog(
        service=meta.get("service", service),
        date=meta.get("catalog_date", "unknown"),
        region=meta.get("region", "unknown"),
        currency=meta.get("currency", "USD").split()[0],
        types=tuple(types),
        no_gpu_types=meta.get("no_gpu_types"),
    )


CATALOG_FILE = "catalog.csv"


@cache
def load(package: str) -> Catalog:
    """The catalog a service's package ships as ``catalog.csv`` (``load(__package__)`` in it;
    e.g. "airflow_stepop.backends.sagemaker")."""
    text = package_files.files(package).joinpath(CATALOG_FILE).read_text()
    return parse(text, service=package.rsplit(".", 1)[-1])
