"""How a Python value becomes an artifact on disk, and back.

Each materializer writes one kind of value to a local path (a file, or a directory for
``pathlib.Path`` results) and reads it back. Optional libraries are imported only when a value
of theirs is seen. The first materializer that accepts a value wins; cloudpickle is the last
resort. Reads happen only after the caller has verified the artifact's sha256.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, ClassVar


class NoMaterializerError(TypeError):
    """A value that no materializer can write."""


def is_strict_json(value: Any) -> bool:
    """True when JSON round-trips the value exactly (no tuples, sets, non-str keys, NaN...)."""
    if value is None or isinstance(value, (bool, str)):
        return True
    if type(value) is int:
        return True
    if type(value) is float:
        return value == value and value not in (float("inf"), float("-inf"))
    if type(value) is list:
        return all(is_strict_json(item) for item in value)
    if type(value) is dict:
        return all(type(k) is str and is_strict_json(v) for k, v in value.items())
    return False


def type_name(value: Any) -> str:
    cls = type(value)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


class Materializer:
    name: ClassVar[str]
    suffix: ClassVar[str] = ""

    def handles(self, value: Any) -> bool:
        raise NotImplementedError

    def write(self, value: Any, path: Path) -> None:
        raise NotImplementedError

    def read(self, path: Path) -> Any:
        raise NotImplementedError


class JsonMaterializer(Materializer):
    name = "json"
    suffix = ".json"

    def handles(self, value: Any) -> bool:
        return is_strict_json(value)

    def write(self, value: Any, path: Path) -> None:
        path.write_text(json.dumps(value))

    def read(self, path: Path) -> Any:
        return json.loads(path.read_text())


class StrMaterializer(Materializer):
    name = "str"
    suffix = ".txt"

    def handles(self, value: Any) -> bool:
        return type(value) is str

    def write(self, value: Any, path: Path) -> None:
        path.write_bytes(value.encode("utf-8"))

    def read(self, path: Path) -> Any:
        return path.read_bytes().decode("utf-8")


class BytesMaterializer(Materializer):
    name = "bytes"
    suffix = ".bin"

    def handles(self, value: Any) -> bool:
        return isinstance(value, (bytes, bytearray, memoryview))

    def write(self, value: Any, path: Path) -> None:
        path.write_bytes(bytes(value))

    def read(self, path: Path) -> Any:
        return path.read_bytes()


class NumpyMaterializer(Materializer):
    name = "numpy"
    suffix = ".npy"

    def handles(self, value: Any) -> bool:
        numpy = sys.modules.get("numpy")
        return numpy is not None and isinstance(value, numpy.ndarray) and value.dtype != object

    def write(self, value: Any, path: Path) -> None:
        import numpy

        with open(path, "wb") as handle:
            numpy.save(handle, value, allow_pickle=False)

    def read(self, path: Path) -> Any:
        import numpy

        return numpy.load(path, allow_pickle=False)


class PandasParquetMaterializer(Materializer):
    name = "pandas-parquet"
    suffix = ".parquet"

    def handles(self, value: Any) -> bool:
        pandas = sys.modules.get("pandas")
        if pandas is None or not isinstance(value, pandas.DataFrame):
            return False
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            return False
        return True

    def write(self, value: Any, path: Path) -> None:
        value.to_parquet(path)

    def read(self, path: Path) -> Any:
        import pandas

        return pandas.read_parquet(path)


class PathMaterializer(Materializer):
    """A returned ``pathlib.Path``: the file or directory tree it names (model checkpoints)."""

    name = "path"

    def handles(self, value: Any) -> bool:
        return isinstance(value, Path) and value.exists()

    def write(self, value: Any, path: Path) -> None:
        if value.is_dir():
            shutil.copytree(value, path)
        else:
            shutil.copyfile(value, path)

    def read(self, path: Path) -> Any:
        return path


class CloudpickleMaterializer(Materializer):
    name = "cloudpickle"
    suffix = ".pkl"

    def handles(self, value: Any) -> bool:
        return True

    def write(self, value: Any, path: Path) -> None:
        import cloudpickle

        try:
            data = cloudpickle.dumps(value)
        except Exception as exc:
            raise NoMaterializerError(
                f"No materializer can write a value of type {type_name(value)}: it is not JSON, "
                f"str, bytes, a numpy array, a pandas DataFrame or a pathlib.Path, and "
                f"cloudpickle refused it ({type(exc).__name__}: {exc}). Return one of those "
                "types instead: e.g. list(...) of a generator, or save the object to files in a "
                "directory and return that Path."
            ) from exc
        path.write_bytes(data)

    def read(self, path: Path) -> Any:
        import cloudpickle

        return cloudpickle.loads(path.read_bytes())


MATERIALIZERS: tuple[Materializer, ...] = (
    StrMaterializer(),
    JsonMaterializer(),
    BytesMaterializer(),
    NumpyMaterializer(),
    PandasParquetMaterializer(),
    PathMaterializer(),
    CloudpickleMaterializer(),
)
BY_NAME = {m.name: m for m in MATERIALIZERS}


def for_value(value: Any) -> Materializer:
    return next(m for m in MATERIALIZERS if m.handles(value))


def by_name(name: str) -> Materializer:
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(
            f"Unknown materializer {name!r}; this runtime knows {sorted(BY_NAME)}. "
            "The artifact was written by a newer airflow-stepop: upgrade the worker."
        ) from None
