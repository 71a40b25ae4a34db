"""Compile one specialised bitlinear shader natively and print naga's message (debug helper).
usage: python dev/bitlinear/compile.py [shader] [entry] [DEF=1 ...]"""
import asyncio, sys
from bitweb import shaders
from bitweb.gpu import request_device

async def main():
    shader = sys.argv[1] if len(sys.argv) > 1 else "bitlinear"
    entry = sys.argv[2] if len(sys.argv) > 2 else "gemv"
    defs = {a.split("=")[0]: a.split("=")[1] not in ("0", "") for a in sys.argv[3:]}
    dev = await request_device("native")
    code = shaders.specialise(shaders.source(shader), dev, defs, shader)
    open("/tmp/bl/last.wgsl", "w").write(code)
    m = dev.device.create_shader_module(code=code)
    dev.device.create_compute_pipeline(layout="auto", compute={"module": m, "entry_point": entry})
    print("ok")
asyncio.run(main())
