"""ARCHITECTURE.md's file tables are true of the tree: every path they name exists, and every
module of the package, every web and tools file is named there."""
from __future__ import annotations

import re

from tests.conftest import ROOT

DOC = (ROOT / "ARCHITECTURE.md").read_text()
PKG = ROOT / "pyapp" / "bitweb"


def section(title: str) -> str:
    start = DOC.index(title)
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end >= 0 else None]


def first_cells(text: str) -> list[list[str]]:
    """The backticked names in each table row's first cell (header rows skipped)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cell = line.split("|")[1]
            names = re.findall(r"`([^`]+)`", cell)
            if names:
                rows.append(names)
    return rows


def named_paths(names: list[str]) -> list[list[str]]:
    """A cell's names as candidate paths: a bare name lives in the directory of the cell's last
    path, or at the top of the repository."""
    out, base = [], ""
    for n in names:
        if "/" in n:
            base = n.rstrip("/").rsplit("/", 1)[0] + "/" if "/" in n.rstrip("/") else ""
            out.append([n])
        else:
            out.append([base + n, n])
    return out


def test_the_package_table_names_every_module_and_only_modules():
    named = {n for row in first_cells(section("## Python package")) for n in row}
    for n in named:
        assert (PKG / n).exists(), f"ARCHITECTURE.md names pyapp/bitweb/{n}, which does not exist"
    present = {p.name + ("/" if p.is_dir() else "") for p in PKG.iterdir()
               if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    missing = sorted(present - named)
    assert not missing, f"pyapp/bitweb modules ARCHITECTURE.md does not describe: {missing}"


def test_the_other_files_table_names_files_that_exist():
    for row in first_cells(section("## Other files")):
        for paths in named_paths(row):
            found = [p for p in paths if list(ROOT.glob(p.split("<")[0] + "*"))] if any(
                ch in paths[0] for ch in "*<") else [p for p in paths if (ROOT / p).exists()]
            assert found, f"ARCHITECTURE.md names {paths[0]}, which does not exist"


def test_every_web_and_tools_file_is_named():
    files = [p for d in ("web", "tools") for p in (ROOT / d).rglob("*")
             if p.is_file() and p.suffix in (".mjs", ".js", ".html", ".py", ".sh", ".json", ".css")]
    missing = [str(p.relative_to(ROOT)) for p in files
               if p.name not in DOC and str(p.relative_to(ROOT)) not in DOC]
    assert not missing, f"files ARCHITECTURE.md does not mention: {missing}"


def test_the_checks_can_fail():
    assert named_paths(["web/a.mjs", "b.mjs"]) == [["web/a.mjs"], ["web/b.mjs", "b.mjs"]]
    assert first_cells("| `x.py`, `y/` | what |\n|---|---|") == [["x.py", "y/"]]
