"""The docs hang together: README.md links every page of docs/, and every relative link of
README.md and docs/*.md leads to a file that exists (a page renamed or moved breaks here, not
for a reader)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]


def _prose(page: Path) -> str:
    """The page without its code (fenced blocks and inline spans hold text like ``](x)``)."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("page", DOCS, ids=[page.name for page in DOCS])
def test_the_readme_links_every_docs_page(page: Path) -> None:
    assert f"](docs/{page.name})" in _prose(ROOT / "README.md")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    broken = [
        target
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page))
        if not re.match(r"[a-z][a-z0-9+.-]*:|#", target)  # a URL or an anchor of the page
        and not (page.parent / target.split("#", 1)[0]).exists()
    ]
    assert not broken, f"{page.relative_to(ROOT)} links to missing files: {broken}"
