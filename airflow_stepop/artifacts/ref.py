"""ArtifactRef: what XCom carries instead of a payload (a few hundred bytes, whatever the size)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar


def _cache_dir() -> Path:
    root = os.environ.get("STEPOP_CACHE_DIR") or os.path.expanduser("~/.cache/airflow-stepop")
    return Path(root) / "artifacts"


@dataclass(frozen=True, repr=False)
class ArtifactRef:
    """A verified pointer to an artifact in object storage.

    ``load()`` fetches it (when remote), checks its digest and deserializes it with the
    materializer that wrote it. Passing an ArtifactRef to another step passes the reference:
    the job reads the bytes itself and the worker never downloads them.

    ``sha256`` is the hex digest the writing side recorded and ``digest_kind`` how it was
    taken (``runtime/digest.py``): ``"sha256-chunked-8MiB"``, the sha256 of the sha256s of the
    file's 8 MiB chunks, hashed on every core; ``"sha256"``, the sha256 of the whole file, for
    references written by releases before the field existed (their XComs have no such field).
    A directory's digest is taken over its files' relative paths, sizes and digests.

    ``conn_id`` names the Airflow connection the step that wrote it reached its artifact root
    with (a name, never a credential): ``load()`` uses it, so a plain task downstream of a cloud
    step reads the artifact with the same credentials, without saying which.
    """

    # 2: digest_kind; 3: conn_id. Airflow's XCom deserializer rebuilds records of an earlier
    # version (new fields take their defaults) and refuses those of a later one.
    __version__: ClassVar[int] = 3

    uri: str
    sha256: str
    size: int
    materializer: str
    type_name: str
    python: str | None = None
    digest_kind: str = "sha256"  # runtime.digest.LEGACY_KIND (not imported at parse time)
    conn_id: str | None = None

    def load(self, conn_id: str | None = None) -> Any:
        """The artifact's value (a local ``Path`` for directories), after checking its digest.

        ``conn_id``: another Airflow connection to read it with (default: the writer's).
        """
        from airflow_stepop.artifacts.storage import worker_storage
        from airflow_stepop.runtime import values

        storage = worker_storage(conn_id or self.conn_id)
        return values.read_artifact(self.to_record(), storage, _cache_dir())

    def to_record(self) -> dict[str, Any]:
        """The artifact as a job's runtime knows it (a job reads with its own credentials)."""
        record = asdict(self)
        del record["conn_id"]
        if record["python"] is None:
            del record["python"]
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any], conn_id: str | None = None) -> ArtifactRef:
        """``conn_id`` for a record that names none (a job's result manifest)."""
        return cls(**{"conn_id": conn_id, **record})

    def __str__(self) -> str:
        return f"ArtifactRef({self.type_name}, {self.size} bytes, {self.uri})"

    # in a printed dict or list too (a multiple_outputs result), where the fields' long form
    # would be cut before the type and size
    __repr__ = __str__

    # Not the value: a result too big for XCom (a long list, say) arrives as a reference, and
    # indexing, iterating or len() is the usual first use, so each error says what to call.
    def __getitem__(self, key: Any) -> Any:
        raise self._not_the_value(f"value[{key!r}]")

    def __iter__(self) -> Any:
        raise self._not_the_value("for item in value")

    def __len__(self) -> int:
        raise self._not_the_value("len(value)")

    def _not_the_value(self, use: str) -> TypeError:
        return TypeError(
            f"{self} is a reference to a step's result, not the {self.type_name} itself; "
            f"call .load() for the value: value = ref.load(), then {use}."
        )

    def __bool__(self) -> bool:
        return True  # a reference is there, whatever its value (not len(): that raises)


def as_record(value: Any) -> dict[str, Any] | None:
    """The reference record of an ArtifactRef (for value encoding), None for anything else."""
    return value.to_record() if isinstance(value, ArtifactRef) else None


def _allow_in_xcom() -> None:
    """Let Airflow's XCom deserializer rebuild ArtifactRef (its allow list is 'airflow.*').
    A step's job, which may import this module, may have no Airflow and has no XCom."""
    try:
        from airflow.sdk.serde import allow_class
    except ModuleNotFoundError:
        return
    allow_class(ArtifactRef)


_allow_in_xcom()
