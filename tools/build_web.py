"""Build the archive the browser's Pyodide loads: build/web/bitweb.zip, and build/web/options.json
(bitweb.options.DATA, the option lists and bounds web/bitweb.mjs reads).

It holds exactly the browser-safe modules (bitweb.BROWSER_MODULES, stdlib only), the WGSL
sources (shaders/ -> bitweb/shaders/) and the pure-Python jinja2 and markupsafe packages (for
models with their own chat template; Pyodide's npm package ships no wheels), so the worker can
`unpackArchive` it onto sys.path. jinja2 / markupsafe come from PyPI once, at set-up time: `pip
download` of the pinned, hash-checked files in tools/web-requirements.txt into build/pydeps/
(kept; later runs are offline). Deterministic (fixed timestamps), stdlib only. Then the browser
kernel vectors (needs numpy), then the boot snapshot shipped beside the archive
(tools/boot_snapshot.py: needs Playwright and Chromium; made again only when the archive or
Pyodide changes).

It also writes build/web/precache.js, the list of files the service worker (web/sw.js) keeps for
offline use, each with its size and SHA-256, and a version (a hash of the list): the page
(web/index.html and every module it imports, found by following the relative `import`s and
`new URL('./…', import.meta.url)` references: the worker, the default model), Pyodide's runtime
and bitweb.zip (write_precache).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "pyapp" / "bitweb"
OUT = ROOT / "build" / "web" / "bitweb.zip"
WEB_REQUIREMENTS = ROOT / "tools" / "web-requirements.txt"
PYDEPS = ROOT / "build" / "pydeps"
sys.path.insert(0, str(PKG.parent))


def browser_modules() -> dict:
    """{module name: path} of bitweb.BROWSER_MODULES (with bitweb itself and the packages above
    each module; "x.*": package x and every module in it)."""
    from bitweb import BROWSER_MODULES
    out = {"bitweb": PKG / "__init__.py"}
    for m in BROWSER_MODULES:
        parts = m.split(".")
        for i in range(1, len(parts)):                      # the packages above it
            pkg = PKG.joinpath(*parts[:i], "__init__.py")
            if pkg.exists():
                out["bitweb." + ".".join(parts[:i])] = pkg
        if parts[-1] == "*":
            d = PKG.joinpath(*parts[:-1])
            for p in sorted(d.glob("*.py")):
                name = "bitweb." + ".".join(parts[:-1]) + ("" if p.stem == "__init__" else "." + p.stem)
                out[name] = p
            continue
        mod, pkg = PKG.joinpath(*parts).with_suffix(".py"), PKG.joinpath(*parts, "__init__.py")
        path = mod if mod.exists() else pkg
        if not path.exists():
            raise SystemExit(f"bitweb.BROWSER_MODULES names {m!r}, which is not a module of {PKG}")
        out["bitweb." + m] = path
    return out


def files():
    for p in sorted(set(browser_modules().values())):
        yield p, "bitweb/" + p.relative_to(PKG).as_posix()
    for p in sorted((ROOT / "shaders").glob("*.wgsl")):
        yield p, "bitweb/shaders/" + p.name


def web_requirements() -> list[tuple[str, str, str]]:
    """(name, version, sha256) of each line of tools/web-requirements.txt."""
    out = []
    for line in WEB_REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)\s+--hash=sha256:([0-9a-f]{64})\s*$", line)
        if m:
            out.append(m.groups())
        elif line.strip() and not line.startswith("#"):
            raise SystemExit(f"[setup] {WEB_REQUIREMENTS.name}: cannot read line {line!r}")
    return out


def _dist_file(name: str, version: str, sha: str) -> pathlib.Path | None:
    """The file in build/pydeps/ whose sha256 is `sha` (name==version's pinned download), or None."""
    for p in sorted(PYDEPS.glob("*")) if PYDEPS.is_dir() else []:
        if p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest() == sha:
            return p
    return None


def fetch_web_deps() -> list[pathlib.Path]:
    """The pinned distributions, downloaded with pip (hash-checked) when not in build/pydeps."""
    reqs = web_requirements()
    if any(_dist_file(*r) is None for r in reqs):
        PYDEPS.mkdir(parents=True, exist_ok=True)
        print(f"[setup] pip download {', '.join(f'{n}=={v}' for n, v, _ in reqs)} -> build/pydeps")
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--require-hashes", "--no-binary", "markupsafe", "--only-binary", "jinja2",
               "-r", str(WEB_REQUIREMENTS), "-d", str(PYDEPS)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"[setup] could not download the browser's jinja2 / markupsafe from PyPI:\n"
                             f"{r.stderr.strip()}")
    missing = [f"{n}=={v}" for n, v, s in reqs if _dist_file(n, v, s) is None]
    if missing:
        raise SystemExit(f"[setup] build/pydeps lacks {', '.join(missing)} with the pinned hash")
    return [_dist_file(*r) for r in reqs]


def web_deps():
    """(bytes, archive name) of the pure-Python files of jinja2 and markupsafe (+ licences)."""
    for dist in fetch_web_deps():
        if dist.name.endswith(".whl"):
            with zipfile.ZipFile(dist) as w:
                for n in sorted(w.namelist()):
                    if n.startswith("jinja2/") and n.endswith(".py"):
                        yield w.read(n), n
                    elif n.endswith("licenses/LICENSE.txt"):
                        yield w.read(n), "jinja2/LICENSE.txt"
        else:
            with tarfile.open(dist) as t:
                for m in sorted(t.getmembers(), key=lambda m: m.name):
                    parts = m.name.split("/")
                    if parts[1:3] == ["src", "markupsafe"] and m.name.endswith(".py"):
                        yield t.extractfile(m).read(), "markupsafe/" + parts[-1]
                    elif parts[1:] == ["LICENSE.txt"]:
                        yield t.extractfile(m).read(), "markupsafe/LICENSE.txt"


def write_archive() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_name(f"{OUT.name}.{os.getpid()}.tmp")     # test workers may build at once
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        def add(data, name):
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
        for src, name in files():
            add(src.read_bytes(), name)
        for data, name in web_deps():
            add(data, name)
    tmp.replace(OUT)


def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write `path` whole or not at all (a server may be reading it; another worker writing it)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_options(out: pathlib.Path | None = None) -> pathlib.Path:
    """build/web/options.json (or `out`): bitweb.options.DATA, what the browser library reads of the
    option lists and bounds (the Python side imports the module itself)."""
    from bitweb.options import DATA
    out = out or OUT.parent / "options.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, (json.dumps(DATA, indent=1) + "\n").encode())
    return out


# ---- the service worker's file list (web/sw.js) ------------------------------------------------
# Files the page needs that no `import` names: what py.mjs fetches and Pyodide's runtime (loadPyodide
# fetches these by name from its indexURL).
PRECACHE_DATA = ("build/web/bitweb.zip", "node_modules/pyodide/pyodide.asm.mjs", "node_modules/pyodide/pyodide.asm.wasm",
                 "node_modules/pyodide/python_stdlib.zip", "node_modules/pyodide/pyodide-lock.json")
PRECACHE_EXCLUDE = {"web/sw.js"}           # the service worker's own script: the browser keeps it
_HTML_REF = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"':]+)["']""", re.I)
_JS_REFS = (re.compile(r"""\b(?:from|import)\s*(["'])(\.{1,2}/[^"']+)\1"""),                     # import / export ... from
            re.compile(r"""\bimport\(\s*(["'])(\.{1,2}/[^"']+)\1\s*\)"""),                      # import('./x.mjs')
            re.compile(r"""\bnew URL\(\s*(["'])(\.{1,2}/[^"']+)\1\s*,\s*import\.meta\.url\s*\)"""))


def app_files(root: pathlib.Path = ROOT) -> list[str]:
    """The page's files, repo-relative: web/index.html, what it links (stylesheets, module scripts)
    and, transitively, every relative module specifier and `new URL('./...', import.meta.url)` of
    those modules (the worker, the default model). Specifiers resolve as URLs in the repository
    laid out as served (`../node_modules/...` from web/py.mjs is node_modules/...; tools/serve.mjs
    serves web/ at / and the rest under their own paths, so the same URLs hold there). A reference
    to a file that is not there stops the build. Comment lines (`//`, `/*`, `*`) are skipped."""
    from urllib.parse import urljoin, urlparse
    todo, seen = ["web/index.html"], []
    while todo:
        path = todo.pop(0)
        if path in seen or path in PRECACHE_EXCLUDE:
            continue
        f = root / path
        if not f.is_file():
            raise SystemExit(f"[setup] precache: {path} is referenced but not in {root}")
        seen.append(path)
        if f.suffix == ".html":
            refs = _HTML_REF.findall(f.read_text(encoding="utf-8"))
        elif f.suffix in (".mjs", ".js"):
            text = "\n".join(ln for ln in f.read_text(encoding="utf-8").splitlines() if not ln.lstrip().startswith(("//", "/*", "*")))
            refs = [m.group(2) for rx in _JS_REFS for m in rx.finditer(text)]
        else:
            continue
        for ref in refs:
            target = urlparse(urljoin("http://x/" + path, ref)).path.lstrip("/")
            if target and not target.endswith("/"):
                todo.append(target)
    return seen


def precache(root: pathlib.Path = ROOT) -> dict:
    """{"version", "files": [{"path", "bytes", "sha256"}]}: app_files + PRECACHE_DATA of `root`."""
    files = []
    page = app_files(root)
    for path in page + [p for p in PRECACHE_DATA if p not in page]:
        f = root / path
        if not f.is_file():
            raise SystemExit(f"[setup] precache: {path} is missing (npm install; then python tools/build_web.py)")
        data = f.read_bytes()
        files.append({"path": path, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    version = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    return {"version": version, "files": files}


def write_precache(root: pathlib.Path = ROOT) -> dict:
    """build/web/precache.js of `root` (web/sw.js imports it); written only when it changes."""
    man = precache(root)
    text = ("// Written by tools/build_web.py (write_precache): the files web/sw.js keeps for offline use.\n"
            f"self.BITWEB_PRECACHE = {json.dumps(man, separators=(',', ':'))};\n")
    out = root / "build" / "web" / "precache.js"
    if not out.exists() or out.read_text(encoding="utf-8") != text:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, text.encode())
    return man


def main() -> None:
    write_archive()
    print(f"[setup] wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
    write_options()
    man = write_precache()
    print(f"[setup] wrote build/web/precache.js ({len(man['files'])} files, "
          f"{sum(f['bytes'] for f in man['files'])} bytes, version {man['version']})")
    write_kernel_vectors()
    sys.stdout.flush()
    sys.path.insert(0, str(ROOT / "tools"))
    import boot_snapshot                    # (tools/boot_snapshot.py: made again only for a new key)
    boot_snapshot.main()


def write_kernel_vectors() -> None:
    """Expected outputs of the browser kernel cases, from the numpy references (web/dev/kernels.html)."""
    try:
        from bitweb.ref import build_cases
    except ImportError as e:     # numpy missing: `npm start` without the venv extras
        print(f"[setup] kernel vectors skipped ({e})")
        return
    b = build_cases("browser")
    atomic_write(OUT.parent / "kernel_vectors.bin", bytes(b.blob))
    atomic_write(OUT.parent / "kernel_vectors.json", b.manifest().encode())
    print(f"[setup] wrote {len(b.cases)} browser kernel cases ({len(b.blob)} bytes)")


if __name__ == "__main__":
    main()
