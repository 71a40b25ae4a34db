// Worker for dev/kernels.html: boot Python, run every kernel case, post each result.
import { bootPython } from '../py.mjs';

self.onmessage = async ({ data }) => {
  try {
    const py = await bootPython();
    const base = new URL('../../', import.meta.url);     // above web/ (tools/serve.mjs serves web/ at /)
    const [man, blob] = await Promise.all([
      fetch(new URL('build/web/kernel_vectors.json', base)).then((r) => { if (!r.ok) throw new Error('kernel_vectors.json: ' + r.status); return r.text(); }),
      fetch(new URL('build/web/kernel_vectors.bin', base)).then((r) => { if (!r.ok) throw new Error('kernel_vectors.bin: ' + r.status); return r.arrayBuffer(); }),
    ]);
    self.manifest = man; self.blob = new Uint8Array(blob); self.only = data.only || '';
    await py.runPythonAsync(`
import js, json
from bitweb import gpu, kernel_check
dev = await gpu.request_device()
js.postMessage(js.Object.fromEntries([["type", "adapter"], ["text", dev.describe()]]))
m = json.loads(js.self.manifest)
blob = js.self.blob.to_bytes()
only = js.self.only
results = []
for case in m["cases"]:
    if only and only not in case["name"]:
        continue
    try:
        r = await kernel_check.run_case(dev, case, blob)
    except Exception as e:
        r = {"name": case["name"], "ok": False, "error": f"{type(e).__name__}: {e}"}
    results.append(r)
    js.postMessage(js.JSON.parse(json.dumps({"type": "result", "result": r})))
n_ok = sum(r["ok"] for r in results)
js.postMessage(js.JSON.parse(json.dumps({"type": "done", "text": f"{n_ok}/{len(results)} cases passed", "results": results, "adapter": dev.describe()})))
`);
    await py.bitwebBoot.save();         // the boot snapshot (web/py.mjs), for the next visit
  } catch (e) {
    postMessage({ type: 'done', text: 'error: ' + e, error: String(e), results: [] });
  }
};
