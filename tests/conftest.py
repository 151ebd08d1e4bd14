"""Test-wide set-up: a private AIRFLOW_HOME with its own SQLite metadata DB, made once.

With ``CI`` set, a skipped test fails (only tests marked ``live`` may skip): in CI a missing
engine, registry, image or emulated cloud is a broken set-up (`make test` starts them all), not
a reason to pass with less tested.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Must happen before anything imports airflow.
_HOME = Path(os.environ.get("STEPOP_TEST_AIRFLOW_HOME") or tempfile.mkdtemp(prefix="stepop-af-"))
os.environ["AIRFLOW_HOME"] = str(_HOME)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(__file__).parent / "e2e" / "dags")
os.environ.setdefault("STEPOP_CACHE_DIR", str(_HOME / "cache"))
# gcsfs reads this once, at its import: its default asks each bucket's storage layout, an API
# the GCS emulators lack (every listing would retry it for minutes).
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

DAGS_FOLDER = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
if str(DAGS_FOLDER) not in sys.path:
    sys.path.insert(0, str(DAGS_FOLDER))  # as Airflow does for DAG files


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """In CI, turn the skip of a test not marked ``live`` into a failure that says why."""
    report = yield
    if (
        os.environ.get("CI")
        and report.skipped
        and not hasattr(report, "wasxfail")
        and item.get_closest_marker("live") is None
    ):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (only `live` tests may skip): {reason}"
    return report


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """An initialized metadata DB (dag.test() needs one)."""
    marker = _HOME / ".db-ready"
    if not marker.exists():
        subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            check=True,
            capture_output=True,
        )
        marker.touch()
    return _HOME


@pytest.fixture
def artifact_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh file:// artifact root and local jobs dir for one test."""
    root = tmp_path / "artifacts"
    monkeypatch.setenv("AIRFLOW__STEPOP__ARTIFACT_ROOT", f"file://{root}")
    monkeypatch.setenv("AIRFLOW__STEPOP__LOCAL_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("AIRFLOW__STEPOP__POLL_INTERVAL", "0.2")
    return root
