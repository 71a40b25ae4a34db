"""The docs are true of the tree: ARCHITECTURE.md's file tables name every module of the package and
every web and tools file, and every repository path README.md, ARCHITECTURE.md and PERFORMANCE.md
name (in tables and prose, backticked or not; code blocks aside) exists, or is made at set-up or
run time by a tool that names it (MADE). ARCHITECTURE.md and PERFORMANCE.md stay maps, not logs:
at most LIMITS lines each."""
from __future__ import annotations

import itertools
import os
import re

from tests.conftest import ROOT

DOC = (ROOT / "ARCHITECTURE.md").read_text()
PKG = ROOT / "pyapp" / "bitweb"
DOCS = ("README.md", "ARCHITECTURE.md", "PERFORMANCE.md")
LIMITS = {"ARCHITECTURE.md": 450, "PERFORMANCE.md": 600}

# Paths the docs may name that are not in the tree, by prefix: who makes them. A named path under
# one of these passes when its last name occurs in one of the makers' sources (so a renamed
# artefact still fails).
MADE = {
    "build/web/": ("tools/build_web.py", "tools/boot_snapshot.py"),         # set-up: the web archive
    "build/assets/": ("tools/fetch_test_assets.py", "tools/test-assets.txt"),  # setup.sh --test
    "build/perf": ("dev/perf/stop_to_idle.py",),                          # its generated models
    "build/": ("tools/setup.sh", "tools/build_web.py"),
    "test-results/": ("tools/test.sh", "tools/gpu_check.py", "tests/e2e/test_real_model.py"),
    "node_modules/": ("package.json", "tools/build_web.py", "tools/serve.mjs"),   # npm install
    ".venv": ("tools/setup.sh",),
}
# first names of a path that is checked (others: another project's paths, pairs such as I2_S/TQ2_0)
ROOTS = {"pyapp", "web", "tools", "tests", "dev", "shaders", "training", "docs", ".ci", "bitweb",
         "build", "test-results", "node_modules", ".venv"}
FILE = re.compile(r"^[\w.+-]+\.(py|mjs|js|ts|wgsl|html|css|json|md|sh|txt|toml|npz)$")   # a bare name checked
NOT_FILES = {"Node.js": "the JavaScript runtime"}
DATA = re.compile(r"\.(gguf|bin|zip|gz|npy|wasm|d\.ts)$")   # a bare data file name: a model, an artefact (not checked)
MODULE = re.compile(r"^bitweb((?:\.[A-Za-z_]\w*)+)(\(.*)?$")
SKIP = ("node_modules", ".venv", ".git", "build", "test-results", "__pycache__")


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


# ---- every path the docs name ----

def prose(text: str) -> str:
    """The text without its fenced code blocks (shell sessions and printed output, not names)."""
    return re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.S | re.M)


def candidates(text: str) -> list[str]:
    """Path-like words of the prose: repository paths (first name in ROOTS), bare file names and
    `bitweb.<module>` names, with URLs, flags, page addresses (/dev/...) and queries left out."""
    out = []
    for word in re.split(r"[\s`|]+", prose(text)):
        word = word.split("=", 1)[-1].split("?", 1)[0]
        word = word.strip("\"'()[],;:*!").rstrip(".")
        if (not word or "://" in word or word.startswith(("-", "/", "$", "hf:", "http")) or "@" in word
                or ("/" in word and word.split("/")[0] not in ROOTS)):
            continue
        if "/" in word or (FILE.match(word) and word not in NOT_FILES) or (MODULE.match(word) and not DATA.search(word)):
            out.append(word)
    return out


def tree_names() -> tuple[set, set]:
    """The repository's files and directories (relative paths) and file names, build outputs aside."""
    paths, names = set(), set()
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in SKIP]
        rel = os.path.relpath(d, ROOT)
        if rel != ".":
            paths.add(rel.replace(os.sep, "/"))
        for f in files:
            paths.add(os.path.join(rel, f).replace(os.sep, "/").removeprefix("./"))
            names.add(f)
    return paths, names


def expand(path: str) -> list[str]:
    """A name with placeholders as globs: `<x>`, an ALL-CAPS name (FILE.gguf, NAME) -> `*`; `{a,b}`
    -> each."""
    parts = [p.split(",") for p in re.split(r"\{([^}]*)\}", path)]
    out = []
    for combo in itertools.product(*parts):
        p = re.sub(r"<[^>]*>", "*", "".join(combo))
        p = "/".join(re.sub(r"^[A-Z][A-Z0-9_]*(?=(\.|$))", "*", c) for c in p.split("/"))
        out.append(p)
    return out


def made(path: str) -> bool:
    for prefix, makers in MADE.items():
        if path.startswith(prefix):
            name = path.rstrip("/").rsplit("/", 1)[-1]
            return any(name in (ROOT / m).read_text() for m in makers if (ROOT / m).exists())
    return False


def js_exports() -> set:
    src = (ROOT / "web" / "bitweb.mjs").read_text()
    names = set(re.findall(r"^export (?:async )?(?:function|const|class|let) (\w+)", src, re.M))
    for group in re.findall(r"^export \{([^}]*)\}", src, re.M):
        names |= {n.strip().split(" as ")[-1] for n in group.split(",")}
    return names


def missing_paths(text: str, paths: set, names: set, exports: set) -> list[str]:
    bad = []
    for word in candidates(text):
        m = MODULE.match(word)
        if m and not FILE.match(word):
            first = m.group(1).split(".")[1]
            if not ((PKG / f"{first}.py").exists() or (PKG / first / "__init__.py").exists()
                    or first in exports or re.search(rf"^{first}\b", (PKG / "__init__.py").read_text(), re.M)):
                bad.append(word)
            continue
        path = word.rstrip("/")
        if path.startswith("bitweb/"):
            path = "pyapp/" + path
        if "/" not in path:
            if path in names or path in paths or any(made(p + path) for p in ("build/web/", "test-results/")) \
                    or any(re.fullmatch(e.replace(".", r"\.").replace("*", r"[^/]*"), n)
                           for e in expand(path) if e != path for n in names):
                continue
            bad.append(word)
            continue
        if path in paths or made(path):
            continue
        globs = [e for e in expand(path) if e != path or "*" in e]
        if globs and all(list(ROOT.glob(e)) or made(e.replace("*", "")) for e in globs):
            continue
        bad.append(word)
    return bad


def test_every_path_the_docs_name_exists():
    paths, names = tree_names()
    exports = js_exports()
    for doc in DOCS:
        bad = missing_paths((ROOT / doc).read_text(), paths, names, exports)
        assert not bad, f"{doc} names paths that are not in the tree (nor made by a tool: MADE): {sorted(set(bad))}"


def test_the_maps_stay_short():
    for doc, limit in LIMITS.items():
        n = len((ROOT / doc).read_text().splitlines())
        assert n <= limit, f"{doc} has {n} lines (at most {limit}: a map, not a log; history stays in git)"


def test_the_checks_can_fail():
    assert named_paths(["web/a.mjs", "b.mjs"]) == [["web/a.mjs"], ["web/b.mjs", "b.mjs"]]
    assert first_cells("| `x.py`, `y/` | what |\n|---|---|") == [["x.py", "y/"]]
    text = ("See `pyapp/bitweb/blockquant.py`, bitweb/formats.py, `bitweb.blockquant`, nowhere.wgsl and\n"
            "`tests/test_docs.py`, `shaders/fmt_<name>.wgsl`, `MODEL.gguf`, https://x.org/a/b.py,\n"
            "`--out x/y.gguf`, `/dev/bench.html?model=URL`, `build/web/nothing.bin`, `I2_S/TQ2_0`, `bitweb.gguf`.\n"
            "```\nweb/not-checked-in-a-code-block.mjs\n```\n")
    paths, names = tree_names()
    assert missing_paths(text, paths, names, js_exports()) == [
        "pyapp/bitweb/blockquant.py", "bitweb/formats.py", "bitweb.blockquant", "nowhere.wgsl",
        "build/web/nothing.bin"]
    assert expand("build/web/kernel_vectors.{json,bin}") == ["build/web/kernel_vectors.json",
                                                             "build/web/kernel_vectors.bin"]
