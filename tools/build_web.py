"""Build the archive the browser's Pyodide loads: build/web/bitweb.zip.

It holds exactly the browser-safe modules (bitweb.BROWSER_MODULES, stdlib only) and the WGSL
sources (shaders/ -> bitweb/shaders/), so the worker can `unpackArchive` it into site-packages.
Deterministic (fixed timestamps), stdlib only. Then the browser kernel vectors (needs numpy).
"""
from __future__ import annotations

import pathlib
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "pyapp" / "bitweb"
OUT = ROOT / "build" / "web" / "bitweb.zip"
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


def write_archive() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for src, name in files():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, src.read_bytes())
    tmp.replace(OUT)


def main() -> None:
    write_archive()
    print(f"[setup] wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
    write_kernel_vectors()


def write_kernel_vectors() -> None:
    """Expected outputs of the browser kernel cases, from the numpy references (web/kernels.html)."""
    try:
        from bitweb.ref import build_cases
    except ImportError as e:     # numpy missing: `npm start` without the venv extras
        print(f"[setup] kernel vectors skipped ({e})")
        return
    b = build_cases("browser")
    (OUT.parent / "kernel_vectors.bin").write_bytes(bytes(b.blob))
    (OUT.parent / "kernel_vectors.json").write_text(b.manifest())
    print(f"[setup] wrote {len(b.cases)} browser kernel cases ({len(b.blob)} bytes)")


if __name__ == "__main__":
    main()
