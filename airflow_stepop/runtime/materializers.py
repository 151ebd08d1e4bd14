"""How a Python value becomes an artifact, and back.

Most materializers write a value as bytes to a binary stream (which hashes them as they are
written) and load it back from bytes that were read and verified in one pass. The ``path``
materializer copies a returned file or directory tree (model checkpoints) and gives back a
local path. Optional libraries are imported only when a value of theirs is seen. The first
materializer that accepts a value wins; cloudpickle is the last resort. Loads happen only
after the caller has verified the artifact's digest (``digest.py``).
"""

from __future__ import annotations

import io
import json
import math
import re
import sys
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

from airflow_stepop.runtime.storage import copy_hashed


class NoMaterializerError(TypeError):
    """A value that no materializer can write; ``reason`` says why, without the fix (which
    differs for a step's result and for an argument given to it)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


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
    # True: the artifact is a file or tree used in place (copy/open); else bytes (dump/load).
    on_disk: ClassVar[bool] = False

    def handles(self, value: Any) -> bool:
        raise NotImplementedError

    def uri_suffix(self, value: Any) -> str:
        """What follows the artifact's name in its URI: a file extension for the loader."""
        return self.suffix

    def dump(self, value: Any, stream: BinaryIO) -> None:
        raise NotImplementedError

    def load(self, data: memoryview) -> Any:
        """The value from its verified bytes (writable memory the value may keep)."""
        raise NotImplementedError


class JsonMaterializer(Materializer):
    name = "json"
    suffix = ".json"

    def handles(self, value: Any) -> bool:
        return is_strict_json(value)

    def dump(self, value: Any, stream: BinaryIO) -> None:
        stream.write(json.dumps(value).encode())

    def load(self, data: memoryview) -> Any:
        return json.loads(bytes(data))


class StrMaterializer(Materializer):
    name = "str"
    suffix = ".txt"

    def handles(self, value: Any) -> bool:
        return type(value) is str

    def dump(self, value: Any, stream: BinaryIO) -> None:
        stream.write(value.encode("utf-8"))

    def load(self, data: memoryview) -> Any:
        return str(data, "utf-8")


class BytesMaterializer(Materializer):
    name = "bytes"
    suffix = ".bin"

    def handles(self, value: Any) -> bool:
        return isinstance(value, (bytes, bytearray, memoryview))

    def dump(self, value: Any, stream: BinaryIO) -> None:
        stream.write(value if isinstance(value, (bytes, bytearray)) else bytes(value))

    def load(self, data: memoryview) -> Any:
        return bytes(data)


class NumpyMaterializer(Materializer):
    name = "numpy"
    suffix = ".npy"

    def handles(self, value: Any) -> bool:
        numpy = sys.modules.get("numpy")
        return numpy is not None and isinstance(value, numpy.ndarray) and value.dtype != object

    def dump(self, value: Any, stream: BinaryIO) -> None:
        """The bytes ``numpy.save`` writes; a contiguous array's memory is written as it is."""
        import numpy
        from numpy.lib import format as npy

        header: io.BytesIO | None = io.BytesIO()
        try:
            npy.write_array_header_1_0(header, npy.header_data_from_array_1_0(value))
        except (ValueError, UnicodeEncodeError):  # needs format 2.0/3.0
            header = None
        data = value if value.flags.c_contiguous else value.T  # F order: the header says so
        if header is None or not data.flags.c_contiguous or value.dtype.itemsize == 0:
            numpy.save(stream, value, allow_pickle=False)  # numpy's own (chunked) writer
            return
        stream.write(header.getvalue())
        stream.write(data.reshape(-1).view(numpy.uint8))

    def load(self, data: memoryview) -> Any:
        """The array over the verified bytes themselves (no copy), for .npy format 1.0/2.0."""
        import numpy
        from numpy.lib import format as npy

        head = io.BytesIO(bytes(data[:12]))
        version = npy.read_magic(head)
        if version not in ((1, 0), (2, 0)):  # 3.0 (utf-8 field names): numpy's own reader
            return numpy.load(io.BytesIO(data), allow_pickle=False)
        width = 2 if version == (1, 0) else 4
        end = 8 + width + int.from_bytes(data[8 : 8 + width], "little")
        head = io.BytesIO(bytes(data[:end]))
        npy.read_magic(head)
        read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran_order, dtype = read_header(head)
        if dtype.hasobject or dtype.itemsize == 0:
            return numpy.load(io.BytesIO(data), allow_pickle=False)
        array = numpy.frombuffer(data, dtype=dtype, count=math.prod(shape), offset=end)
        return array.reshape(shape, order="F" if fortran_order else "C")


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

    def dump(self, value: Any, stream: BinaryIO) -> None:
        value.to_parquet(stream)

    def load(self, data: memoryview) -> Any:
        import pandas

        return pandas.read_parquet(io.BytesIO(data))


_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]")


def names_files(value: Any) -> bool:
    """A Path to an existing file or directory: its files are the value, so it is written as an
    artifact of its own even inside a list or dict (a pickle of the Path would leave them
    behind)."""
    return isinstance(value, Path) and value.exists()


class PathMaterializer(Materializer):
    """A returned ``pathlib.Path``: the file or directory tree it names (model checkpoints)."""

    name = "path"
    on_disk = True

    def handles(self, value: Any) -> bool:
        return names_files(value)

    def uri_suffix(self, value: Path) -> str:
        """A file keeps its own name, under the artifact's (``return_value/model.keras``): some
        loaders go by the suffix. Characters a URI would misread become ``_``."""
        if value.is_dir():
            return ""
        name = _UNSAFE_IN_NAME.sub("_", value.name)
        return f"/{name}" if name.strip(".") else ""

    def copy(self, value: Path, target: Path) -> tuple[str, int]:
        """Copy the file or tree to ``target``; its digest and size, hashed while copying."""
        return copy_hashed(value, target)

    def open(self, path: Path) -> Any:
        return path


class CloudpickleMaterializer(Materializer):
    name = "cloudpickle"
    suffix = ".pkl"

    def handles(self, value: Any) -> bool:
        return True

    def dump(self, value: Any, stream: BinaryIO) -> None:
        import cloudpickle

        try:
            data = cloudpickle.dumps(value)
        except Exception as exc:
            reason = (
                f"a value of type {type_name(value)} is not JSON, str, bytes, a numpy array, a "
                f"pandas DataFrame or a pathlib.Path, and cloudpickle refused it "
                f"({type(exc).__name__}: {exc})"
            )
            raise NoMaterializerError(
                f"No materializer can write the step's result: {reason}. Return one of those "
                "types instead: e.g. list(...) of a generator, or save the object to files in a "
                "directory and return that Path.",
                reason,
            ) from exc
        stream.write(data)

    def load(self, data: memoryview) -> Any:
        import cloudpickle

        return cloudpickle.loads(data)


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
