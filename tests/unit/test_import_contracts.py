"""The package's architecture holds: layers point down, no import cycle, the job side is light.

The contracts are in pyproject.toml (``[tool.importlinter]``); import-linter reads every import
of the source, function-level ones included, and leaves out those under ``if TYPE_CHECKING:``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_of_pyproject_are_kept():
    lint = subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = lint.stdout + lint.stderr
    assert lint.returncode == 0, report[-6000:]
    assert "4 kept, 0 broken" in report, report[-3000:]
