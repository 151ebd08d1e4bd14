"""The code bundle's extracted tree, reused by the jobs of one user only while it matches.

A local process job reuses the tree an earlier job extracted (``<cache>/code/<sha256>/bundle``).
The tree is imported from, so before reuse it is compared with the verified zip held in memory:
the same file names, sizes and CRC-32s, no other file (Python's ``__pycache__`` folders aside);
anything else is extracted afresh. The cache directory is private (``private.py``) and a job
keeps its tree's entry locked while it runs (``cache.py``), so eviction never pulls the code
from under a job that still imports from it.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib
from pathlib import Path

from airflow_stepop.runtime.cache import DiskCache
from airflow_stepop.runtime.digest import CHUNK_SIZE

TREE_NAME = "bundle"
BYTECODE_DIR = "__pycache__"  # written by Python beside the sources it imports


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as file:
        while block := file.read(CHUNK_SIZE):
            crc = zlib.crc32(block, crc)
    return crc


def matches(tree: Path, archive: zipfile.ZipFile) -> bool:
    """Whether ``tree`` holds exactly the archive's files: names, sizes and CRC-32s."""
    if not tree.is_dir() or tree.is_symlink():
        return False
    expected = {info.filename: info for info in archive.infolist() if not info.is_dir()}
    seen = 0
    for directory, dirnames, filenames in os.walk(tree):
        if BYTECODE_DIR in dirnames and not os.path.islink(os.path.join(directory, BYTECODE_DIR)):
            dirnames.remove(BYTECODE_DIR)
        if any(os.path.islink(os.path.join(directory, name)) for name in dirnames):
            return False  # never in an extracted zip
        for name in filenames:
            path = Path(directory, name)
            info = expected.get(path.relative_to(tree).as_posix())
            if info is None or path.is_symlink() or path.stat().st_size != info.file_size:
                return False
            if _crc32(path) != info.CRC:
                return False
            seen += 1
    return seen == len(expected)


def install(data: bytes, sha256: str, cache: DiskCache) -> Path:
    """The extracted tree of a verified bundle (``data``, named by ``sha256``): the cached one
    when it matches, else a new one. It stays in the cache while this process runs."""
    entry = cache.entry(sha256).open()
    try:
        tree = entry.path / TREE_NAME
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if not matches(tree, archive):
                with entry.fetching():  # one job extracts, the others wait and reuse it
                    if not matches(tree, archive):
                        entry.set_aside(TREE_NAME)
                        scratch = entry.scratch()
                        try:
                            archive.extractall(scratch / TREE_NAME)
                            entry.publish(scratch / TREE_NAME, TREE_NAME)
                        finally:
                            entry.discard(scratch)
        entry.keep()
    finally:
        entry.close()
    cache.evict()
    return tree
