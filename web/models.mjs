// Where model bytes come from, and the model cache in OPFS (runs in the library's worker).
//
// The cache is the origin private file system directory "models/": one file per model plus
// "index.json" ({name: {size, source, saved, lastModified, file}}). A model enters the index only
// once it has loaded (`commit()` of a pending copy, called by the worker after a successful load);
// a copy that fails to load is deleted (`discard()`), so the cache never holds a file that cannot
// load. Pending copies are written under their own file name ("NAME.<stamp>.part") so that a
// cached model of the same name stays usable until the new copy replaces it.
//
// Every copy streams: a fetch body or a File is read into one reused buffer and written with a
// FileSystemSyncAccessHandle, so one chunk is held in memory at a time. Loading then reads the
// cached File in chunks (web/gpu.mjs uploadBlob) straight into queue.writeBuffer.
//
// Downloads are resumable and verified (web/download.mjs: "NAME.<stamp>.part" with its record
// "NAME.<stamp>.part.json"; a part is kept when its download fails or its page closes, listed as a
// download, and resumed by the next attempt). One download of a name at a time across tabs: the
// Web Lock "bitweb-model:NAME" is held from the check of the cache to the commit (or discard), so a
// second tab waits (and hears the first one's progress on the BroadcastChannel "bitweb-downloads"),
// then finds the model in the cache, or resumes the part a closed tab left.

import * as downloads from './download.mjs';
import { ModelsError, httpError } from './download.mjs';
import { readThrough } from './reads.mjs';

export { serveReads } from './reads.mjs';

export { ModelsError };
export const DEFAULT_URL = new URL('./models/bitweb-chat-i2_s.gguf', import.meta.url).href;
export const CHUNK = 8 << 20;

const fail = (kind, message) => new ModelsError(kind, message);

const pending = new Set();         // file names being written or loaded (not in the index yet)

export function nameFrom(text) {
  const base = String(text).split(/[?#]/)[0].split('/').filter(Boolean).pop() || 'model.gguf';
  let decoded;
  try { decoded = decodeURIComponent(base); } catch { decoded = base; }
  let name = decoded.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^\.+/, '').slice(0, 120);
  if (!name || name === 'index.json') name = 'model';
  return name.endsWith('.gguf') ? name : name + '.gguf';
}

export function hasCache() {
  return !!(navigator.storage && navigator.storage.getDirectory);
}

async function dir() {
  if (!hasCache()) throw fail('storage', 'this browser has no origin private file system (OPFS): models cannot be cached');
  const root = await navigator.storage.getDirectory();
  return root.getDirectoryHandle('models', { create: true });
}

async function readIndex(d) {
  try {
    const f = await (await d.getFileHandle('index.json')).getFile();
    return JSON.parse(await f.text());
  } catch {
    return {};
  }
}

// Every read-modify-write of index.json, and list()'s clean-up (which deletes files the index
// does not name), runs under one lock, across this worker and other tabs. Interleaved, a list()
// that read the index before a commit() wrote back its stale copy and deleted the new model's file.
// (Not re-entrant: nothing run under it takes it again.)
const INDEX_LOCK = 'bitweb-model-index';
let indexChain = Promise.resolve();
function underIndexLock(fn) {
  if (navigator.locks?.request) return navigator.locks.request(INDEX_LOCK, () => fn());
  const run = indexChain.then(() => fn());
  indexChain = run.catch(() => {});
  return run;
}

async function writeIndex(d, idx) {
  const h = await d.getFileHandle('index.json', { create: true });
  const w = await h.createWritable();
  await w.write(JSON.stringify(idx));
  await w.close();
}

const fileOf = (name, e) => e.file || name;

// Index `entry` (its `file` holds the bytes) as `name`, under the index lock: then `then()` (the
// copy's own bookkeeping), and the file of an older copy of that name goes.
function putEntry(d, name, entry, then) {
  return underIndexLock(async () => {
    const idx = await readIndex(d);
    const old = idx[name];
    idx[name] = { saved: Date.now(), ...entry };
    await writeIndex(d, idx);
    await then();
    if (old && fileOf(name, old) !== entry.file) await d.removeEntry(fileOf(name, old)).catch(() => {});
  });
}

// {models: [{name, size, source, saved, sha256}], downloads: [{name, source, have, size, complete}], usage, quota}.
// Drops entries whose file is gone or has the wrong size, and files that are neither in the index,
// nor pending, nor a download's part or record (interrupted copies); a download whose name's lock
// is held (being written, here or in another tab) is left alone.
export async function list() {
  const d = await dir();
  return underIndexLock(() => listLocked(d));
}

async function listLocked(d) {
  const idx = await readIndex(d);
  const models = [];
  let changed = false;
  for (const [name, e] of Object.entries(idx)) {
    let size = -1;
    try { size = (await (await d.getFileHandle(fileOf(name, e))).getFile()).size; } catch { /* gone */ }
    if (size !== e.size) { delete idx[name]; changed = true; continue; }
    models.push({ name, size: e.size, source: e.source, saved: e.saved, sha256: e.sha256 || null });
  }
  const used = new Set(Object.entries(idx).map(([n, e]) => fileOf(n, e)));
  const files = [];
  for await (const f of d.keys()) files.push(f);
  const busy = await lockedNames();
  const records = new Map();
  for (const f of files.filter((f) => f.endsWith('.part.json'))) {
    const rec = await downloads.readRecord(d, f.slice(0, -5));
    if (rec && files.includes(rec.file)) records.set(rec.file, rec);
  }
  const downloadList = [];
  for (const f of files) {
    if (f === 'index.json' || used.has(f) || pending.has(f)) continue;
    const rec = records.get(f) || records.get(f.replace(/\.json$/, ''));
    if (rec) {
      if (f === rec.file) downloadList.push({ name: rec.name, source: rec.url, have: rec.offset, size: rec.size, complete: !!rec.complete });
      continue;
    }
    if (busy.has(f.replace(/\.[a-z0-9]+\.part(\.json)?$/, ''))) continue;
    await d.removeEntry(f).catch(() => {});
  }
  if (changed) await writeIndex(d, idx);
  models.sort((a, b) => b.saved - a.saved);
  const est = navigator.storage.estimate ? await navigator.storage.estimate() : {};
  return { models, downloads: downloadList, usage: est.usage ?? null, quota: est.quota ?? null };
}

export async function entry(name) {
  return (await readIndex(await dir()))[name] || null;
}

// A cached model for loading: a GrowingFile that is complete, over a read-only sync access handle
// (reads go straight into the caller's buffer: no stream, no garbage; several loads may read it at
// once); close() it after the load. Where sync access handles are missing (a shared worker), the
// File itself, whose bulk reads (readInto, web/gpu.mjs uploadBlob) go through `reads` when given:
// {port, signal}, a MessagePort to a dedicated worker's serveReads (web/reads.mjs).
export async function open(name, reads = null) {
  const d = await dir();
  const e = (await readIndex(d))[name];
  if (!e) throw fail('storage', `"${name}" is not in the model cache`);
  const fh = await d.getFileHandle(fileOf(name, e));
  let h;
  try {
    h = await fh.createSyncAccessHandle({ mode: 'read-only' });
  } catch {
    const file = await fh.getFile();
    return reads ? readThrough(file, 'models/' + fileOf(name, e), reads) : file;
  }
  const size = h.getSize();
  const f = new GrowingFile(h, size);
  f.ended(size, null);
  return f;
}

// Delete a cached model and any download of that name (a part being written is left alone).
export async function remove(name) {
  const d = await dir();
  let removed = await underIndexLock(async () => {
    const idx = await readIndex(d);
    const e = idx[name];
    if (!e) return false;
    delete idx[name];
    await writeIndex(d, idx);
    await d.removeEntry(fileOf(name, e)).catch(() => {});
    return true;
  });
  if (!(await lockedNames()).has(name)) {
    for (let rec = await downloads.findPart(d, name); rec; rec = await downloads.findPart(d, name)) {
      await downloads.dropPart(d, rec.file);
      removed = true;
    }
  }
  return removed;
}

// Write chunks from `next()` (async, returns Uint8Array or null at the end) into a pending copy.
// Returns {file, commit(), discard()}: commit() puts it in the index as `name` (replacing an older
// copy), discard() deletes it. Nothing is indexed before commit().
async function write(name, next, onBytes, meta) {
  const copy = await startWrite(name, next, onBytes, meta);
  await copy.written;
  copy.file.close();                         // (the load reads the File, not the writer's handle)
  return { file: await copy.fileHandle.getFile(), commit: copy.commit, discard: copy.discard };
}

// The same copy, returned as soon as the pending file exists: `file` is a GrowingFile that reads
// the bytes written so far (and waits for the rest) while the copy goes on; `written` settles when
// the copy is complete (rejects as it fails; a failed copy is already deleted). commit() and
// discard() wait for the copy to end first (discard() asks it to stop: `stop()`).
async function startWrite(name, next, onBytes, meta, size = -1) {
  const d = await dir();
  const fname = `${name}.${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}.part`;
  pending.add(fname);
  const drop = async () => { pending.delete(fname); await d.removeEntry(fname).catch(() => {}); };
  let h = null, pos = 0, stopped = null;
  let fh;
  try {
    fh = await d.getFileHandle(fname, { create: true });
    h = await fh.createSyncAccessHandle();
  } catch (e) {
    if (h) h.close();
    await drop();
    throw e;
  }
  const growing = new GrowingFile(h, size);
  const written = (async () => {
    try {
      for (let chunk = await next(); chunk; chunk = await next()) {
        if (stopped) throw stopped;
        let off = 0;
        while (off < chunk.byteLength) off += h.write(chunk.subarray(off), { at: pos + off });
        pos += chunk.byteLength;
        growing.grew(pos);
        onBytes(pos);
      }
      if (stopped) throw stopped;
      h.flush();
      growing.ended(pos, null);
      return pos;
    } catch (e0) {
      let e = e0;
      if (e.name === 'QuotaExceededError') {
        e = fail('storage', `not enough browser storage to cache "${name}" (${pos} bytes written): free space or delete cached models`);
      }
      growing.ended(pos, e);
      throw e;
    }
  })();
  const close = () => growing.close();
  written.catch(async () => { close(); await drop(); });
  return {
    file: growing, fileHandle: fh, written,
    async commit() {
      await written;
      close();
      await putEntry(d, name, { size: pos, file: fname, ...meta }, async () => { pending.delete(fname); });
    },
    async discard() {
      stopped ??= fail('aborted', 'the copy was stopped');
      await written.catch(() => {});
      close();
      await drop();
    },
  };
}

// A model file still being written (a download streaming into the cache): what the engine reads
// of a Blob (`size`, `slice(a, b).arrayBuffer()`) and `readInto(view, at)` for web/gpu.mjs
// uploadBlob. Reads wait until the bytes are there and fail with the copy's error if it fails.
export class GrowingFile {
  constructor(handle, size) {
    this.handle = handle;
    this.size = size;               // the final size (the download's content-length)
    this.have = 0;                  // bytes written so far
    this.error = null;
    this.done = false;
    this.closed = false;
    this.waiters = [];
  }
  grew(n) { this.have = n; this.wake(); }
  close() { if (!this.closed) { this.closed = true; this.handle.close(); } }
  // The bytes [at, at + n) now, when they are there (for the few small host reads a load may make).
  readSync(at, n) {
    if (this.closed || at + n > this.have) throw fail('storage', `bytes ${at}..${at + n} of the model file are not there yet`);
    const out = new Uint8Array(n);
    let got = 0;
    while (got < n) { const r = this.handle.read(out.subarray(got), { at: at + got }); if (!r) break; got += r; }
    return out;
  }
  ended(n, error) { this.have = n; this.done = true; this.error = error; this.wake(); }
  wake() {
    const keep = [];
    for (const w of this.waiters) {
      if (this.error) w.reject(this.error);
      else if (this.have >= w.end || this.done) w.resolve();
      else keep.push(w);
    }
    this.waiters = keep;
  }
  until(end) {
    if (this.error) return Promise.reject(this.error);
    if (this.have >= end || this.done) return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ end, resolve, reject }));
  }
  // Read bytes [at, at + view.byteLength) into view once written; returns the bytes read (fewer
  // only at the end of a copy shorter than promised).
  async readInto(view, at) {
    await this.until(at + view.byteLength);
    if (this.closed) throw fail('storage', 'the model file was closed while it was being read');
    const n = Math.max(0, Math.min(view.byteLength, this.have - at));
    let got = 0;
    while (got < n) {
      const r = this.handle.read(view.subarray(got, n), { at: at + got });
      if (!r) break;
      got += r;
    }
    return got;
  }
  slice(start = 0, end = this.size) {
    const file = this;
    return {
      size: end - start,
      async arrayBuffer() {
        const out = new Uint8Array(end - start);
        const n = await file.readInto(out, start);
        return n === out.byteLength ? out.buffer : out.slice(0, n).buffer;
      },
    };
  }
}

// Chunks of a byte stream, each read into the same reused buffer (BYOB reader): copying a file
// of any size holds `size` bytes (CHUNK for files, 1 MiB for downloads: finer progress). Falls
// back to the stream's own chunks without BYOB support.
function chunksOf(stream, size = CHUNK) {
  let reader;
  try { reader = stream.getReader({ mode: 'byob' }); } catch { reader = null; }
  if (!reader) {
    const plain = stream.getReader();
    return async () => { const { value, done } = await plain.read(); return done ? null : value; };
  }
  let buf = new ArrayBuffer(size), ended = false;
  return async () => {
    let filled = 0;
    while (!ended && filled < buf.byteLength) {
      const r = await reader.read(new Uint8Array(buf, filled));
      if (r.value) buf = r.value.buffer;
      if (r.done) ended = true; else filled += r.value.byteLength;
    }
    return filled ? new Uint8Array(buf, 0, filled) : null;
  };
}

// A pending cache copy of a local File (commit() after it has loaded). With `started`, returned as
// soon as it starts (startWrite: the copy runs alongside the load; discard() stops it).
export async function saveFile(file, name, progress, started = false) {
  const args = [name, chunksOf(file.stream()), (n) => progress(n, file.size), { source: 'file: ' + file.name, lastModified: file.lastModified }];
  return started ? startWrite(...args, file.size) : write(...args);
}

const aborted = () => fail('aborted', 'the download was aborted');
const hostOf = (url) => { try { return new URL(url).host; } catch { return url; } };

// Why a fetch of `url` failed before any response: aborted, CORS (the server answers a no-cors
// request, so it is up but does not allow this origin), or no connection at all.
async function whyNoResponse(url, e, signal) {
  if (signal?.aborted) return aborted();
  const origin = self.location.origin;
  let target;
  try { target = new URL(url); } catch { return fail('download', `could not download ${url}: ${e.message || e}`); }
  if (target.origin !== origin && /^https?:$/.test(target.protocol)) {
    try {
      await fetch(url, { mode: 'no-cors', cache: 'no-store', signal });
      return fail('cors', `${target.origin} (or the server it redirects to) answered but does not allow this page (${origin}) to read ${url}: ` +
        `its server sends no Access-Control-Allow-Origin header for ${origin} (CORS). Download the file and open it ` +
        `here, or serve it with "Access-Control-Allow-Origin: ${origin}".`);
    } catch {
      if (signal?.aborted) return aborted();
    }
  }
  return fail('download', `could not connect to ${hostOf(url)} to download ${url}: the server is not running, ` +
    `the port is closed, or there is no network (${e.message || e})`);
}

// GET `url`, uncached; a ModelsError (download / cors / aborted) that names the URL when it fails.
async function download(url, signal) {
  let r;
  try {
    r = await fetch(url, { cache: 'no-store', signal });
  } catch (e) {
    throw await whyNoResponse(url, e, signal);
  }
  if (!r.ok) throw httpError(url, r.status, r.statusText);
  return r;
}

// A body reader whose failures say what happened (the connection dropped at byte n).
function guarded(next, url, total, signal, got) {
  return async () => {
    try {
      return await next();
    } catch (e) {
      if (signal?.aborted) throw aborted();
      throw fail('download', `the download of ${url} broke off after ${got()} of ${total || '?'} bytes ` +
        `(${e.message || e}): the connection dropped; try again`);
    }
  };
}

// Without OPFS (some private windows): the download as a Blob, not cached.
export async function fetchBlob(url, progress, signal) {
  const r = await download(url, signal);
  const total = Number(r.headers.get('content-length') || 0);
  const parts = [];
  let n = 0;
  const next = guarded(chunksOf(r.body, 1 << 20), url, total, signal, () => n);
  progress(0, total);
  for (let c = await next(); c; c = await next()) { parts.push(c.slice()); n += c.byteLength; progress(n, total); }
  if (total && n !== total) throw fail('download', `the download of ${url} broke off after ${n} of ${total} bytes: the connection dropped; try again`);
  return new Blob(parts);
}

async function head(url, signal) {
  try {
    const r = await fetch(url, { method: 'HEAD', cache: 'no-store', signal });
    if (!r.ok) return { status: r.status };
    return { status: r.status, size: Number(r.headers.get('content-length') || -1), lastModified: r.headers.get('last-modified') };
  } catch (e) {
    if (signal?.aborted) throw aborted();
    return { offline: true, error: String(e) };
  }
}

// ------------------------------------------------------------------ one download per name, across tabs

const LOCK = 'bitweb-model:';
const channel = typeof BroadcastChannel === 'function' ? new BroadcastChannel('bitweb-downloads') : null;

// Names whose lock is held now (a download or a commit in some tab of this origin).
async function lockedNames() {
  if (!navigator.locks?.query) return new Set();
  const q = await navigator.locks.query();
  return new Set([...(q.held || []), ...(q.pending || [])].map((l) => l.name).filter((n) => n?.startsWith(LOCK))
    .map((n) => n.slice(LOCK.length)));
}

// Take the lock of `name` (waiting while another tab holds it: onWait() is told, and hears that
// tab's progress); resolves with release().
async function acquire(name, signal, onWait) {
  if (!navigator.locks?.request) return () => {};
  let release = null;
  const take = (options) => new Promise((resolve, reject) => {
    navigator.locks.request(LOCK + name, options, (lock) => {
      if (!lock) { resolve(false); return undefined; }
      return new Promise((r) => { release = r; resolve(true); });
    }).catch((e) => reject(signal?.aborted ? fail('aborted', 'the load was aborted while it waited for another tab') : e));
  });
  if (await take({ ifAvailable: true })) return release;
  const stop = onWait?.();
  try {
    await take(signal ? { signal } : {});
  } finally {
    stop?.();
  }
  return release;
}

// While another tab downloads `name`: its progress, as ours.
function hearOthers(name, progress) {
  progress(0, 0, { label: `Waiting for another tab that is downloading ${name}` });
  if (!channel) return () => {};
  const on = ({ data }) => {
    if (data?.name === name) progress(data.done, data.total, { label: `Another tab is downloading ${name}`, ...data.info });
  };
  channel.addEventListener('message', on);
  return () => channel.removeEventListener('message', on);
}
const shared = (name, progress) => (done, total, info) => {
  progress(done, total, info);
  channel?.postMessage({ name, done, total, info: { bytesPerSecond: info?.bytesPerSecond, etaSeconds: info?.etaSeconds } });
};

async function freeBytes() {
  if (!navigator.storage?.estimate) return null;
  const { usage, quota } = await navigator.storage.estimate();
  return quota == null ? null : Math.max(0, quota - (usage || 0));
}

// A download job of `url` into the part of `name` (web/download.mjs start).
async function startDownload(url, name, progress, signal, opts) {
  return downloads.start(await dir(), name, url, {
    ...opts, signal, progress: shared(name, progress), Growing: GrowingFile, free: freeBytes, whyNoResponse,
  });
}

// Put a finished download in the index as `name` (replacing an older copy) and drop its record.
async function index(job, name, url) {
  const d = await dir();
  const rec = job.record;
  await putEntry(d, name, { size: rec.size, file: job.fname, source: url, lastModified: rec.lastModified,
    etag: rec.etag, sha256: rec.sha256 }, () => d.removeEntry(job.fname + '.json').catch(() => {}));
}

// Answers of a host that refuses the file (sign-in, gone): a cached copy of it is still used.
const REFUSED = [401, 403, 404, 410];

// The bytes of `url`: {file, cached: true} when the cached copy is still current (or the network
// cannot be reached, or the host now refuses the file), or it is the file `opts.sha256` names, else {file, pending}: a download (resumed when a part of it is there) that the
// caller commits once the model has loaded (it enters the index) or discards (error: why the load
// failed; a download that failed or was stopped keeps its part for the next attempt, a file that
// does not load is deleted). `file` is a GrowingFile the load reads while the download goes on
// (with `streaming` and a known size; else it is complete); `pending.written` settles when it is
// all in the cache and verified (opts.sha256), its failure is the download's error.
// opts: {sha256, size, stallMs, retries, retryDelayMs} (web/download.mjs); reads: open()'s, for a cached copy.
export async function fromUrl(url, name, progress, signal, streaming = false, opts = {}, reads = null) {
  const release = await acquire(name, signal, () => hearOthers(name, progress));
  let job = null;
  try {
    const e = await entry(name);
    const verified = e && opts.sha256 && e.sha256 === opts.sha256.toLowerCase();
    if (verified || (e && e.source === url)) {
      const h = verified ? null : await head(url, signal);
      const same = verified || h.offline || REFUSED.includes(h.status)
        || (h.status === 200 && h.size === e.size && (h.lastModified || null) === (e.lastModified || null));
      if (same) {
        const file = await open(name, reads);
        release();
        return { file, cached: true };
      }
    }
    job = await startDownload(url, name, progress, signal, opts);
    if (!streaming || job.file.size < 0) {
      const r = await job.written;
      job.file.size = r.size;
    }
  } catch (err) {
    job?.file.close();
    release();
    throw err;
  }
  let settled = false;
  const pending = {
    file: job.file, written: job.written.then((r) => { job.file.size = r.size; return r; }),
    async commit() {
      const r = await job.written;
      job.file.close();
      await index(job, name, url);
      settled = true;
      release();
      return r;
    },
    async discard(why) {
      if (settled) return;
      settled = true;
      job.stop(why);
      const failure = await job.written.then(() => null, (err) => err);
      job.file.close();
      // a download that failed or was stopped keeps its part; a file that did not load goes
      const reason = failure && failure.kind !== 'aborted' ? failure : why;     // (our own stop says aborted)
      const keep = ['download', 'aborted', 'cors', 'storage'].includes(reason?.kind) && !failure?.drop;
      if (!keep) await downloads.dropPart(await dir(), job.fname);
      release();
    },
  };
  pending.written.catch(() => {});
  return { file: job.file, cached: false, pending };
}

// Download `url` into the cache as `name` without loading it: resolves when it is all there and
// verified (a complete download: the next load of `url` uses it, and indexes it once it loads);
// {name, size, cached: true} when the cached copy of `url` is there already.
export async function fetchToCache(url, name, progress, signal, opts = {}) {
  const release = await acquire(name, signal, () => hearOthers(name, progress));
  try {
    const e = await entry(name);
    if (e && (e.source === url || (opts.sha256 && e.sha256 === opts.sha256.toLowerCase()))) return { name, size: e.size, cached: true };
    const job = await startDownload(url, name, progress, signal, opts);
    try {
      const r = await job.written;
      return { name, size: r.size, cached: false, resumedFrom: r.resumedFrom, retries: r.attempts, notes: r.notes, sha256: r.sha256 };
    } finally {
      job.file.close();
    }
  } finally {
    release();
  }
}
