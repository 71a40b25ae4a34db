"""Build the archive the browser's Pyodide loads: build/web/bitweb.zip.

It holds the pure-Python package (pyapp/bitweb) and the WGSL sources
(shaders/ -> bitweb/shaders/), so the worker can `unpackArchive` it into
site-packages. Deterministic (fixed timestamps), stdlib only.
"""
from __future__ import annotations

import pathlib
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "web" / "bitweb.zip"


def files():
    pkg = ROOT / "pyapp" / "bitweb"
    for p in sorted(pkg.rglob("*.py")):
        if "__pycache__" not in p.parts:
            yield p, "bitweb/" + p.relative_to(pkg).as_posix()
    for p in sorted((ROOT / "shaders").glob("*.wgsl")):
        yield p, "bitweb/shaders/" + p.name


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for src, name in files():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, src.read_bytes())
    tmp.replace(OUT)
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
