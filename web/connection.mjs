// How the library (web/bitweb.mjs) reaches its engine: a connection to the page's own dedicated worker
// (web/worker.mjs), to the origin's shared engine (a SharedWorker, web/shared.mjs: share: true), or to
// the download worker that writes the model cache for the shared engine (a dedicated worker.mjs that
// boots no Python). Here: starting or attaching them, the fallback to the dedicated worker where this
// browser cannot share one (saying why), and call(), one request and its messages (web/protocol.mjs).
import { requestProblem } from './protocol.mjs';
import { error, settingsError } from './errors.mjs';

let heard = null;                  // performance.now() of a worker's last message (lastHeard)
let nextId = 1;
const calls = new Map();           // id -> {resolve, reject, onProgress, onText, onToolCall, conn}

class Connection {
  constructor(kind, note = '') {
    this.kind = kind;              // 'dedicated' | 'shared' | 'download'
    this.note = note;              // why a page that asked to share has a dedicated worker ('' otherwise)
    this.live = new Map();         // engine id -> Engine (web/bitweb.mjs: its _sharedBy, _lose)
    this.pages = 1;                // pages connected to the shared engine
    this.post = null;
  }
  onMessage(m) {
    heard = performance.now();
    if (m.type === 'device-lost') return this.deviceLost(m);
    if (m.type === 'shared') {
      this.pages = m.pages;
      for (const [eid, n] of Object.entries(m.engines)) { const e = this.live.get(Number(eid)); if (e) e._sharedBy = n; }
      return;
    }
    const c = calls.get(m.id);
    if (!c) return;
    if (m.type === 'progress') c.onProgress?.(progressOf(m));
    else if (m.type === 'text') c.onText?.(m.text);
    else if (m.type === 'tool_call') c.onToolCall?.(m);
    else {
      calls.delete(m.id);
      if (m.type === 'result') c.resolve(m.value);
      else c.reject(error(m.error.kind, m.error.message, extraOf(m.error)));
    }
  }
  failAll(why) {
    for (const [id, c] of calls) if (c.conn === this) { calls.delete(id); c.reject(error('internal', why)); }
  }
  deviceLost(m) {
    for (const eid of m.engines) {
      const e = this.live.get(eid);
      if (e) { this.live.delete(eid); e._lose(m.message); }
    }
  }
}

function needWebGPU() {
  if (!('gpu' in navigator)) {
    throw error('no-webgpu', globalThis.isSecureContext === false
      ? `this page is not a secure context (${location.origin}), so WebGPU is off: serve it from https, http://localhost or http://127.0.0.1`
      : 'this browser does not expose WebGPU (navigator.gpu is missing)');
  }
}

function workerConnection(kind, note = '', name = undefined) {
  const c = new Connection(kind, note);
  const w = new Worker(new URL('./worker.mjs', import.meta.url), { type: 'module', ...(name ? { name } : {}) });
  c.post = (m, transfer = []) => w.postMessage(m, transfer);
  w.onmessage = ({ data }) => c.onMessage(data);
  w.onerror = (e) => {
    e.preventDefault?.();
    c.failAll(`the bitweb worker failed: ${e.message || 'it could not start'}` + (e.filename ? ` (${e.filename}:${e.lineno})` : ''));
  };
  return c;
}

let dedicated = null, downloader = null, shared = null;     // (shared: a Promise of a Connection)
let preferShared = false;
let shareGroup = '';               // pages share an engine only with pages of the same group (connect)
const theDedicated = (note = '') => { needWebGPU(); dedicated ??= workerConnection('dedicated', note); return dedicated; };
export const theDownloader = () => (downloader ??= workerConnection('download', '', 'bitweb-download'));

// The shared engine, or (where this browser cannot share one) the dedicated worker, saying why.
function theShared() {
  shared ??= (async () => {
    needWebGPU();
    const fallback = (why) => (dedicated ? Object.assign(dedicated, { note: why }) : theDedicated(why));
    if (typeof SharedWorker === 'undefined') return fallback('this browser has no SharedWorker (Chrome on Android, older browsers): this page has an engine of its own');
    if (!navigator.locks?.request) return fallback('this browser has no Web Locks (navigator.locks): this page has an engine of its own');
    const c = new Connection('shared');
    let sw;
    try {
      sw = new SharedWorker(new URL('./shared.mjs', import.meta.url), { type: 'module', name: `bitweb-shared ${shareGroup}`.trim() });
    } catch (e) {
      return fallback(`the shared worker could not start (${e.message}): this page has an engine of its own`);
    }
    c.post = (m, transfer = []) => sw.port.postMessage(m, transfer);
    sw.port.onmessage = ({ data }) => c.onMessage(data);
    sw.onerror = (e) => { e.preventDefault?.(); c.failAll(`the shared bitweb worker failed: ${e.message || 'it could not start'}`); };
    sw.port.start();
    // a Web Lock held while this page lives: the shared worker knows when the page is gone
    const lock = `bitweb-page-${crypto.randomUUID()}`;
    await new Promise((granted) => navigator.locks.request(lock, () => { granted(); return new Promise(() => {}); }));
    let v;
    try {
      v = await call('connect', { lock }, {}, c);
    } catch (e) {
      return fallback(`the shared worker failed (${e.message}): this page has an engine of its own`);
    }
    if (!v.gpu) {
      sw.port.close();
      return fallback('this browser has no WebGPU in shared workers: this page has an engine of its own');
    }
    c.pages = v.pages;
    return c;
  })();
  return shared;
}

// The connection of a call that names no engine: the shared engine's once this page asked to share.
const current = () => (preferShared ? theShared() : theDedicated());

/** The connection a load with options.share uses: the shared engine (and every later call's) when
 *  true, the dedicated worker when false, else the current one. May be a Promise. */
export function hostFor(share) {
  if (share) preferShared = true;
  return share ? theShared() : share === false ? theDedicated() : current();
}

/** The connection that writes the model cache for cache.download(): the download worker once this
 *  page asked to share (a shared worker cannot write the cache), else null (the current one). */
export const cacheWriter = () => (preferShared ? theDownloader() : null);

/**
 * Which engine host this page's calls use: its own dedicated worker (default), or, with share: true,
 * the one engine host of every page of this origin (a SharedWorker), where this browser has one with
 * WebGPU (else the dedicated worker, saying why). bitweb.load(source, {share: true}) does the same.
 * `group`: pages share an engine only with pages that name the same group (the app names the version
 * of itself its service worker serves it, so that two versions of the app never share one engine).
 * @returns {Promise<{shared: boolean, note: string, pages: number}>}
 */
export async function connect({ share = false, group = '' } = {}) {
  if (typeof group !== 'string') throw settingsError('group', 'must be a string');
  if (share && !shared) shareGroup = group;
  if (share) preferShared = true;
  const c = await current();
  return { shared: c.kind === 'shared', note: c.note, pages: c.pages };
}

const extraOf = (err) => Object.fromEntries(Object.entries(err).filter(([k]) => k !== 'kind' && k !== 'message'));
function progressOf(m) {
  const p = { stage: m.stage, done: m.done, total: m.total };
  for (const k of ['label', 'bytesPerSecond', 'etaSeconds', 'note']) if (m[k] != null) p[k] = m[k];
  return p;
}

/** One request to a connection (default: the current one); resolves with its result. `transfer`:
 *  the body's objects that move to the worker (postMessage's transfer list: MessagePorts). */
export async function call(op, body = {}, { signal, onProgress, onText, onToolCall, transfer = [] } = {}, conn = null) {
  const why = requestProblem({ op, ...body });        // (web/protocol.mjs: what the worker takes)
  if (why) throw error('internal', why);
  const c = conn || await current();
  const id = nextId++;
  return new Promise((resolve, reject) => {
    let onAbort = null;
    const done = (fn) => (v) => { if (onAbort) signal.removeEventListener('abort', onAbort); fn(v); };
    calls.set(id, { resolve: done(resolve), reject: done(reject), onProgress, onText, onToolCall, conn: c });
    if (signal) {
      onAbort = () => c.post({ id: nextId++, op: 'abort', target: id });
      signal.addEventListener('abort', onAbort, { once: true });
    }
    c.post({ id, op, ...body }, transfer);
    if (signal?.aborted) onAbort();                  // (aborted while the connection was found)
  });
}

/** performance.now() when the worker last said anything (null: not started). While a request runs
 * it says something every 5 s at least, so a long silence means its thread is stuck, not busy. */
export function lastHeard() { return heard; }
