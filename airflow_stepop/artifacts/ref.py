"""ArtifactRef: what XCom carries instead of a payload (a few hundred bytes, whatever the size)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

PICKLED = "cloudpickle"  # runtime.materializers.CloudpickleMaterializer.name


class UnpicklingRefusedError(PermissionError):
    """A plain task asked for a step's pickled result without allowing unpickling."""


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

    ``conn_id`` names the Airflow connection of the step operator that read the step's result
    (its ``storage_conn_id``: a name, never a credential, and never one the job chose):
    ``load()`` uses it, so a plain task downstream of a cloud step reads the artifact with the
    same credentials, without saying which.

    A pickled result (``materializer == "cloudpickle"``) was written by the step's job, and can
    be rewritten by anyone who may write the artifact root, together with the digest it is
    checked against: unpickling it runs their code. ``load()`` in a plain task refuses it
    unless ``load(allow_pickle=True)`` or ``[stepop] worker_unpickle = True`` says to trust
    the job and the root. A step given the reference loads it inside its own job, as ever.
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

    def load(self, conn_id: str | None = None, *, allow_pickle: bool | None = None) -> Any:
        """The artifact's value (a local ``Path`` for directories), after checking its digest.

        ``conn_id``: another Airflow connection to read it with (default: the step's).
        ``allow_pickle``: unpickle a pickled result (default: ``[stepop] worker_unpickle``).
        """
        from airflow_stepop import config
        from airflow_stepop.artifacts.caches import artifact_cache
        from airflow_stepop.artifacts.storage import worker_storage
        from airflow_stepop.runtime import values

        if self.materializer == PICKLED:
            if allow_pickle is None:
                allow_pickle = config.get_bool("worker_unpickle")
            if not allow_pickle:
                raise UnpicklingRefusedError(
                    f"{self} is a pickled {self.type_name}, written by the step's job: "
                    "unpickling it runs whatever code its bytes name, and whoever may write the "
                    "artifact root can replace them and the digest they are checked against. "
                    "If you trust the job and everyone who may write that root, call "
                    "ref.load(allow_pickle=True), or set [stepop] worker_unpickle = True "
                    "(AIRFLOW__STEPOP__WORKER_UNPICKLE); else return JSON, a numpy array, a "
                    "DataFrame or a Path from the step, or load it in another step."
                )
        storage = worker_storage(conn_id or self.conn_id)
        return values.read_artifact(self.to_record(), storage, artifact_cache())

    def to_record(self) -> dict[str, Any]:
        """The artifact as a job's runtime knows it (a job reads with its own credentials)."""
        record = asdict(self)
        del record["conn_id"]
        if record["python"] is None:
            del record["python"]
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any], conn_id: str | None = None) -> ArtifactRef:
        """A reference to a record of a job's result manifest, read with ``conn_id`` (the
        operator's connection). The job writes the manifest: a ``conn_id`` in the record is
        ignored, and a field this release does not know is refused."""
        from airflow_stepop.runtime.verified import check_ref

        known = {field.name for field in fields(cls)} - {"conn_id"}
        unknown = sorted(set(record) - known - {"conn_id"})
        if unknown:
            raise ValueError(
                f"The artifact record of {record.get('uri')!r} has the fields {unknown}, which "
                f"this airflow-stepop does not know (it knows {sorted(known)}): the job ran a "
                "newer release, or the result manifest was changed. Upgrade the worker or "
                "re-run the task."
            )
        check_ref(record)
        return cls(**{k: v for k, v in record.items() if k in known}, conn_id=conn_id)

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
