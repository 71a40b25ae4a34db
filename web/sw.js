// Service worker: the app works offline after its first visit (README, "Offline"). Registered by
// web/offline.mjs; a classic script (module service workers are not in every browser yet).
//
// What it keeps: build/web/precache.js (tools/build_web.py) names the files the app needs (the page,
// its modules, the worker, the default model, Pyodide's runtime, bitweb.zip), each with its size and
// SHA-256, and a version (a hash of that list). A new build changes precache.js, which the browser
// compares byte for byte on its update checks (every navigation; updateViaCache 'none'), so a new
// bitweb installs a new service worker. The boot snapshot is not kept here: web/py.mjs keeps it
// in its own cache (`bitweb-boot`, keyed by Pyodide's version and bitweb.zip's hash) after the first
// load, and a boot without it (offline before that save) is a fresh one, which works.
//
// Install: every listed file goes into the cache `bitweb-app-<version>`, each checked against its
// size and SHA-256 (a file the server changed meanwhile fails the install; the next visit tries
// again, keeping what was fetched); a marker entry goes in last, and a cache without it is never
// used. Then this worker takes over at once (skipWaiting, clients.claim): it is safe because of the
// pins below.
//
// Fetch: only GET requests for listed URLs are answered here (anything else goes to the network as
// if there were no service worker: other models, HEAD requests, other pages). Each page is pinned
// when it is navigated to:
//   'network'   the navigation reached the server: the page and its workers get every listed file
//               from the network, as without a service worker (revalidated: `npm start` and a
//               static host serve their current files);
//   <version>   the server could not be reached: the page came from the complete cache of that
//               version, and so do all its files (never the network, even when it is back).
// A worker inherits its page's pin. A client with no pin (a page from before this worker controlled
// it; a browser without resultingClientId) gets the network, and the newest complete cache when the
// network fails. So a page never mixes versions: an old page keeps its old
// cache while a newer service worker serves new pages, and a version's cache is deleted only once
// no live page or worker is pinned to it. Pins are kept in the cache `bitweb-sw` (a service worker
// is stopped when idle and started again for the next request).
'use strict';

importScripts('../build/web/precache.js');

const { version: VERSION, files: FILES } = self.BITWEB_PRECACHE;
const PREFIX = 'bitweb-app-';
const CACHE = PREFIX + VERSION;
const STATE = 'bitweb-sw';
const WEB = new URL('./', self.location.href);             // the directory of web/ as served
const ROOT = new URL('../', WEB);                           // the repository's root as served (tools/serve.mjs: the same)
const MARKER = new URL('__bitweb-complete', WEB).href;      // the last entry of a complete cache
const PINS = new URL('__bitweb-pins', WEB).href;

const urlOf = (path) => (path.startsWith('web/') ? new URL(path.slice(4), WEB) : new URL(path, ROOT)).href;
const LISTED = new Map(FILES.map((f) => [urlOf(f.path), f]));
const INDEX = urlOf('web/index.html');

// ------------------------------------------------------------------ install
self.addEventListener('install', (event) => {
  event.waitUntil(precache().then(() => self.skipWaiting()));
});

async function sha256(buf) {
  return [...new Uint8Array(await crypto.subtle.digest('SHA-256', buf))].map((b) => b.toString(16).padStart(2, '0')).join('');
}

// Every listed file into CACHE (checked), then the marker. Entries already there with the right
// hash (an install that was interrupted) are kept.
async function precache() {
  const cache = await caches.open(CACHE);
  for (const f of FILES) {
    const url = urlOf(f.path);
    const have = await cache.match(url);
    if (have && have.headers.get('x-bitweb-sha256') === f.sha256) continue;
    const r = await fetch(url, { cache: 'no-cache' });
    if (!r.ok) throw new Error(`bitweb offline copy: ${url}: HTTP ${r.status}`);
    const body = await r.arrayBuffer();
    const sha = await sha256(body);
    if (body.byteLength !== f.bytes || sha !== f.sha256) {
      throw new Error(`bitweb offline copy: ${url} is not the file build/web/precache.js names ` +
        `(${body.byteLength} bytes, not ${f.bytes}, or another SHA-256): the server has another build; ` +
        'the next visit tries again (after "python tools/build_web.py" when the files were edited)');
    }
    const headers = new Headers(r.headers);
    for (const h of ['content-encoding', 'content-length', 'content-range', 'set-cookie']) headers.delete(h);
    headers.set('x-bitweb-sha256', sha);
    await cache.put(url, new Response(body, { status: 200, headers }));
  }
  await cache.put(MARKER, new Response(VERSION));
}

const complete = async (version) => !!(await (await caches.open(PREFIX + version)).match(MARKER));

// ------------------------------------------------------------------ activate: take over, tidy up
self.addEventListener('activate', (event) => {
  event.waitUntil((async () => {
    await self.registration.navigationPreload?.enable().catch(() => {});
    await self.clients.claim();
    await tidy();
  })());
});

// ------------------------------------------------------------------ pins
// Promise of Map clientId -> {how: 'network' | version, t: when pinned (ms), seen: listed alive once}
let pins = null;
// A page or worker is listed by clients.matchAll only once it has started: a pin is dropped when
// its client was listed once and is gone, or was never listed within YOUNG_MS.
const YOUNG_MS = 60_000;
let saving = Promise.resolve();

function loadPins() {
  pins ??= caches.open(STATE).then((c) => c.match(PINS)).then((r) => (r ? r.json() : {}))
    .then((o) => new Map(Object.entries(o))).catch(() => new Map());
  return pins;
}

async function pin(id, how) {
  if (!id) return;
  const map = await loadPins();
  map.set(id, { how, t: Date.now() });
  await save(map);
}

const pinOf = (map, id) => map.get(id)?.how;

function save(map) {
  const body = JSON.stringify(Object.fromEntries(map));
  saving = saving.then(() => caches.open(STATE)).then((c) => c.put(PINS, new Response(body, { headers: { 'content-type': 'application/json' } })))
    .catch((e) => console.warn('bitweb service worker: pins not stored:', e));
  return saving;
}

// Drop the pins of pages and workers that are gone; delete the caches of versions no one is pinned
// to (never this worker's own, never one a newer worker is installing: only the active worker tidies).
async function tidy() {
  if (self.serviceWorker && self.serviceWorker.state !== 'activated') return;
  if (self.registration.installing || self.registration.waiting) return;
  const map = await loadPins();
  const alive = new Set((await self.clients.matchAll({ includeUncontrolled: true, type: 'all' })).map((c) => c.id));
  let changed = false;
  const now = Date.now();
  for (const [id, p] of [...map]) {
    if (alive.has(id)) { if (!p.seen) { p.seen = true; changed = true; } continue; }
    if (p.seen || !(now - p.t < YOUNG_MS)) { map.delete(id); changed = true; }
  }
  if (changed) await save(map);
  const keep = new Set([CACHE, ...[...map.values()].filter((p) => p.how !== 'network').map((p) => PREFIX + p.how)]);
  for (const name of await caches.keys()) {
    if (name.startsWith(PREFIX) && !keep.has(name)) await caches.delete(name);
  }
}

// ------------------------------------------------------------------ fetch
self.addEventListener('fetch', (event) => {
  const req = event.request;
  if (req.method !== 'GET') return;
  if (req.mode === 'navigate') {
    const u = new URL(req.url);
    u.search = ''; u.hash = '';
    if (u.pathname.endsWith('/')) u.pathname += 'index.html';
    if (u.href !== INDEX) return;                          // other pages: the network, unpinned
    event.respondWith(navigate(event));
    return;
  }
  const url = req.url.split('#')[0];
  if (!LISTED.has(url)) return;
  event.respondWith(subresource(event, url));
});

// The page: from the network when the server answers (pinned 'network'), else from the newest
// complete cache (pinned to its version).
async function navigate(event) {
  try {
    const r = (await event.preloadResponse) || await fetch(event.request);
    await pin(event.resultingClientId, 'network');
    event.waitUntil(heal().then(tidy).catch(() => {}));
    return r;
  } catch (e) {
    const version = await servable();
    if (!version) throw e;                                 // (the browser's own offline page)
    await pin(event.resultingClientId, version);
    return (await caches.open(PREFIX + version)).match(INDEX);
  }
}

// This version when its cache is complete, else another complete one (an older version, until
// this one is whole again), else null.
async function servable() {
  if (await complete(VERSION)) return VERSION;
  for (const name of await caches.keys()) {
    if (name.startsWith(PREFIX) && await complete(name.slice(PREFIX.length))) return name.slice(PREFIX.length);
  }
  return null;
}

// An online visit finds this version's cache incomplete (evicted, or deleted by a race): fill it again.
async function heal() {
  if (!(await complete(VERSION))) await precache();
}

async function subresource(event, url) {
  const req = event.request;
  const map = await loadPins();
  const pinned = pinOf(map, event.clientId);
  const how = pinned ?? 'network';                            // (a page loaded before this worker controlled it)
  if (req.destination === 'worker' || req.destination === 'sharedworker') await pin(event.resultingClientId, how);
  if (how === 'network') {
    const fresh = new Request(req, { cache: req.cache === 'default' ? 'no-cache' : req.cache });
    if (pinned) return fetch(fresh);
    // no pin: a page from before this worker, or a browser without resultingClientId (then an offline
    // page came from servable()'s cache, which this falls back to when the network fails)
    try { return await fetch(fresh); } catch (e) {
      const v = await servable();
      const r = v && await (await caches.open(PREFIX + v)).match(url);
      if (!r) throw e;
      return r;
    }
  }
  const r = await (await caches.open(PREFIX + how)).match(url);
  if (!r) return Response.error();                          // (its cache is gone: never another version's file)
  return req.headers.has('range') ? ranged(r, req.headers.get('range')) : r;
}

// A 206 of a cached response for "bytes=a-b" / "bytes=a-" / "bytes=-n" (416 when out of range).
async function ranged(r, range) {
  const body = await r.arrayBuffer();
  const n = body.byteLength;
  const m = /^bytes=(\d*)-(\d*)$/.exec(range);
  if (!m || (m[1] === '' && m[2] === '')) return new Response(body, { status: 200, headers: r.headers });
  const start = m[1] === '' ? Math.max(0, n - Number(m[2])) : Number(m[1]);
  const end = m[1] === '' || m[2] === '' ? n - 1 : Math.min(Number(m[2]), n - 1);
  if (start > end || start >= n) return new Response('', { status: 416, headers: { 'content-range': `bytes */${n}` } });
  const headers = new Headers(r.headers);
  headers.set('content-range', `bytes ${start}-${end}/${n}`);
  return new Response(body.slice(start, end + 1), { status: 206, headers });
}

// ------------------------------------------------------------------ status (web/offline.mjs)
// {version, complete, pin (the asking page's), caches (bitweb-app-* names)}; tidies first.
self.addEventListener('message', (event) => {
  if (event.data?.type !== 'status' || !event.ports[0]) return;
  event.waitUntil((async () => {
    await tidy().catch(() => {});
    const map = await loadPins();
    event.ports[0].postMessage({
      version: VERSION, complete: await complete(VERSION), pin: pinOf(map, event.source?.id) ?? null,
      caches: (await caches.keys()).filter((n) => n.startsWith(PREFIX)).sort(),
    });
  })());
});
