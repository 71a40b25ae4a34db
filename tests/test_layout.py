"""The package layout: which modules the browser gets, that they import with only the standard
library, that the browser archive holds exactly them, and that no bitweb modules import each other
in a cycle."""
import ast
import importlib.util
import json
import pathlib
import subprocess
import sys
import zipfile

import bitweb
from tests.conftest import ROOT

PKG = ROOT / "pyapp" / "bitweb"


def _build_web():
    spec = importlib.util.spec_from_file_location("build_web", ROOT / "tools" / "build_web.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BROWSER = _build_web().browser_modules()          # {module name: path}

# Runs in a fresh interpreter: every import outside the standard library fails (numpy, wgpu,
# jinja2 ...), except bitweb itself and stand-ins for Pyodide's `js` / `pyodide.ffi`, which only
# gpu.browser and webapp import (webapp inside a try).
BLOCKER = r'''
import importlib.abc, importlib.machinery, sys, types, json

class Stub(types.ModuleType):
    __path__ = []
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})

class Gate(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in ("js", "pyodide"):
            return importlib.machinery.ModuleSpec(name, self)
        if top != "bitweb" and top not in sys.stdlib_module_names:
            raise ImportError(f"blocked: {name} is not in the standard library")
        return None
    def create_module(self, spec):
        return Stub(spec.name)
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, Gate())
for m in [m for m in sys.modules if m.split(".")[0] not in sys.stdlib_module_names]:
    del sys.modules[m]
failed = {}
for name in json.loads(sys.argv[1]):
    try:
        __import__(name)
    except Exception as e:
        failed[name] = f"{type(e).__name__}: {e}"
print(json.dumps(failed))
'''


def _blocked_import(names):
    r = subprocess.run([sys.executable, "-c", BLOCKER, json.dumps(names)], capture_output=True, text=True,
                       cwd=ROOT / "pyapp", timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_browser_modules_import_with_only_the_standard_library():
    assert {"bitweb.engine", "bitweb.blocks", "bitweb.upload", "bitweb.kernels.bitlinear", "bitweb.gpu.browser"} <= set(BROWSER)
    assert _blocked_import(sorted(BROWSER)) == {}


def test_the_blocker_can_fail():
    failed = _blocked_import(["bitweb.numpy_model", "bitweb.gpu.native", "bitweb.commands.dequant"])
    assert set(failed) == {"bitweb.numpy_model", "bitweb.commands.dequant"}, failed   # native imports wgpu lazily
    assert "blocked: numpy" in failed["bitweb.numpy_model"]


def test_build_web_zips_exactly_the_browser_modules(tmp_path):
    bw = _build_web()
    bw.OUT = tmp_path / "bitweb.zip"
    bw.write_archive()
    names = set(zipfile.ZipFile(bw.OUT).namelist())
    shaders = {"bitweb/shaders/" + p.name for p in (ROOT / "shaders").glob("*.wgsl")}
    mods = {"bitweb/" + p.relative_to(PKG).as_posix() for p in BROWSER.values()}
    deps = {name for _, name in bw.web_deps()}       # the bundled pure-Python jinja2 / markupsafe
    assert "jinja2/sandbox.py" in deps and "markupsafe/_native.py" in deps
    assert all(n.startswith(("jinja2/", "markupsafe/")) and not n.endswith((".so", ".c")) for n in deps)
    assert names == mods | shaders | deps
    assert "bitweb/__init__.py" in names and "bitweb/numpy_model.py" not in names
    assert not any(n.startswith(("bitweb/commands/", "bitweb/authoring/", "bitweb/ref/")) for n in names)


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts}


def _imports(name: str) -> set:
    """bitweb modules `name` imports anywhere in its file (top level or inside functions)."""
    out = set()
    is_pkg = MODULES[name].name == "__init__.py"
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = name if is_pkg else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in MODULES and t != name}
    return out


# A package's __init__ that picks one of its own modules at run time (gpu: the native or browser
# backend) is not a cycle: the backend imports the package, never the reverse at import time.
GRAPH = {m: {t for t in _imports(m) if not t.startswith(m + ".")} for m in MODULES}


def test_no_import_cycles():
    state, cycles = {}, []

    def visit(m, stack):
        state[m] = "open"
        for t in sorted(GRAPH[m]):
            if state.get(t) == "open":
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = "done"
    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_cycle_finder_can_fail(monkeypatch):
    monkeypatch.setitem(GRAPH, "bitweb.formats", GRAPH["bitweb.formats"] | {"bitweb.gguf"})
    try:
        test_no_import_cycles()
    except AssertionError as e:
        assert "bitweb.gguf" in str(e) and "bitweb.formats" in str(e)
    else:
        raise AssertionError("a formats <-> gguf cycle went unnoticed")


def test_browser_modules_import_only_browser_modules():
    """What the browser loads never reaches a CPython-only module, even through a lazy import
    (except gpu's choice of the native backend, made only when asked for natively)."""
    allowed = {("bitweb.gpu", "bitweb.gpu.native")}
    bad = {(m, t) for m in BROWSER for t in _imports(m) if t not in BROWSER} - allowed
    assert bad == set()


def test_one_list():
    assert bitweb.BROWSER_MODULES and set(BROWSER) >= {"bitweb." + m for m in bitweb.BROWSER_MODULES
                                                       if not m.endswith(".*")}
