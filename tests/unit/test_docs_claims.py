"""What the docs say exists does: every ``RESCALER_*`` setting the README and docs/ name is read
somewhere in the code, scripts or compose file, and every state backend they name is one the
code offers (issue 23, "docs claims that the code does not back")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# where a setting may be read: the code, benchmarks, tests (settings of the tests themselves),
# scripts and the compose file
CODE = [
    *(
        p
        for folder in ("rescaler", "dashboard", "workers", "bench", "tests", "scripts", ".ci")
        for p in (ROOT / folder).rglob("*")
        if p.suffix in {".py", ".sh", ""} and "__pycache__" not in p.parts
    ),
    ROOT / "docker-compose.yml",
    ROOT / "Dockerfile",
]


def test_every_setting_the_docs_name_is_read_by_the_code() -> None:
    code = "\n".join(p.read_text(errors="replace") for p in CODE if p.is_file())
    named = {
        (doc.name, name)
        for doc in DOCS
        for name in re.findall(r"\bRESCALER_[A-Z0-9_]*[A-Z0-9]\b", doc.read_text())
    }
    assert sorted((doc, name) for doc, name in named if name not in code) == []


def test_the_docs_name_no_state_store_the_code_lacks() -> None:
    for doc in DOCS:
        assert not re.search(r"\bsqlite store\b", doc.read_text(), re.IGNORECASE), doc.name
