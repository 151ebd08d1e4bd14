"""An on-disk cache of code bundles: a task process reuses what an earlier task packaged.

Airflow runs every task in a new process, so an in-memory cache helps no task. Without this
one, each step's ``execute()`` would parse the callable's modules, resolve their imports and
zip them again. An entry records the bundle's sha256, how the runtime finds the callable and
the size and modification time (ns) of every file the bundle was built from and of the
directories those files are in (a module added next to them changes what an import finds).
It is used only while all of those are unchanged, the rule Python applies to its own bytecode
caches. A file modified less than ``settle_seconds`` before an entry would be written could be
modified again within the file system's timestamp granularity without changing its mtime, so no
entry is written then (the next task packages anew).

Entries and zips are written to a temporary name and renamed into place, so concurrent tasks
never see half an entry; an entry that cannot be read, or a zip whose sha256 is not its name,
is ignored. The cache never fails a step: an unwritable directory only means no caching.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from airflow_stepop import config

log = logging.getLogger(__name__)

FORMAT = 1


class BundleCache:
    def __init__(self, root: Path, settle_seconds: float = 2.0) -> None:
        self.root = root
        self.settle_ns = int(settle_seconds * 1e9)

    @classmethod
    def default(cls) -> BundleCache:
        """``$AIRFLOW_HOME/stepop-cache/bundles``: on the worker, beside its other state."""
        return cls(Path(config.airflow_home()) / "stepop-cache" / "bundles")

    def load(self, key: str, context: dict[str, Any]) -> dict[str, Any] | None:
        """The entry stored under ``key`` if it was made in the same ``context`` (interpreter,
        import path) and every file and directory it names is unchanged."""
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

    def store(
        self,
        key: str,
        context: dict[str, Any],
        entry: dict[str, Any],
        files: Iterable[Path],
        dirs: Iterable[Path],
        data: bytes,
    ) -> None:
        """Keep ``entry`` (with ``entry["sha256"]``, the zip's) for sources ``files``/``dirs``."""
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
            record = {**entry, "format": FORMAT, "context": context, "stats": stats}
            self._write(self.root / f"{key}.json", json.dumps(record).encode())
        except OSError as exc:
            log.debug("Not caching the code bundle in %s: %s", self.root, exc)

    def read_zip(self, sha256: str) -> bytes | None:
        """The cached zip named ``sha256``, or None when it is missing or not that content."""
        try:
            data = (self.root / f"{sha256}.zip").read_bytes()
        except OSError:
            return None
        return data if hashlib.sha256(data).hexdigest() == sha256 else None

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


def cache_key(*parts: str) -> str:
    """The name of an entry: one per callable, so the cache grows with callables, not edits."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()
