"""Every relative link in README.md and docs/*.md points at a file or directory that exists, so
the README stays an entry point whose links lead somewhere (issue 48). Anchors are not checked:
the part after ``#`` is dropped before the path is resolved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target) and ![alt](target); the target ends at whitespace (a title may follow) or ")"
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'][^)]*)?\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, …


def relative_links(text: str) -> list[str]:
    """The relative link targets of a Markdown text, outside code and HTML comments."""
    for pattern in (FENCE, COMMENT, CODE_SPAN):
        text = pattern.sub("", text)
    return [
        target
        for target in LINK.findall(text)
        if not EXTERNAL.match(target) and not target.startswith("#")
    ]


def test_relative_links_are_found_outside_code_only() -> None:
    text = (
        "See [the API](docs/api.md#errors), ![a plot](../bench/x.png 'plot') and "
        "[the web](https://example.org), [here](#below), `[not](a.md)`.\n"
        "```\n[nor](b.md)\n```\n<!-- [nor this](c.md) -->\n"
    )
    assert relative_links(text) == ["docs/api.md#errors", "../bench/x.png"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_at_an_existing_file(doc: Path) -> None:
    missing = [
        target
        for target in relative_links(doc.read_text("utf-8"))
        if not (doc.parent / target.split("#", 1)[0].split("?", 1)[0]).exists()
    ]
    assert missing == [], f"{doc.relative_to(ROOT)} links to files that do not exist"
