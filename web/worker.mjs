// The library's worker (started by web/connection.mjs): Pyodide + the bitweb engine (Python side:
// pyapp/bitweb/webapp.py), model bytes from the network / OPFS cache / local files (models.mjs).
//
// The protocol (the requests it takes, the messages it posts) is defined once, in web/protocol.mjs:
// a request that is not one of its table is answered with an error, and each message this worker
// or its Python side posts is checked against it before it goes.
//
// Nothing is queued behind a download: downloads run alongside everything else. Loads run one
// at a time in Python (after their download); generations run one at a time per engine.
import OPTIONS from '../build/web/options.json' with { type: 'json' };

import { bootPython } from './py.mjs';
import * as models from './models.mjs';
import * as gpu from './gpu.mjs';
import * as kvstore from './kvstore.mjs';
import { REQUESTS, messageProblem, requestProblem } from './protocol.mjs';

// Where this worker's messages go: the page (a dedicated worker), or the shared host's router
// (web/shared.mjs, which runs this module in a SharedWorker for every tab: setOutlet).
let outlet = (m) => self.postMessage(m);
export function setOutlet(fn) { outlet = fn; }
const post = (m) => {
  const why = messageProblem(m);
  if (why) throw new Error(`bitweb worker: ${why}`);       // (a message bitweb.mjs would not know)
  outlet(m);
};
// A shared worker has no OPFS sync access handles (Chromium 156: createSyncAccessHandle is only in
// dedicated workers), so there the cache is read, never written: a page's download worker writes it
// (bitweb.mjs, request cache-add).
export const CAN_WRITE_CACHE = typeof FileSystemFileHandle !== 'undefined' && 'createSyncAccessHandle' in FileSystemFileHandle.prototype;
// A page's download worker (name DOWNLOAD_ONLY) boots no Python: it only writes the model cache.
const DOWNLOAD_ONLY = 'bitweb-download';
self.bitwebPost = (json) => post(JSON.parse(json));

let app = null;         // bitweb.webapp.WebApp (a PyProxy)
let booting = null;
let wasmMemory = null;
const controllers = new Map();      // request id -> AbortController (downloads, loads, generations)

self.bitwebWasmBytes = () => (wasmMemory ? wasmMemory.buffer.byteLength : 0);

// Times for a load's stage figures: ms since the epoch (performance.timeOrigin + now), so the page
// can put them on its own clock (web/bitweb.mjs).
const clock = () => performance.timeOrigin + performance.now();
const BOOT_LABEL = 'Starting Python (Pyodide)';
const bootWaiting = new Set();      // request ids waiting for Python (they get the boot progress)
const boot = { start: null, end: null, info: null };   // info: how Python booted (py.mjs bitwebBoot)
let snapshotSave = null;            // stores the boot snapshot (py.mjs), after the first load

// Python boots once, from the worker's start: while the page asks for a model and its bytes arrive.
function python(id) {
  booting ??= (async () => {
    boot.start = clock();
    const py = await bootPython((p) => {
      for (const w of bootWaiting) post({ id: w, type: 'progress', stage: 'boot', done: p.done, total: p.total, label: BOOT_LABEL });
    });
    wasmMemory = findMemory(py);
    const b = py.bitwebBoot;
    boot.info = { from: b.from, ms: Object.fromEntries(Object.entries(b.stages).map(([k, [s, e]]) => [k, Math.round(e - s)])) };
    if (b.snapshotError) boot.info.snapshotError = b.snapshotError;
    if (b.shipped) boot.info.shipped = b.shipped;    // (the snapshot shipped with the app: used / missing / stale / spoiled)
    snapshotSave = b.save;
    app = py.pyimport('bitweb.webapp').WebApp(self.bitwebPost);
    if (kvstore.available()) app.set_kv_store({ find: kvstore.find, save: kvstore.save, drop: kvstore.drop });
    boot.end = clock();
    return app;
  })();
  if (id != null && !app) {
    bootWaiting.add(id);
    post({ id, type: 'progress', stage: 'boot', done: 0, total: 1, label: BOOT_LABEL });
    booting.finally(() => bootWaiting.delete(id)).catch(() => {});
  }
  return booting;
}
if (self.name !== DOWNLOAD_ONLY) python(null).catch(() => {});   // (a failed boot is reported to each request that needs Python)

// The wasm linear memory behind Pyodide (it never shrinks: its size shows the peak).
function findMemory(py) {
  const mod = py._module || py._api?._module;
  return mod?.wasmMemory || (mod?.HEAPU8 ? { get buffer() { return mod.HEAPU8.buffer; } } : null);
}

const parse = (json) => JSON.parse(json);
class Failed extends Error { constructor(error) { super(error.message); this.error = error; } }
function unwrap(json) {
  const v = parse(json);
  if (v && v.error) throw new Failed(v.error);
  return v;
}

function errorOf(e) {
  if (e instanceof Failed) return e.error;
  if (e instanceof models.ModelsError) return { kind: e.kind, message: e.message, ...(e.reason ? { reason: e.reason } : {}) };
  if (e?.name === 'QuotaExceededError') return { kind: 'storage', message: e.message };
  if (e?.name === 'AbortError') return { kind: 'aborted', message: 'aborted' };
  return { kind: 'internal', message: `${e?.name || 'Error'}: ${e?.message || e}` };
}

// Progress of one stage, with speed and time left for byte stages (a download says its own, across
// resumes: info {bytesPerSecond, etaSeconds, label, note}).
function stage(id, name, label) {
  const t0 = performance.now();
  return (done, total, info) => {
    const m = { id, type: 'progress', stage: name, done, total, label: info?.label || label };
    if (info?.note) m.note = info.note;
    const s = (performance.now() - t0) / 1000;
    if (info) {
      if (info.bytesPerSecond) { m.bytesPerSecond = info.bytesPerSecond; m.etaSeconds = info.etaSeconds; }
    } else if (total > 4096 && s > 0.2 && done > 0) {
      m.bytesPerSecond = Math.round(done / s);
      m.etaSeconds = Math.max(0, (total - done) / m.bytesPerSecond);
    }
    post(m);
  };
}

// A File / Blob for the source, and what to do with the cache once the load is known to work.
// A fresh download streams into the cache and is returned at once (models.fromUrl streaming: the
// header is parsed and the upload starts while it goes on); a local file's cache copy starts
// alongside the load (`copy`, committed once the model has loaded).
async function bytesOf(id, src, opts, signal, times, files = null) {
  const reads = files ? { port: files, signal } : null;     // (a shared engine: the page's download worker reads the cache)
  const timed = (name, label) => {
    const f = stage(id, name, label);
    return (done, total, info) => {
      times[name] ??= [clock(), clock()];
      times[name][1] = clock();
      f(done, total, info);
    };
  };
  if (src.url) {
    const url = new URL(src.url, self.location.href).href;
    const name = src.name || models.nameFrom(url);
    const readOnly = !CAN_WRITE_CACHE && !(await models.entry(name).catch(() => null));
    if (opts.cache === false || !models.hasCache() || readOnly) {
      const why = !models.hasCache() ? 'this browser has no OPFS: not cached'
        : readOnly ? 'a shared worker cannot write the cache: not cached' : 'not cached';
      return { file: await models.fetchBlob(url, timed('download', `Downloading ${name} (${why})`), signal), name };
    }
    const r = await models.fromUrl(url, name, timed('download', 'Downloading ' + name), signal, true, downloadOptions(src, opts), reads);
    return { file: r.file, name, pending: r.pending };
  }
  if (src.cached) return { file: await models.open(src.cached, reads), name: src.cached };
  if (src.file) {
    const name = models.nameFrom(src.name || src.file.name || 'model.gguf');
    let copy = null;
    if (opts.cache !== false && models.hasCache() && CAN_WRITE_CACHE) {
      copy = models.saveFile(src.file, name, timed('cache', `Saving ${name} in the browser cache`), true);
      copy.catch(() => {});
    }
    return { file: src.file, name, copy };
  }
  throw new models.ModelsError('settings', 'load: unknown source');
}

// Pipeline manifests: after a load, the kernels it compiled (WGSL, entry point, constants, label)
// with the device request and the adapter, per source and options, in the Cache API. The first
// load of a later visit with the same source and options starts that device and those compiles at
// once (web/gpu.mjs prepare), while Python boots; Python takes a prepared pipeline only for the same
// WGSL, entry point and constants on the same adapter, and compiles anything else itself.
const MANIFESTS = 'bitweb-pipelines';
async function manifestKey(msg) {
  const s = msg.source, o = msg.options || {};
  const what = JSON.stringify([s.url ? new URL(s.url, self.location.href).href : s.cached ?? [s.name || s.file?.name, s.file?.size],
    ...Object.entries(OPTIONS.load).filter(([, spec]) => spec.key).map(([name]) => o[name])]);   // (the options that change the kernels)
  const h = new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(what)));
  return new URL('__bitweb-pipelines/' + [...h].map((b) => b.toString(16).padStart(2, '0')).join(''), self.location.href).href;
}
async function prepareFrom(key) {
  try {
    const r = await (await caches.open(MANIFESTS)).match(key);
    return r ? gpu.prepare(await r.json()) : false;
  } catch (e) {
    console.warn('bitweb: no pipeline manifest:', e);
    return false;
  }
}
async function saveManifest(key, manifest) {
  try {
    await (await caches.open(MANIFESTS)).put(key, new Response(JSON.stringify(manifest), { headers: { 'content-type': 'application/json' } }));
  } catch (e) {
    console.warn('bitweb: the pipeline manifest was not stored:', e);
  }
}

// What a download is told: the source's sha256 / size and the load's download options.
const downloadOptions = (src, opts) => ({ sha256: src.sha256, size: src.size, ...(opts?.download || {}) });

// A download into the cache, without loading it (models.fetchToCache).
async function downloadOnly(id, msg) {
  const src = msg.source || {};
  if (!src.url) throw new models.ModelsError('settings', 'download: source must be {url}');
  const url = new URL(src.url, self.location.href).href;
  const name = src.name || models.nameFrom(url);
  return models.fetchToCache(url, name, stage(id, 'download', 'Downloading ' + name), controllers.get(id).signal,
    downloadOptions(src, msg.options));
}

// A download into the cache, committed there without loading it (for a shared engine, which cannot
// write the cache itself: web/shared.mjs asks the page to run this in its download worker first).
async function cacheAdd(id, msg) {
  const src = msg.source || {};
  if (src.file) {                               // a local file the shared engine has loaded
    const name = models.nameFrom(src.name || src.file.name || 'model.gguf');
    const copy = await models.saveFile(src.file, name, stage(id, 'cache', `Saving ${name} in the browser cache`));
    await copy.commit();
    return { name, cached: false };
  }
  if (!src.url) throw new models.ModelsError('settings', 'cache-add: source must be {url} or {file}');
  const url = new URL(src.url, self.location.href).href;
  const name = src.name || models.nameFrom(url);
  const r = await models.fromUrl(url, name, stage(id, 'download', 'Downloading ' + name), controllers.get(id).signal, false,
    downloadOptions(src, msg.options));
  if (r.cached) { r.file.close?.(); return { name, cached: true }; }
  const d = await r.pending.commit();
  return { name, cached: false, resumedFrom: d.resumedFrom, retries: d.attempts, notes: d.notes, sha256: d.sha256 };
}

async function load(id, msg) {
  const ctl = controllers.get(id);
  const t0 = clock();
  const times = {};                            // stage -> [start, end] (epoch ms) measured here
  const booted = python(id);                   // Python boots (or has booted) while the bytes come
  booted.catch(() => {});
  const useCache = msg.options?.cache !== false && self.caches;
  const manKey = useCache ? await manifestKey(msg).catch(() => null) : null;
  const prepared = manKey && !gpu.hasDevice() ? await prepareFrom(manKey) : false;
  const mark = gpu.compiledCount();
  const { file, name, pending, copy } = await bytesOf(id, msg.source, msg.options, ctl.signal, times, msg.files);
  times.source = [t0, clock()];                // (the file to read: a download started, the cached copy found)
  let value;
  try {
    const py = await booted;
    if (ctl.signal.aborted) throw new models.ModelsError('aborted', 'the load was aborted');
    post({ id, type: 'progress', stage: 'header', done: 0, total: 1, label: 'Reading the header of ' + name });
    try {                                      // (the options by the library's names: bitweb.options check_load)
      value = unwrap(await py.load(id, file, name, JSON.stringify(msg.options || {})));
    } catch (e) {                              // a download that failed (or ended short) is what went wrong
      const ended = pending && (pending.file.error || pending.file.done);
      const dl = ended ? await pending.written.then(() => null, (err) => err) : null;
      throw dl || e;                           // (a download still going is stopped below, not waited for)
    }
    if (pending) {                             // (after the download has ended)
      const d = await pending.commit();
      value.load.download = { resumedFrom: d.resumedFrom, retries: d.attempts, notes: d.notes, sha256: d.sha256 };
    }
    if (msg.options?.cache !== false && kvstore.available()) saveConversations(msg, value, file, name, !!pending);
    if (!pending) file.close?.();              // a cached model's read handle
  } catch (e) {
    if (!pending) file.close?.();
    ctl.abort();                               // a download still going is stopped
    if (pending) await pending.discard(e);     // a copy that does not load is not kept (a broken-off download is)
    if (copy) await copy.then((c) => c.discard(), () => {});
    throw e;
  }
  if (copy) {
    try {
      await (await copy).commit();
    } catch (e) {
      value.cacheError = errorOf(e).message;   // the model works; it is just not cached
    }
  }
  value.name = name;
  const stages = { ...times, ...(value.load.stages || {}) };
  if (boot.end != null) stages.boot = [Math.max(boot.start, t0), Math.max(boot.end, t0)];   // (this load's wait for it)
  stages.ready = [t0, clock()];
  value.load.stages = stages;
  value.load.boot = boot.info;
  const taken = gpu.settlePrepared(t0);         // (prepared pipelines no one took are dropped)
  value.load.prepared = prepared && taken ? taken : null;
  const manifest = manKey ? gpu.manifestSince(mark) : null;
  if (manifest?.pipelines.length) setTimeout(() => saveManifest(manKey, manifest), 0);
  if (snapshotSave) {                          // once the model has loaded and no request runs: the boot snapshot
    const save = snapshotSave;
    snapshotSave = null;
    whenIdle(() => save().then((n) => { boot.info = { ...boot.info, snapshotSaved: n }; }));
  }
  return value;
}

// Saved KV caches (web/kvstore.mjs) for the engine just loaded: keyed by the model file's SHA-256,
// the one the source or the cache knows, else computed once from the file (when the first reply
// looks for a saved cache: not during the load, whose memory peak stays the upload's) and
// remembered for that cached copy or local file.
function saveConversations(msg, value, file, name, downloaded) {
  const src = msg.source || {};
  const known = src.sha256 || value.load.download?.sha256;
  let hashing = null;
  const model = () => (hashing ??= known ? Promise.resolve(known.toLowerCase()) : (async () => {
    const e = src.file ? null : await models.entry(name).catch(() => null);
    if (e?.sha256) return e.sha256.toLowerCase();
    const memo = src.file ? `file:${src.file.name}|${src.file.size}|${src.file.lastModified}`
      : e ? `cache:${name}|${e.size}|${e.saved}` : null;
    const remembered = memo ? await kvstore.recall(memo) : null;
    if (remembered) return remembered;
    const f = downloaded || !src.file && e ? await models.open(name) : file;   // (the load's handle is closed after it)
    try {
      const h = await kvstore.hashFile(f);
      if (memo) await kvstore.remember(memo, h);
      return h;
    } finally {
      if (f !== file) f.close?.();
    }
  })().catch((e) => { console.warn('bitweb: no model hash, conversations are not saved:', e); return null; }));
  kvstore.register(value.engine, { model, kv: value.load.kv_cache, n_ctx: value.load.n_ctx, n_layer: value.info.n_layer,
    bound: msg.options?.kvSaveBytes ?? kvstore.DEFAULT_BOUND });
}

// fn() at the first check (every 0.5 s) that finds no request in flight (it writes tens of MB).
function whenIdle(fn) {
  const tick = () => (controllers.size === 0 ? fn() : setTimeout(tick, 500));
  setTimeout(tick, 500);
}

async function cacheInfo() {
  const v = await models.list();
  v.persisted = navigator.storage?.persisted ? await navigator.storage.persisted() : null;
  return v;
}

// Generations run one at a time per engine, in order; after each reply, its KV cache is saved
// (bitweb.webapp save_kv, web/kvstore.mjs) in the engine's queue: the reply has gone (a task
// after its result's post), and the engine's next request waits on the save, not on the reply.
const engineQueue = new Map();
let lastSave = null;                           // the last save's {saved: file name or null, ms} (stats)
function perEngine(eid, fn) {
  const prev = engineQueue.get(eid) || Promise.resolve();
  const run = prev.then(fn, fn);
  engineQueue.set(eid, run.catch(() => {}));
  return run;
}

// One handler per request of the protocol (abort: answered at once, in onmessage).
const HANDLERS = {
  load: (id, msg) => load(id, msg).finally(() => msg.files?.close()),
  download: (id, msg) => downloadOnly(id, msg),
  'cache-add': (id, msg) => cacheAdd(id, msg),
  'file-port': (id, msg) => { models.serveReads(msg.port); return null; },
  boot: async (id) => { await python(id); return boot.info; },
  // a page of a dedicated worker: the engine is its own (web/shared.mjs answers these for a shared one)
  connect: () => ({ shared: false, pages: 1, gpu: !!navigator.gpu }),
  'debug-hold': () => { throw new models.ModelsError('settings', 'debug-hold: only a shared engine (share: true) queues across pages'); },
  generate: (id, msg) => {
    const reply = perEngine(msg.engine, async () => {
      const py = await python(id);
      return unwrap(await py.generate(id, msg.engine, JSON.stringify(msg.request)));
    });
    perEngine(msg.engine, async () => {
      await new Promise((r) => { setTimeout(r, 0); });
      if (app) lastSave = parse(await app.save_kv(msg.engine));     // (nothing when the reply failed)
    });
    return reply;
  },
  'kv-settled': async () => { await Promise.all([...engineQueue.values()]); return lastSave; },
  tokenize: async (id, msg) => unwrap((await python(id)).tokenize(msg.engine, JSON.stringify(msg.request))),
  'set-draft': (id, msg) => perEngine(msg.engine, async () => unwrap((await python(id)).set_draft(msg.engine, msg.draft))),
  unload: (id, msg) => perEngine(msg.engine, () => { kvstore.unregister(msg.engine); return app ? unwrap(app.unload(msg.engine)) : { unloaded: false }; }),
  'cache-list': () => cacheInfo(),
  'cache-delete': async (id, msg) => ({ removed: await models.remove(msg.name), ...(await cacheInfo()) }),
  stats: () => ({ ...(app ? parse(app.stats()) : { wasm_bytes: 0, engines: 0 }), boot: boot.info, kvSave: lastSave }),
  'debug-lose-device': async () => { if (app) await app.lose_device(); return null; },
};
for (const op of Object.keys(REQUESTS)) {      // (every op of the table has its handler, and no other op)
  if (op !== 'abort' && !HANDLERS[op]) throw new Error(`bitweb worker: no handler for request ${op}`);
}
for (const op of Object.keys(HANDLERS)) if (!REQUESTS[op]) throw new Error(`bitweb worker: request ${op} is not in protocol.mjs`);

async function handle(msg) {
  const why = requestProblem(msg);
  if (why) throw new models.ModelsError('internal', why);
  return HANDLERS[msg.op](msg.id, msg);
}

/** One request of the protocol: its messages and its one result or error go through the outlet. */
export function serve(msg) {
  if (msg.op === 'abort') {
    controllers.get(msg.target)?.abort();
    if (app) app.abort(msg.target);
    post({ id: msg.id, type: 'result', value: null });
    return;
  }
  controllers.set(msg.id, new AbortController());
  handle(msg).then(
    (value) => post({ id: msg.id, type: 'result', value }),
    (e) => post({ id: msg.id, type: 'error', error: errorOf(e) }),
  ).finally(() => {
    controllers.delete(msg.id);
    if (app) app.forget(msg.id);
  });
}
/** Ids of the requests in flight (the shared host's heartbeat goes to the pages that wait on one). */
export const inFlight = () => [...controllers.keys()];

if (typeof DedicatedWorkerGlobalScope !== 'undefined' && self instanceof DedicatedWorkerGlobalScope) {
  self.onmessage = ({ data: msg }) => serve(msg);
}

const HEARTBEAT_MS = 5000;
setInterval(() => { if (controllers.size) post({ type: 'alive' }); }, HEARTBEAT_MS);

self.addEventListener('unhandledrejection', (ev) => {
  ev.preventDefault();
  console.warn('bitweb worker: unhandled rejection', ev.reason);
});
