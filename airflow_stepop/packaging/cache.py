"""An on-disk cache of code bundles: a task process reuses what an earlier task packaged.

Airflow runs every task in a new process, so an in-memory cache helps no task. Without this
one, each step's ``execute()`` would parse the callable's modules, resolve their imports and
zip them again (``bundle.py``, which a task imports only when it must build). An entry, one per
callable, records the bundle's sha256, how the runtime finds the callable (a pickled callable:
the sha256 of its pickle and shipped source lines, compared anew each time, as closures and
globals may differ), and the size and modification time (ns) of every file the bundle was built
from, of the callable's module file and of the directories those are in (a module added there
changes what an import finds). It is used only while the interpreter, ``sys.path`` and all of
those are unchanged, the rule Python applies to its own bytecode caches. A file modified less
than ``settle_seconds`` before an entry would be written could be modified again within the
file system's timestamp granularity without changing its mtime, so no entry is written then
(the next task builds).

Entries and zips are written to a temporary name and renamed into place, so concurrent tasks
never see half an entry; an entry that cannot be read, or a zip whose sha256 is not its name,
is ignored. An entry says which zip a task uploads as a step's code, so the directory must be
this user's alone (``runtime/private.py``): one that another user owns or may write to is not
used (a warning says why). Zips past ``[stepop] bundle_cache_max_bytes`` are removed, the least
recently used first (a task reads a zip whole, so removing one never breaks a reader). The
cache never fails a step: an unwritable or unsafe directory only means no caching.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow_stepop import config
from airflow_stepop.runtime.private import PrivateDirectoryError, private_dir

log = logging.getLogger(__name__)

FORMAT = 1


class CodeBundle:
    """The zip, its sha256 (its name in storage) and how the runtime finds the callable.

    A bundle found in the cache reads its bytes only when asked: most tasks upload nothing.
    """

    def __init__(
        self, sha256: str, callable_entry: dict[str, Any], read: Callable[[], bytes]
    ) -> None:
        self.sha256 = sha256
        self.callable_entry = callable_entry
        self._read = read

    @cached_property
    def data(self) -> bytes:
        return self._read()


class BundleCache:
    def __init__(
        self, root: Path, settle_seconds: float = 2.0, max_bytes: int | None = None
    ) -> None:
        self.root = root
        self.settle_ns = int(settle_seconds * 1e9)
        self.max_bytes = max_bytes
        self._private: bool | None = None

    @classmethod
    def default(cls) -> BundleCache:
        """``$AIRFLOW_HOME/stepop-cache/bundles``: on the worker, beside its other state."""
        return cls(
            config.worker_cache_dir() / "bundles",
            max_bytes=config.get_int("bundle_cache_max_bytes"),
        )

    def _usable(self) -> bool:
        """Whether the directory is (or was made) this user's alone; said once when not."""
        if self._private is None:
            try:
                private_dir(self.root)
                self._private = True
            except PrivateDirectoryError as exc:
                log.warning("Not using the code bundle cache: %s", exc)
                self._private = False
            except OSError as exc:
                log.debug("Not caching code bundles in %s: %s", self.root, exc)
                self._private = False
        return self._private

    def find(self, function: Callable[..., Any], rebuild: Callable[[], bytes]) -> CodeBundle | None:
        """The callable's bundle if an earlier task built it from sources still unchanged.

        ``rebuild`` makes the zip anew, for a hit whose zip is gone or damaged: the caller's, so
        that this module needs nothing of the builder (which imports it)."""
        where = _entry_of(function)
        if where is None or not self._usable():
            return None
        key, context = where
        entry = self._load(key, context)
        if entry is None:
            return None
        callable_entry = entry["callable"]
        if callable_entry["kind"] == "pickle":  # only such a step needs the pickler's module
            from airflow_stepop.packaging.by_value import pickle_by_value

            by_value = pickle_by_value(function, entry.get("by_value", ()))
            if by_value.sha256() != entry.get("by_value_sha256"):
                return None
        elif lookup(sys.modules.get(function.__module__), function.__qualname__) is not function:
            return None
        sha256 = entry["sha256"]

        def read() -> bytes:
            data = self.read_zip(sha256)
            if data is None:  # gone or damaged, but its sources are unchanged: build it again
                from airflow_stepop.packaging.by_value import PackagingError

                data = rebuild()
                if hashlib.sha256(data).hexdigest() != sha256:
                    raise PackagingError(
                        f"The code of {function.__qualname__!r} changed while its step was "
                        "being staged; run the task again."
                    )
            return data

        return CodeBundle(sha256, callable_entry, read)

    def store(
        self,
        function: Callable[..., Any],
        entry: dict[str, Any],
        files: Iterable[Path],
        dirs: Iterable[Path],
        data: bytes,
    ) -> None:
        """Keep ``entry`` (``sha256``: the zip's) for a bundle built from ``files``/``dirs``."""
        where = _entry_of(function)
        if where is None or not self._usable():
            return
        key, context = where
        try:
            stats = [[str(p), (s := os.stat(p)).st_size, s.st_mtime_ns] for p in sorted(set(files))]
            stats += [[str(p), -1, os.stat(p).st_mtime_ns] for p in sorted(set(dirs))]
            settled = time.time_ns() - self.settle_ns
            if any(mtime_ns > settled for _, _, mtime_ns in stats):
                return  # just modified: a second edit could keep the same mtime
            self.root.mkdir(parents=True, exist_ok=True)
            zip_path = self.root / f"{entry['sha256']}.zip"
            if not zip_path.exists():
                self._write(zip_path, data)
                self._evict(keep=zip_path)
            record = {**entry, "format": FORMAT, "context": context, "stats": stats}
            self._write(self.root / f"{key}.json", json.dumps(record).encode())
        except OSError as exc:
            log.debug("Not caching the code bundle in %s: %s", self.root, exc)

    def read_zip(self, sha256: str) -> bytes | None:
        """The cached zip named ``sha256``, or None when it is missing or not that content."""
        if not re.fullmatch(r"[0-9a-f]{64}", sha256) or not self._usable():
            return None
        path = self.root / f"{sha256}.zip"
        try:
            data = path.read_bytes()
            os.utime(path)  # its last use, for eviction
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == sha256 else None

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used zips until they fit in ``max_bytes``."""
        if self.max_bytes is None:
            return
        zips = []
        for path in self.root.glob("*.zip"):
            with contextlib.suppress(OSError):
                info = path.stat()
                zips.append((info.st_mtime, info.st_size, path))
        total = sum(size for _, size, _ in zips)
        for _, size, path in sorted(zips):
            if total <= self.max_bytes:
                break
            if path != keep:
                with contextlib.suppress(OSError):
                    path.unlink()
                    total -= size

    def _load(self, key: str, context: dict[str, Any]) -> dict[str, Any] | None:
        try:
            entry = json.loads((self.root / f"{key}.json").read_bytes())
            if entry["format"] != FORMAT or entry["context"] != context:
                return None
            for path, size, mtime_ns in entry["stats"]:
                stat = os.stat(path)
                if stat.st_mtime_ns != mtime_ns or (size >= 0 and stat.st_size != size):
                    return None
            return entry
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, changed, or not an entry we wrote

    def _write(self, path: Path, data: bytes) -> None:
        """Write whole or not at all: a temporary file in the same directory, then a rename."""
        fd, temporary = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise


def _entry_of(function: Callable[..., Any]) -> tuple[str, dict[str, Any]] | None:
    """An entry's name (one per callable: the cache grows with callables, not with edits) and
    what it must have been made under; None for a callable without a module file."""
    module_file = getattr(sys.modules.get(function.__module__), "__file__", None)
    if not module_file:
        return None
    name = f"{function.__module__}\0{function.__qualname__}"
    key = hashlib.sha256(name.encode()).hexdigest()
    return key, {"python": sys.version, "path": sys.path, "file": module_file}


def lookup(module: Any, qualname: str) -> Any:
    """What ``module.<qualname>`` names now (None where a part is missing)."""
    target = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target
