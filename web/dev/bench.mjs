// Worker for dev/bench.html: boot Python (Pyodide), run bitweb.bench in this browser's WebGPU.
// Message in: {quick: bool, shapes: 'NxM,...' or '', model: URL or '', tokens, promptTokens, repeats,
// grammar: bool (only decode with and without a grammar: bitweb.grammar.bench.bench_engine), speculative:
// bool (only decode with and without drafting: bitweb.speculative_bench; tasks: 'copy,recall' or all), trials,
// floor: bool (only the per-token floor: bitweb.floor; parts: 3 to fuse q, k, v on SwiftShader too)}.
// Messages out: {type: 'adapter' | 'status' | 'row', text}, then {type: 'done', kernels, decode, grammar?,
// speculative?, floor?}
// or {type: 'done', error}.
import { bootPython } from '../py.mjs';

self.onmessage = async ({ data }) => {
  try {
    const py = await bootPython();
    self.benchArgs = data;
    self.benchModel = null;
    if (data.model) {
      postMessage({ type: 'status', text: 'fetching ' + data.model });
      const r = await fetch(data.model);
      if (!r.ok) throw new Error(`${data.model}: HTTP ${r.status}`);
      self.benchModel = await r.blob();
    }
    await py.runPythonAsync(`
import js, json
from bitweb import bench, gpu, webapp

def post(kind, **kw):
    js.postMessage(js.JSON.parse(json.dumps(dict(type=kind, **kw))))

a = js.self.benchArgs.to_py()
dev = await gpu.request_device()
post("adapter", text=dev.describe() + "; timing: " + bench.timing(dev))


async def constrained():                 # ?grammar=1: decode with and without a grammar (bitweb.grammar.bench)
    from bitweb.engine import Engine
    from bitweb.grammar.bench import bench_engine, describe_engine
    post("status", text="constrained decode")
    blob = js.self.benchModel
    eng = await Engine.load(dev, await webapp.parse_header(blob), blob)
    try:
        r = await bench_engine(eng, tokens=int(a.get("tokens") or 48), trials=int(a.get("trials") or 3))
    finally:
        eng.close()
    post("row", text=describe_engine(r))
    post("done", kernels=None, decode=None, grammar=r)


async def speculative():                 # ?speculative=1: decode with and without drafting (bitweb.speculative_bench)
    from bitweb.engine import Engine
    from bitweb.speculative_bench import TASKS, bench_speculative, describe
    post("status", text="speculative decoding")
    blob = js.self.benchModel
    eng = await Engine.load(dev, await webapp.parse_header(blob), blob, max_context=2048)
    tasks = {k: TASKS[k] for k in a["tasks"].split(",")} if a.get("tasks") else TASKS
    try:
        r = await bench_speculative(eng, tokens=int(a.get("tokens") or 128), trials=int(a.get("trials") or 3),
                                    tasks=tasks)
    finally:
        eng.close()
    r.update(model=a["model"].rsplit("/", 1)[-1], draft=None, device=dev.describe(), activations=eng.activations)
    post("row", text=describe(r))
    post("done", kernels=None, decode=None, speculative=r)


async def floor():                       # ?floor=1: a decode token's wall time against its GPU time (bitweb.floor)
    from bitweb.floor import bench_floor, describe_floor
    post("status", text="per-token floor")
    blob = js.self.benchModel
    if a.get("parts"):                   # &parts=3: q, k, v as one gemv on SwiftShader too (bitlinear.split_parts)
        from bitweb.kernels import bitlinear
        bitlinear.split_parts = lambda dev=None: False
    r = await bench_floor(dev, await webapp.parse_header(blob), blob, tokens=int(a.get("tokens") or 16),
                          prompt_tokens=int(a.get("promptTokens") or 16), repeats=int(a.get("repeats") or 3))
    r["model_file"] = a["model"].rsplit("/", 1)[-1]
    post("row", text=describe_floor(r))
    post("done", kernels=None, decode=None, floor=r)


async def kernels_and_decode():
    post("status", text="kernels")
    shapes = bench.QUICK_SHAPES if a.get("quick") else bench.SHAPES
    if a.get("shapes"):
        shapes = bench.parse_shapes(a["shapes"])
    kernels = await bench.bench_kernels(dev, shapes, quick=bool(a.get("quick")), repeats=a.get("repeats"),
                                        log=lambda line: post("row", text=line))
    decode = None
    if js.self.benchModel is not None:
        post("status", text="decode")
        blob = js.self.benchModel
        gf = await webapp.parse_header(blob)
        decode = await bench.bench_decode(dev, gf, blob, tokens=int(a.get("tokens") or 32),
                                          prompt_tokens=int(a.get("promptTokens") or 32), repeats=a.get("repeats"),
                                          lm_head=a.get("lmHead") or None)
        post("row", text=bench.describe_decode(decode))
    post("done", kernels=kernels, decode=decode)

has_model = js.self.benchModel is not None
await (constrained() if a.get("grammar") and has_model else speculative() if a.get("speculative") and has_model
       else floor() if a.get("floor") and has_model else kernels_and_decode())
`);
  } catch (e) {
    postMessage({ type: 'done', error: String(e) });
  }
};
