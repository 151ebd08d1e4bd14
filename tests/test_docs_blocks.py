"""Every "try it" block of the docs runs as pasted, and leaves nothing running: README.md and
docs/*.md, fenced ```bash try-it.

Each block runs in a fresh ``bash`` (``-e -o pipefail``: the first failing command fails it) in
the repository root, with the emulated clouds up (the blocks' own ``make cloud-up`` reuses the
stack of ``.cloud/env``), ``.venv/bin`` on PATH and a private, empty ``AIRFLOW_HOME``. The
machine's own settings (TLS bundles, pip options) pass; this session's Airflow, cloud and test
variables do not, so a block that forgets a step fails here as it would for a user.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cloud import stack
from cloud.pytest_plugin import cloud_stack  # noqa: F401 - the fixture
from tests.processes import holding_files_under
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```bash try-it[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
# What a user's fresh shell would not have: this session's Airflow, cloud and test settings.
# (STEPOP_ENGINE_STATE/STEPOP_REGISTRY_PORT pass: they select the engine `make cloud-up` reuses.)
SESSION_ONLY = re.compile(
    r"^(AIRFLOW|AWS_(?!CA_BUNDLE)|GOOGLE_|AZURE_|GCSFS_|STORAGE_EMULATOR_HOST|PYTEST_|VIRTUAL_ENV"
    r"|STEPOP_(?!ENGINE_STATE|REGISTRY_PORT|CLOUD_CACHE))"
)


def try_it_blocks() -> list[tuple[str, str]]:
    """(``file:line``, block) for every ```bash try-it block of README.md and docs/*.md."""
    blocks = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{path.relative_to(REPO)}:{line}", match.group(1)))
    return blocks


BLOCKS = try_it_blocks()


def test_the_docs_have_try_it_blocks() -> None:
    """The extraction finds the blocks (a renamed fence would silently test nothing)."""
    assert any(where.startswith("docs/sagemaker.md") for where, _ in BLOCKS), BLOCKS


@pytest.mark.parametrize("block", [b for _, b in BLOCKS], ids=[w for w, _ in BLOCKS])
def test_try_it_block_runs_as_pasted(
    block: str,
    cloud_stack: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    if stack.STATE != REPO / ".cloud":
        pytest.skip(f"the docs read .cloud/env; this session's stack is {stack.STATE}")
    env = {k: v for k, v in os.environ.items() if not SESSION_ONLY.match(k)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["AIRFLOW_HOME"] = str(tmp_path / "airflow")
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", block],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"exit {result.returncode}:\n{output[-6000:]}"
    # A block stops what it starts: a process still writing under its AIRFLOW_HOME (a log) is
    # one a user would find running after pasting it (a job ending right now gets a moment).
    try:
        wait_for(lambda: not holding_files_under(str(tmp_path)), timeout=10)
    except AssertionError:
        pytest.fail(f"the block left processes running: {holding_files_under(str(tmp_path))}")
