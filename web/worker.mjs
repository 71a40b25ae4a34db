// The app's worker: Pyodide + the bitweb engine (Python: pyapp/bitweb/webapp.py). The page only renders.
//
// Protocol (postMessage; every message is a plain object with a `type`):
//
// page -> worker
//   {type: 'load', source, activations, cache}     load a model; a running generation is stopped first
//        source: 'default'              the embedded model (web/models/bitweb-chat-i2_s.gguf, or
//                                       `defaultUrl` when given), via the OPFS cache
//              | {file: File}           a local file; copied into the cache first unless cache === false
//              | {url: string}          downloaded (streamed) into the cache, then loaded from there
//              | {cached: name}         a cached model; no network at all
//        activations: 'a8' | 'f32'      W1.58A8 (as trained) or float activations
//        maxContext: n                  (optional) a smaller KV cache than the model's context
//        capLimits: {limit: value}      (optional) behave like a GPU with at most these limits
//   {type: 'generate', text, system, settings}    one user turn of the current chat
//        settings: {temperature, top_k, top_p, min_p, repeat_penalty, max_tokens, seed}
//        system: the system prompt, used when this turn starts a chat
//   {type: 'stop'}                    stop generating; takes effect before the next token
//   {type: 'reset'}                   new chat (forget the conversation, keep the model)
//   {type: 'cache-list'} / {type: 'cache-delete', name}   -> a 'cache' message
//
// worker -> page
//   {type: 'progress', stage, done, total, label?}   stage: pyodide | download | cache | header |
//                                                    upload | compile (and any engine stage)
//   {type: 'ready', model, adapter, load}     model info, adapter info (name, features, limits),
//                                             load stats (ms, header bytes read, wasm heap before/after)
//   {type: 'token', text}                     one piece of the reply, as soon as it is decoded
//   {type: 'done', text, stop_reason, stats}  stop_reason: eos | eot | max_tokens | context | stopped;
//                                             stats: tokens, ttft_ms, prefill_tok_s, decode_tok_s ...
//   {type: 'error', kind, message, advice?, during?}   kind: no-webgpu | limits | format | unsupported |
//                                             context | device-lost | oom | network | storage | settings |
//                                             no-model | gpu | internal; advice: lines the page adds (the
//                                             weight formats bitweb runs, for format / unsupported)
//   {type: 'cache', models: [{name, size, source, saved}], usage, quota}
//   {type: 'idle'}                            the request queue is empty
//
// Requests run one at a time in arrival order; 'stop' is handled at once. A request that
// throws always ends in an 'error' message, so the page never waits forever.
import { bootPython } from './py.mjs';
import * as models from './models.mjs';

const post = (m) => self.postMessage(m);
self.bitwebPost = (json) => post(JSON.parse(json));

let app = null;         // bitweb.webapp.WebApp (a PyProxy)
let booting = null;
let wasmMemory = null;

self.bitwebWasmBytes = () => (wasmMemory ? wasmMemory.buffer.byteLength : 0);

function python() {
  booting ??= (async () => {
    const py = await bootPython((p) => post({ type: 'progress', ...p }));
    wasmMemory = findMemory(py);
    const webapp = py.pyimport('bitweb.webapp');
    app = webapp.WebApp(self.bitwebPost);
    return app;
  })();
  return booting;
}

// The wasm linear memory behind Pyodide (for the load stats: it never shrinks, so its size
// after loading a model bounds how much of the model went through the wasm heap).
function findMemory(py) {
  const mod = py._module || py._api?._module;
  return mod?.wasmMemory || (mod?.HEAPU8 ? { get buffer() { return mod.HEAPU8.buffer; } } : null);
}

function errorOf(e, during) {
  const kind = e instanceof models.NetworkError ? 'network' : e instanceof models.StorageError ? 'storage'
    : e?.name === 'QuotaExceededError' ? 'storage' : 'internal';
  const message = kind === 'internal' ? `${e?.name || 'Error'}: ${e?.message || e}` : e.message;
  return { type: 'error', kind, message, during, loaded: !!(app && app.has_model()) };
}

const stage = (name, label) => (done, total) => post({ type: 'progress', stage: name, done, total, label });

// A File for the requested source (cached in OPFS unless asked not to).
async function sourceFile(msg) {
  const src = msg.source;
  if (src === 'default' || src?.url) {
    const url = src === 'default' ? (msg.defaultUrl || models.DEFAULT_URL) : new URL(src.url, self.location.href).href;
    const name = models.nameFrom(url);
    if (!models.hasCache()) {
      const file = await models.fetchBlob(url, stage('download', `Downloading ${name} (this browser has no OPFS: not cached)`));
      return { file, name, cached: false, local: true };
    }
    const { file, cached } = await models.fromUrl(url, name, stage('download', 'Downloading ' + name));
    return { file, name, cached };
  }
  if (src?.cached) return { file: await models.open(src.cached), name: src.cached, cached: true };
  if (src?.file) return { file: src.file, name: models.nameFrom(src.file.name), cached: false, local: true };
  throw new Error('load: unknown source ' + JSON.stringify(src));
}

async function load(msg) {
  const py = await python();
  py.reset();                    // whatever happens next, the old conversation is over
  let { file, name, cached, local } = await sourceFile(msg);   // local: not a fresh cache entry
  post({ type: 'progress', stage: 'header', done: 0, total: 1, label: 'Reading the header of ' + name });
  if (!(await py.inspect(file, name))) {
    // Header did not parse: a freshly downloaded file is useless, drop it from the cache.
    if (!local && !cached) await models.remove(name).catch(() => {});
    return;
  }
  post({ type: 'progress', stage: 'header', done: 1, total: 1 });
  if (msg.source?.file && msg.cache !== false && models.hasCache()) {
    try {
      file = await models.saveFile(file, name, stage('cache', 'Saving ' + name + ' in the browser cache'));
    } catch (e) {
      post({ ...errorOf(e, 'cache'), kind: 'storage', message: 'the model loads, but could not be cached: ' + e.message });
    }
  }
  await py.load(file, name, JSON.stringify({ activations: msg.activations || 'a8', max_context: msg.maxContext ?? null, cap_limits: msg.capLimits || null }));
  await sendCache();
}

async function sendCache() {
  try {
    post({ type: 'cache', ...(await models.list()) });
  } catch (e) {
    post({ type: 'cache', models: [], usage: null, quota: null, error: e.message });
  }
}

// One request at a time, in order.
let queue = Promise.resolve();
let pending = 0;
function serial(during, fn) {
  pending++;
  queue = queue.then(fn).catch((e) => post(errorOf(e, during))).finally(() => {
    if (--pending === 0) post({ type: 'idle' });
  });
}

self.onmessage = ({ data: msg }) => {
  switch (msg.type) {
    case 'stop':
      if (app) app.request_stop();
      break;
    case 'load':
      if (app) app.request_stop();
      serial('load', () => load(msg));
      break;
    case 'generate':
      serial('generate', async () => {
        const py = await python();
        await py.generate(JSON.stringify({ text: msg.text, system: msg.system, settings: msg.settings || {} }));
      });
      break;
    case 'reset':
      serial('reset', async () => { if (app) app.reset(); });
      break;
    case 'cache-list':
      serial('cache', sendCache);
      break;
    case 'cache-delete':
      serial('cache', async () => { await models.remove(msg.name); await sendCache(); });
      break;
    case 'debug-lose-device':      // test hook: simulate a lost GPU
      serial('debug', async () => { if (app) await app.lose_device(); });
      break;
    default:
      post({ type: 'error', kind: 'internal', message: 'unknown request ' + JSON.stringify(msg.type) });
  }
};

self.addEventListener('unhandledrejection', (ev) => {
  ev.preventDefault();
  post(errorOf(ev.reason, 'worker'));
});
