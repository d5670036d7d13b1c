"""Module docstrings open with one short paragraph and stay short (docs/ holds the design prose)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("platform_lib", "tasks", "workflows", "bench")
#: lines of the opening paragraph (what the module is for, 1-4 sentences)
MAX_FIRST_PARAGRAPH_LINES = 5
#: lines of the whole module docstring: room for a short shape legend or list, not an essay
MAX_DOCSTRING_LINES = 12

MODULES = sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def _module_docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=True)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_module_docstring_opens_with_one_short_paragraph(path: Path) -> None:
    doc = _module_docstring(path)
    assert doc, f"{path.relative_to(REPO)}: no module docstring"
    lines = doc.splitlines()
    first = doc.split("\n\n", 1)[0].splitlines()
    assert len(first) <= MAX_FIRST_PARAGRAPH_LINES, (
        f"{path.relative_to(REPO)}: the opening paragraph has {len(first)} lines "
        f"(at most {MAX_FIRST_PARAGRAPH_LINES}); say what the module is for in 1-4 sentences"
    )
    assert len(lines) <= MAX_DOCSTRING_LINES, (
        f"{path.relative_to(REPO)}: the module docstring has {len(lines)} lines "
        f"(at most {MAX_DOCSTRING_LINES}); move design prose to the function it is about, "
        "the package README.md or docs/"
    )
    assert not any(line.startswith(("<<<<<<<", "=======", ">>>>>>>")) for line in lines), (
        f"{path.relative_to(REPO)}: merge-conflict markers in the module docstring"
    )


def test_every_package_has_modules() -> None:
    for package in PACKAGES:
        assert any(p.parts[len(REPO.parts)] == package for p in MODULES), package
