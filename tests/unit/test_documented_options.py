"""The README is the contract: every [stepop] option the provider publishes is documented there."""

from __future__ import annotations

from pathlib import Path

from airflow_stepop.config import OPTIONS

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_stepop_option_is_in_the_readme():
    text = README.read_text()
    missing = [name for name in OPTIONS if f"`{name}`" not in text]
    assert not missing, f"[stepop] options missing from README.md: {missing}"
