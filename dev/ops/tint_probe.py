"""Compile WGSL snippets with Chromium's Tint (SwiftShader adapter) and print errors.

usage: .venv/bin/python dev/ops/tint_probe.py file.wgsl[:entry] ...   (or import probe())
Also prints the adapter limits. Dev tool only (needs node + /usr/bin/chromium).
"""
import json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from chromium import page  # noqa: E402

JS = """async (mods) => {
  const ad = await navigator.gpu.requestAdapter();
  const lim = {}; for (const k in ad.limits) lim[k] = ad.limits[k];
  const feats = [...ad.features];
  const req = {}; for (const k of ['maxStorageBuffersPerShaderStage','maxComputeWorkgroupStorageSize','maxStorageBufferBindingSize','maxBufferSize','maxComputeInvocationsPerWorkgroup']) req[k] = ad.limits[k];
  const dev = await ad.requestDevice({requiredFeatures: feats.filter(f => f==='subgroups'||f==='shader-f16'), requiredLimits: req});
  const out = [];
  for (const [code, entry] of mods) {
    const m = dev.createShaderModule({code});
    const info = await m.getCompilationInfo();
    const msgs = info.messages.map(x => x.type + ' ' + x.lineNum + ':' + x.linePos + ' ' + x.message);
    let perr = null;
    if (entry) {
      dev.pushErrorScope('validation');
      try { await dev.createComputePipelineAsync({layout: 'auto', compute: {module: m, entryPoint: entry}}); } catch (e) { perr = String(e); }
      const e2 = await dev.popErrorScope(); if (e2) perr = (perr||'') + e2.message;
    }
    out.push({msgs, perr});
  }
  return {lim, feats, out};
}"""


def probe(mods):
    with page() as (pg, url):
        pg.goto(url)
        return pg.evaluate(JS, mods)


def specialised(shader, defines, browser=True, f16=False, subgroups=True):
    """The source the browser backend would compile (SwiftShader-like device unless told)."""
    from types import SimpleNamespace
    from bitweb import shaders
    dev = SimpleNamespace(backend="browser" if browser else "native",
                          caps=SimpleNamespace(subgroups=subgroups, shader_f16=f16, dot4=True))
    return shaders.specialise(shaders.source(shader), dev, defines, shader)


def probe_steps(steps, **kw):
    """Compile each Step's pipeline in Chromium; print problems."""
    mods = [[specialised(s.shader, s.defines, **kw), s.entry] for s in steps]
    r = probe(mods)
    bad = 0
    for s, o in zip(steps, r["out"]):
        if o["msgs"] or o["perr"]:
            bad += 1
            print(s.shader, s.entry, s.defines, o)
    print(f"{len(steps) - bad}/{len(steps)} compiled")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", metavar="FILE[:ENTRY]", help="plain WGSL files (no directives)")
    files = ap.parse_args().files
    mods = []
    for a in files:
        path, _, entry = a.partition(":")
        mods.append([open(path).read(), entry or None])
    r = probe(mods)
    print(json.dumps(r["lim"]), r["feats"])
    for a, o in zip(files, r["out"]):
        print(a, o)
