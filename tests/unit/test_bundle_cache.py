"""The worker's code bundle cache is bounded and private (issue 39, points 5 and 7): an entry
names the zip a task uploads as a step's code, so another user must not be able to write it."""

from __future__ import annotations

import hashlib
import logging

import pytest

from airflow_stepop.packaging.cache import BundleCache
from tests.step_modules import step_module


@pytest.fixture
def steps(tmp_path, monkeypatch):
    yield from step_module(
        tmp_path,
        monkeypatch,
        "cached_steps",
        """
            def first():
                return 1

            def second():
                return 2
        """,
    )


def _store(cache: BundleCache, function, data: bytes) -> str:
    sha256 = hashlib.sha256(data).hexdigest()
    entry = {"sha256": sha256, "callable": {"kind": "import"}}
    cache.store(function, entry, files=[], dirs=[], data=data)
    return sha256


def test_zips_past_the_bound_go_least_recently_used_first(tmp_path, steps):
    cache = BundleCache(tmp_path / "bundles", settle_seconds=0, max_bytes=1500)
    first = _store(cache, steps.first, b"1" * 1000)
    second = _store(cache, steps.second, b"2" * 1000)

    assert cache.read_zip(first) is None  # evicted: its step builds it again when needed
    assert cache.read_zip(second) == b"2" * 1000
    assert sum(p.stat().st_size for p in (tmp_path / "bundles").glob("*.zip")) <= 1500


def test_a_bundle_cache_others_may_write_is_not_used(tmp_path, steps, caplog):
    root = tmp_path / "bundles"
    root.mkdir()
    root.chmod(0o777)
    cache = BundleCache(root, settle_seconds=0)

    with caplog.at_level(logging.WARNING, logger="airflow_stepop.packaging.cache"):
        sha256 = _store(cache, steps.first, b"1" * 1000)
        assert cache.find(steps.first, rebuild=lambda: b"") is None

    assert cache.read_zip(sha256) is None and not any(root.iterdir())
    assert f"The cache directory {root} may be written by others" in caplog.text
