// Boot Pyodide in a worker with the bitweb package and the GPU helpers.
// Shared by the app worker (worker.mjs) and the kernel check page (dev/kernels.mjs).
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
//
// Shipped snapshot: a first visit (nothing in the Cache API) starts from the snapshot set-up made
// with this same code in headless Chromium (tools/boot_snapshot.py: build/web/boot-snapshot.bin,
// its key in boot-snapshot.json), when that key names this Pyodide and this archive and the bytes
// are the ones it names; else (none, another build's, spoiled) the boot is fresh, with no error.
// The worker then keeps those bytes in the Cache API like a snapshot of its own.
//
// What a snapshot freezes: the interpreter's start-up state, the str hash seed among it (with the
// shipped snapshot every browser shares one public seed: a crafted model file's metadata could make
// its load slower, not wrong; nothing in bitweb uses hashes as secrets; random.Random() seeds itself
// when made, so sampling seeds stay fresh) and the time zone read at start (time.tzname is the
// build machine's; datetime.now(), a chat template's strftime_now, reads the browser's clock). The
// snapshot comes from the same server as the code that restores it: its key and hash guard against
// old and torn files, not against a hostile server.
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

// -> the Pyodide API, with `bitwebBoot`: {from: 'snapshot' | 'shipped' | 'fresh', stages: {name:
// [start, end]} (epoch ms: zip, snapshot-read, shipped-read, pyodide, unpack, import), snapshotError?
// (the Cache API's snapshot failed), shipped? (the shipped snapshot, when it was looked at: 'used',
// 'missing', 'stale' (of another build) or 'spoiled: why'), save()}. save() stores the snapshot
// booted from or taken at boot in the Cache API (call it when the worker is idle: it writes tens of
// MB); it resolves to the bytes stored (0: none) and never rejects. snapshot: false boots without
// any snapshot; shipped: false skips the shipped one.
export async function bootPython(progress = () => {}, { snapshot = true, shipped = true } = {}) {
  const t0 = performance.now();
  const stages = {};
  const time = async (name, f) => { const a = clock(); try { return await f(); } finally { stages[name] = [a, clock()]; } };
  progress({ stage: 'pyodide', done: 0, total: 1 });
  const base = new URL('../', import.meta.url);
  const indexURL = new URL('node_modules/pyodide/', base).href;
  globalThis.bitwebGPU = gpu;                        // (before the heap is restored: nothing of it is in the snapshot)
  const useSnapshots = snapshot && !!globalThis.crypto?.subtle;     // (hashing needs a secure context)
  // the shipped snapshot's key, asked for beside the archive (a few hundred bytes; used on a first visit)
  const shippedMeta = useSnapshots && shipped ? fetchShippedMeta(base) : null;
  const zip = await time('zip', () => fetchZip(base));
  const boot = { from: 'fresh', stages, save: async () => 0 };
  const hash = useSnapshots ? await sha256(zip) : null;
  let cache = null, key = null;
  if (useSnapshots && globalThis.caches) {
    try {
      cache = await caches.open(CACHE);
      key = new URL(`__bitweb-boot/${PYODIDE_VERSION}/${hash}`, base).href;
    } catch (e) {
      cache = null;                                  // (no Cache API here: an opaque origin, storage off)
      boot.snapshotError = String(e?.message || e);
    }
  }
  const restore = async (bytes) => {                 // -> py booted from `bytes` (or a promise of them), or throws
    const p = await time('pyodide', () => loadPyodide({ indexURL, _loadSnapshot: bytes }));
    await time('unpack', () => p.unpackArchive(zip, 'zip', { extractDir: '/bitweb' }));
    if (p.runPython(CHECK) !== true) throw new Error('the snapshot has no bitweb.webapp');
    return p;
  };
  let py = null;
  // 1. this browser's own snapshot (Cache API)
  const stored = cache && await time('snapshot-read', () => readSnapshot(cache, key)).catch(() => null);
  if (stored) {
    try {
      py = await restore(stored);
      boot.from = 'snapshot';
    } catch (e) {
      boot.snapshotError = String(e?.message || e);
      console.warn('bitweb: the boot snapshot did not load; booting without it:', e);
      py = null;
      await cache.delete(key).catch(() => {});
    }
  }
  // 2. the snapshot shipped with the app (build/web/boot-snapshot.*), when made for this build
  if (!py && shippedMeta) {
    const meta = await shippedMeta;
    boot.shipped = shippedSkip(meta, hash);
    if (!boot.shipped) {
      // (loadPyodide fetches the wasm and its JS before it awaits the snapshot: the bytes come meanwhile)
      let bytes = null;
      const read = time('shipped-read', () => readShipped(base, meta)).then((b) => (bytes = b));
      read.catch(() => {});                          // (loadPyodide awaits it later: not an unhandled rejection)
      try {
        py = await restore(read);
        boot.from = 'shipped';
        boot.shipped = 'used';
        if (cache) boot.save = saveOnce(cache, key, bytes);
        bytes = null;                                // (saveOnce holds them until the save)
      } catch (e) {
        boot.shipped = e instanceof Skip ? e.message : `spoiled: ${e?.message || e}`;
        if (!(e instanceof Skip)) console.warn('bitweb: the shipped boot snapshot did not load; booting without it:', e);
        py = null;
        bytes = null;
      }
    }
  }
  // 3. a fresh boot, which takes a snapshot for the next one
  if (!py) {
    const made = await freshBoot(indexURL, zip, time, !!cache);
    py = made.py;
    if (made.error) boot.snapshotError = made.error;
    if (made.bytes) boot.save = saveOnce(cache, key, made.bytes);
  }
  py.bitwebBoot = boot;
  progress({ stage: 'pyodide', done: 1, total: 1, ms: performance.now() - t0 });
  return py;
}

// What tools/boot_snapshot.py ships: a fresh boot's snapshot, made by this same code in a worker
// of headless Chromium. -> {bytes, pyodide: version, zipSha256} (of the archive it was made with).
export async function makeBootSnapshot() {
  const base = new URL('../', import.meta.url);
  globalThis.bitwebGPU = gpu;
  const zip = await fetchZip(base);
  const made = await freshBoot(new URL('node_modules/pyodide/', base).href, zip, (_, f) => f(), true);
  if (!made.bytes) throw new Error(`no snapshot was made: ${made.error}`);
  return { bytes: made.bytes, pyodide: PYODIDE_VERSION, zipSha256: await sha256(zip) };
}

async function fetchZip(base) {
  const r = await fetch(new URL('build/web/bitweb.zip', base));
  if (!r.ok) throw new Error(`could not fetch bitweb.zip (${r.status}); run "npm start" to build it`);
  return r.arrayBuffer();
}

async function sha256(buf) {
  return [...new Uint8Array(await crypto.subtle.digest('SHA-256', buf))].map((b) => b.toString(16).padStart(2, '0')).join('');
}

// Boot without a snapshot; with make, take one right after the imports. -> {py, bytes?, error?}
async function freshBoot(indexURL, zip, time, make) {
  const py = await time('pyodide', () => loadPyodide({ indexURL, _makeSnapshot: make }));
  await time('unpack', () => py.unpackArchive(zip, 'zip', { extractDir: '/bitweb' }));
  await time('import', () => py.runPython(IMPORTS));
  if (!make) return { py };
  let bytes = null, error;
  try {
    bytes = py.makeMemorySnapshot();                 // (a copy of the heap: before any JS object is held)
  } catch (e) {
    error = String(e?.message || e);
  }
  unwrapGlobals(py);
  return { py, bytes, error };
}

// The shipped snapshot: boot-snapshot.json holds its key ({pyodide, zip_sha256, bytes, sha256});
// the bytes (boot-snapshot.bin, served gzip-compressed where the server can) are used only when the
// key names this Pyodide and this archive and they are exactly the bytes it names.
const SHIPPED = 'build/web/boot-snapshot';
class Skip extends Error {}

function fetchShippedMeta(base) {
  const p = fetch(new URL(`${SHIPPED}.json`, base)).then(async (r) => {
    if (!r.ok) return { missing: r.status };
    return r.json();
  }).catch((e) => ({ missing: String(e?.message || e) }));
  p.catch(() => {});
  return p;
}

// -> why the shipped snapshot is not for this boot ('missing', 'stale': of another build), or null
function shippedSkip(meta, hash) {
  if (!meta || meta.missing !== undefined) return 'missing';
  if (meta.pyodide !== PYODIDE_VERSION || meta.zip_sha256 !== hash) return 'stale';
  return null;
}

async function readShipped(base, meta) {
  const r = await fetch(new URL(`${SHIPPED}.bin`, base));
  if (!r.ok) throw new Skip('missing');
  const bytes = new Uint8Array(await r.arrayBuffer());
  if (bytes.byteLength !== meta.bytes) throw new Error(`${bytes.byteLength} bytes, not ${meta.bytes}`);
  if (await sha256(bytes) !== meta.sha256) throw new Error('its SHA-256 is not the one its key names');
  return bytes;
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

// boot.save: stores `bytes` under `key` the first time it is called (then lets them go), 0 after.
function saveOnce(cache, key, bytes) {
  return () => { const b = bytes; bytes = null; return b ? writeSnapshot(cache, key, b) : Promise.resolve(0); };
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
