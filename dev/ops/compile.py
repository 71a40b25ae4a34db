"""Compile one specialised shader natively, write the WGSL that was compiled, print naga's message.

usage: .venv/bin/python dev/ops/compile.py [shader] [entry] [DEF=1 ...] [--const NAME=VALUE ...]

The code (#if resolved for this device plus the DEF=1 / DEF=0 defines, includes appended) is
written to $TMPDIR/bitweb_<shader>_<entry>.wgsl, so a compiler message's line number can be
looked up there (the include markers say which file a line came from).
"""
import argparse, asyncio, os, tempfile
from bitweb import formats, shaders
from bitweb.gpu import request_device


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("shader", nargs="?", default="bitlinear")
    ap.add_argument("entry", nargs="?", default="gemv")
    ap.add_argument("defines", nargs="*", help="NAME=1 or NAME=0; FORMAT=<type name or id>, e.g. FORMAT=TQ1_0")
    ap.add_argument("--const", nargs="*", default=[], help="override constants NAME=VALUE")
    a = ap.parse_args()
    defs = {k: formats.get(int(v) if v.isdigit() else v) if k == "FORMAT" else v not in ("0", "")
            for k, v in (d.split("=", 1) for d in a.defines)}
    consts = {c.split("=")[0]: float(c.split("=")[1]) for c in a.const}
    dev = await request_device("native")
    code = shaders.specialise(shaders.source(a.shader), dev, defs, a.shader)
    path = os.path.join(tempfile.gettempdir(), f"bitweb_{a.shader}_{a.entry}.wgsl")
    with open(path, "w") as f:
        f.write(code)
    print("wrote", path)
    m = dev.device.create_shader_module(code=code)
    dev.device.create_compute_pipeline(layout="auto", compute={"module": m, "entry_point": a.entry, "constants": consts})
    print("ok")

asyncio.run(main())
