"""The code blocks of the docs, as a user copies them, for the tests that run them."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def python_block(page: str, containing: str) -> str:
    """The one ```python block of ``page`` (e.g. ``README.md``) that contains ``containing``."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / page).read_text(), re.S)
    found = [code for code in blocks if containing in code]
    assert len(found) == 1, f"{page}: {len(found)} python blocks contain {containing!r}"
    return found[0]
