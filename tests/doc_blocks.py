"""The code blocks of the docs, as a user copies them, for the tests that run them."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def python_block(page: str, containing: str) -> str:
    """The one ```python block of ``page`` (e.g. ``README.md``) that contains ``containing``."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / page).read_text(), re.S)
    found = [code for code in blocks if containing in code]
    assert len(found) == 1, f"{page}: {len(found)} python blocks contain {containing!r}"
    return found[0]


def run_dag_block(
    page: str,
    dag_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bundles: list[dict[str, Any]],
    stand_ins: dict[str, str] | None = None,
) -> Any:
    """Save the block that defines ``dag_name`` as a DAG file, as a user would, and run its DAG
    with ``dag.test()`` (the file is a DAG bundle of its own: dag.test() runs a DAG as its
    bundle has it). ``stand_ins`` replaces text the block must hold (an image no machine here
    can pull, say) with what stands in for it. Returns the DAG run."""
    module = f"doc_{dag_name}"
    code = python_block(page, f"def {dag_name}(")
    for text, stand_in in (stand_ins or {}).items():
        assert text in code, f"{page}: the block of {dag_name} no longer holds {text!r}"
        code = code.replace(text, stand_in)
    (tmp_path / f"{module}.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    own = {
        "name": "doc-block",
        "classpath": bundles[0]["classpath"],
        "kwargs": {"path": str(tmp_path)},
    }
    monkeypatch.setenv(
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", json.dumps([*bundles, own])
    )
    sys.modules.pop(module, None)
    return getattr(importlib.import_module(module), dag_name)().test()
