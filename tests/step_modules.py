"""Step functions in a module of their own, as a user's helper module next to a DAG: imported
by name in the job (no Airflow import in it), so the job runs them without pickling."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest


def step_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str, source: str
) -> Iterator[ModuleType]:
    """Import ``source`` as a uniquely named module under ``tmp_path/code``; forget it after."""
    code = tmp_path / "code"
    code.mkdir()
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    (code / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(code))
    yield __import__(name)
    sys.modules.pop(name, None)
