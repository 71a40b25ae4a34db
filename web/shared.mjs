// The shared engine (bitweb.load(source, {share: true}), web/bitweb.mjs): a SharedWorker that runs
// the library's worker (web/worker.mjs: Pyodide + WebGPU) once for every page of the origin, and
// routes the pages' requests to it. The protocol is the worker's (web/protocol.mjs); request ids are
// each page's own, so this host gives every request an id of its own and maps the answers back.
//
// - Pages: a page's first request is `connect` with the name of a Web Lock it holds while it lives;
//   this host asks for that lock, which the browser grants once the page is gone (closed, reloaded,
//   crashed): its queued requests are dropped, its running one aborted, its engines released.
// - Engines: a load of the same source (URL or cached name) and options as a live engine attaches
//   the page to it (load.attached: nothing downloaded, nothing uploaded); each engine counts its
//   pages (the `shared` message: engine.info.sharedBy) and is unloaded when its last page unloads
//   it or goes. A shared worker cannot write the model cache (no OPFS sync access handles there):
//   a URL that is not cached is answered {needsCache: true}, and the page's download worker caches it.
//   Nor can it read the cache without a stream that reads ahead of the upload: a load's `files` port
//   has the page's download worker read the cached copy for it (models.mjs open, serveReads).
// - Fairness: generations run one at a time, taken round-robin from the pages' queues (each page's
//   in its order), so one page's queue of long replies does not starve another page. A reply is not
//   split: the engine generates a request to its end, so pages alternate by request, not by token.
//   Stop / AbortSignal abort the page's own request only (a queued one leaves its queue at once).
import * as models from './models.mjs';
import { CAN_WRITE_CACHE, serve, setOutlet } from './worker.mjs';
import { requestProblem } from './protocol.mjs';

const pages = new Map();       // page number -> Page, once connected
const routes = new Map();      // this host's request id -> {page, id: the page's, then?: (message) => void}
const engines = new Map();     // engine id -> {key, value: its load result, users: Map<Page, loads>}
const loading = new Map();     // load key -> Promise (a load in flight that a same load waits for)
const served = [];             // [page number, the page's request id] of the generations started, in order (stats)
let nextPage = 1, nextId = 1;
let running = null;            // this host's id of the generation on the GPU
let hold = false;              // debug-hold: queued generations wait

class Page {
  constructor(port) {
    this.n = nextPage++;
    this.port = port;
    this.queue = [];           // generations waiting (the page's messages)
    this.ids = new Map();      // the page's request id -> this host's
    this.gone = false;
  }
  send(m) { if (!this.gone) this.port.postMessage(m); }
  answer(id, value) { this.send({ id, type: 'result', value }); }
  fail(id, kind, message) { this.send({ id, type: 'error', error: { kind, message } }); }
}

// The worker's messages: to the page whose request they answer (with its own id).
setOutlet((m) => {
  if (m.type === 'device-lost') {
    for (const eid of m.engines) engines.delete(eid);
    for (const p of pages.values()) p.send(m);
    return;
  }
  if (m.type === 'alive') {
    for (const p of pages.values()) if (p.ids.size || p.queue.length) p.send(m);    // (a queued request waits, not stuck)
    return;
  }
  const r = routes.get(m.id);
  if (!r) return;                                      // (this host's own requests: unloads, aborts)
  if (m.type === 'result' || m.type === 'error') {
    routes.delete(m.id);
    if (r.page.ids.get(r.id) === m.id) r.page.ids.delete(r.id);
    if (running === m.id) { running = null; setTimeout(pump, 0); }
    if (r.then) return r.then(m);
  }
  r.page.send({ ...m, id: r.id });
});

function forward(page, msg, then) {
  const id = nextId++;
  routes.set(id, { page, id: msg.id, then });
  page.ids.set(msg.id, id);
  serve({ ...msg, id });
  return id;
}
const own = (msg) => serve({ ...msg, id: nextId++ });     // a request of this host's (its answer is dropped)

// The next generation: the first page after the last one served that has one waiting.
let last = 0;
function pump() {
  if (running != null || hold) return;
  const order = [...pages.values()].sort((a, b) => a.n - b.n);
  const next = order.find((p) => p.n > last && p.queue.length) || order.find((p) => p.queue.length);
  if (!next) return;
  last = next.n;
  const msg = next.queue.shift();
  served.push([next.n, msg.id]);
  if (served.length > 64) served.shift();
  running = forward(next, msg);
}

function broadcast() {
  const counts = Object.fromEntries([...engines].map(([eid, e]) => [eid, e.users.size]));
  for (const p of pages.values()) p.send({ type: 'shared', id: null, pages: pages.size, engines: counts });
}

// A page lets go of one load of an engine; the engine's last page unloads it.
function release(page, eid) {
  const e = engines.get(eid);
  if (!e || !e.users.has(page)) return false;
  const n = e.users.get(page) - 1;
  if (n > 0) e.users.set(page, n); else e.users.delete(page);
  if (!e.users.size) {
    engines.delete(eid);
    own({ op: 'unload', engine: eid });
  }
  return true;
}

function leave(page) {
  if (page.gone) return;
  page.gone = true;
  pages.delete(page.n);
  page.queue = [];
  for (const id of page.ids.values()) own({ op: 'abort', target: id });     // (its running reply, its loads)
  for (const [eid, e] of [...engines]) while (e.users.has(page)) release(page, eid);
  broadcast();
  pump();
}

// What makes two loads the same engine: the source (a URL, a cached name) and the options.
const keyOf = (msg) => (msg.source.file ? null : JSON.stringify([msg.source.url ?? ['cached', msg.source.cached], msg.options]));

async function cachedHere(src) {
  const url = new URL(src.url, self.location.href).href;
  const e = await models.entry(src.name || models.nameFrom(url)).catch(() => null);
  return !!e && (e.source === url || (src.sha256 && e.sha256 === src.sha256.toLowerCase()));
}

function attach(page, msg, eid) {
  msg.files?.close();                                  // (nothing to read)
  const e = engines.get(eid);
  e.users.set(page, (e.users.get(page) || 0) + 1);
  page.answer(msg.id, { ...e.value, load: { ...e.value.load, attached: true }, sharedBy: e.users.size });
  broadcast();
}

async function load(page, msg) {
  const key = keyOf(msg);
  if (key && loading.has(key)) await loading.get(key).catch(() => {});
  if (page.gone) return msg.files?.close();
  const have = key && [...engines].find(([, e]) => e.key === key);
  if (have) return attach(page, msg, have[0]);
  if (msg.source.url && !CAN_WRITE_CACHE && msg.options.cache !== false && !(await cachedHere(msg.source))) {
    msg.files?.close();
    return page.answer(msg.id, { needsCache: true });
  }
  let done;
  const settled = new Promise((r) => { done = r; });
  if (key) loading.set(key, settled);
  forward(page, msg, (m) => {
    if (key) loading.delete(key);
    done();
    if (m.type === 'error') return page.send({ ...m, id: msg.id });
    const v = m.value;
    if (msg.options.replace === 'always') engines.clear();     // (Python unloaded the others, the other pages' too)
    engines.set(v.engine, { key, value: v, users: new Map([[page, 1]]) });
    if (page.gone) return release(page, v.engine);
    page.answer(msg.id, { ...v, sharedBy: 1 });
    broadcast();
  });
}

function stats(page, msg) {
  forward(page, msg, (m) => {
    if (m.type === 'error') return page.send({ ...m, id: msg.id });
    const runningOf = routes.get(running);
    page.answer(msg.id, { ...m.value, shared: {
      page: page.n, pages: pages.size, engines: Object.fromEntries([...engines].map(([eid, e]) => [eid, e.users.size])),
      queued: [...pages.values()].flatMap((p) => p.queue.map((q) => [p.n, q.id])),
      running: runningOf ? [runningOf.page.n, runningOf.id] : null, served: served.slice(), hold,
    } });
  });
}

function fromPage(page, msg) {
  const why = requestProblem(msg);
  if (why) return page.fail(msg?.id, 'internal', why);
  switch (msg.op) {
    case 'connect':
      if (!pages.has(page.n)) {
        pages.set(page.n, page);
        navigator.locks.request(msg.lock, () => leave(page));      // granted once the page is gone
      }
      page.answer(msg.id, { shared: true, pages: pages.size, gpu: !!navigator.gpu, page: page.n });
      return broadcast();
    case 'abort': {
      const i = page.queue.findIndex((q) => q.id === msg.target);
      if (i >= 0) {
        page.queue.splice(i, 1);
        page.fail(msg.target, 'aborted', 'aborted');
      } else if (page.ids.has(msg.target)) {
        own({ op: 'abort', target: page.ids.get(msg.target) });
      }
      return page.answer(msg.id, null);
    }
    case 'load': return load(page, msg).catch((e) => page.fail(msg.id, 'internal', String(e?.message || e)));
    case 'unload': return page.answer(msg.id, { unloaded: release(page, msg.engine) });
    case 'generate':
      page.queue.push(msg);
      return pump();
    case 'debug-hold':
      hold = !!msg.hold;
      pump();
      return page.answer(msg.id, null);
    case 'stats': return stats(page, msg);
    default: forward(page, msg);
  }
}

self.onconnect = (ev) => {
  const page = new Page(ev.ports[0]);
  page.port.onmessage = ({ data }) => fromPage(page, data);
  page.port.start?.();
};
