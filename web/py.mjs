// Boot Pyodide in a worker with the bitweb package and the GPU helpers.
// Shared by the app worker (worker.mjs) and the kernel check page (kernels.mjs).
//
// Boot snapshot: the first boot in a browser keeps a Pyodide memory snapshot taken right after
// bitweb's modules are imported (the wasm heap: the interpreter with them imported) in the
// Cache API, under a key made of Pyodide's version and the SHA-256 of bitweb.zip; later boots start
// from it (loadPyodide's experimental _loadSnapshot) instead of initialising the interpreter and
// importing. The files of bitweb.zip (the WGSL sources, modules imported later) live in Pyodide's
// in-memory file system, not in the heap: they are unpacked on every boot. A new build (another
// zip) or another Pyodide never matches an old key; entries under other keys are deleted when a
// snapshot is stored. A snapshot that fails to load or to check out is deleted and the boot starts
// over without it.
import { loadPyodide, version as PYODIDE_VERSION } from '../node_modules/pyodide/pyodide.mjs';
import * as gpu from './gpu.mjs';

const CACHE = 'bitweb-boot';
// Every browser module (bitweb.BROWSER_MODULES) is imported before the snapshot is taken: a load
// imports most of them, and importing them while the kernels compile cost a cached visit seconds.
const IMPORTS = `import sys, importlib, pkgutil
sys.path.insert(0, "/bitweb")
import bitweb
for m in bitweb.BROWSER_MODULES:
    pkg = importlib.import_module("bitweb." + m.removesuffix(".*"))
    if m.endswith(".*"):
        for i in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(pkg.__name__ + "." + i.name)
del m, pkg`;
const CHECK = 'import sys; "bitweb.webapp" in sys.modules and "/bitweb" in sys.path';
const clock = () => performance.timeOrigin + performance.now();

// -> the Pyodide API, with `bitwebBoot`: {from: 'snapshot' | 'fresh', stages: {name: [start, end]}
// (epoch ms: pyodide, zip, unpack, import; snapshot-read), snapshotError?, save()}. save() stores
// the snapshot taken at boot (a fresh boot with the cache available; call it when the worker is
// idle: it writes tens of MB); it resolves to the bytes stored (0: none) and never rejects.
export async function bootPython(progress = () => {}, { snapshot = true } = {}) {
  const t0 = performance.now();
  const stages = {};
  const time = async (name, f) => { const a = clock(); try { return await f(); } finally { stages[name] = [a, clock()]; } };
  progress({ stage: 'pyodide', done: 0, total: 1 });
  const base = new URL('../', import.meta.url);
  const indexURL = new URL('node_modules/pyodide/', base).href;
  globalThis.bitwebGPU = gpu;                        // (before the heap is restored: nothing of it is in the snapshot)
  const zip = await time('zip', async () => {
    const r = await fetch(new URL('build/web/bitweb.zip', base));
    if (!r.ok) throw new Error(`could not fetch bitweb.zip (${r.status}); run "npm start" to build it`);
    return r.arrayBuffer();
  });
  const boot = { from: 'fresh', stages, save: async () => 0 };
  let cache = null, key = null;
  if (snapshot && globalThis.caches) {
    try {
      cache = await caches.open(CACHE);
      const hash = [...new Uint8Array(await crypto.subtle.digest('SHA-256', zip))].map((b) => b.toString(16).padStart(2, '0')).join('');
      key = new URL(`__bitweb-boot/${PYODIDE_VERSION}/${hash}`, base).href;
    } catch (e) {
      cache = null;                                  // (no Cache API here: an opaque origin, storage off)
      boot.snapshotError = String(e?.message || e);
    }
  }
  let py = null;
  const stored = cache && await time('snapshot-read', () => readSnapshot(cache, key)).catch(() => null);
  if (stored) {
    try {
      py = await time('pyodide', () => loadPyodide({ indexURL, _loadSnapshot: stored }));
      await time('unpack', () => py.unpackArchive(zip, 'zip', { extractDir: '/bitweb' }));
      if (py.runPython(CHECK) !== true) throw new Error('the snapshot has no bitweb.webapp');
      boot.from = 'snapshot';
    } catch (e) {
      boot.snapshotError = String(e?.message || e);
      console.warn('bitweb: the boot snapshot did not load; booting without it:', e);
      py = null;
      await cache.delete(key).catch(() => {});
    }
  }
  if (!py) {
    const make = !!cache;
    py = await time('pyodide', () => loadPyodide({ indexURL, _makeSnapshot: make }));
    await time('unpack', () => py.unpackArchive(zip, 'zip', { extractDir: '/bitweb' }));
    await time('import', () => py.runPython(IMPORTS));
    if (make) {
      let bytes = null;
      try {
        bytes = py.makeMemorySnapshot();             // (a copy of the heap: before any JS object is held)
      } catch (e) {
        boot.snapshotError = String(e?.message || e);
      }
      unwrapGlobals(py);
      if (bytes) boot.save = () => { const b = bytes; bytes = null; return b ? writeSnapshot(cache, key, b) : Promise.resolve(0); };
    }
  }
  py.bitwebBoot = boot;
  progress({ stage: 'pyodide', done: 1, total: 1, ms: performance.now() - t0 });
  return py;
}

// A boot that makes a snapshot sees the JS globals through Pyodide's recording proxy (it notes the
// path of each object Python takes from them, for the snapshot); a getter reached through it (e.g.
// `js.performance`, `js.navigator.gpu`) throws "Illegal invocation". Once the snapshot is taken,
// the `js` module and the modules that imported it get the plain globals.
function unwrapGlobals(py) {
  py.registerJsModule('js', globalThis);
  py.runPython(`import sys
old = sys.modules.pop('js', None)
import js
for m in list(sys.modules.values()):
    if old is not None and getattr(m, 'js', None) is old:
        m.js = js
del old, m`);
}

// The stored snapshot for `key`, or null; a short or unreadable one is deleted.
async function readSnapshot(cache, key) {
  const r = await cache.match(key);
  if (!r) return null;
  const want = Number(r.headers.get('x-bitweb-bytes'));
  const bytes = new Uint8Array(await r.arrayBuffer());
  if (!(want > 0) || bytes.byteLength !== want) {
    await cache.delete(key);
    throw new Error(`the boot snapshot has ${bytes.byteLength} bytes, not ${want}`);
  }
  return bytes;
}

async function writeSnapshot(cache, key, bytes) {
  try {
    for (const old of await cache.keys()) if (old.url !== key) await cache.delete(old);
    await cache.put(key, new Response(bytes, { headers: { 'content-type': 'application/octet-stream', 'x-bitweb-bytes': String(bytes.byteLength) } }));
    return bytes.byteLength;
  } catch (e) {
    console.warn('bitweb: the boot snapshot was not stored:', e);
    return 0;
  }
}
