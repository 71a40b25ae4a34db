// Where model bytes come from, and the model cache in OPFS (runs in the worker).
//
// The cache is the origin private file system directory "models/": one file per model plus
// "index.json" ({name: {size, source, saved, lastModified}}), which is written only after a
// file is complete, so a half-written download is never offered.
//
// Every copy streams: a fetch body or a File is read into one reused CHUNK-byte buffer and
// written with a FileSystemSyncAccessHandle, so one chunk is held in memory at a time. Loading then reads the cached File in chunks
// (web/gpu.mjs uploadBlob) straight into queue.writeBuffer.

export const DEFAULT_URL = new URL('./models/bitweb-chat-i2_s.gguf', import.meta.url).href;
export const CHUNK = 8 << 20;

export class NetworkError extends Error {}
export class StorageError extends Error {}

export function nameFrom(text) {
  const base = String(text).split(/[?#]/)[0].split('/').filter(Boolean).pop() || 'model.gguf';
  let name = decodeURIComponent(base).replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^\.+/, '').slice(0, 120);
  if (!name || name === 'index.json') name = 'model';
  return name.endsWith('.gguf') ? name : name + '.gguf';
}

async function dir() {
  if (!navigator.storage || !navigator.storage.getDirectory) {
    throw new StorageError('this browser has no origin private file system (OPFS): models cannot be cached');
  }
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

async function writeIndex(d, idx) {
  const h = await d.getFileHandle('index.json', { create: true });
  const w = await h.createWritable();
  await w.write(JSON.stringify(idx));
  await w.close();
}

// {models: [{name, size, source, saved}], usage, quota}. Drops entries whose file is gone
// or has the wrong size, and files that are not in the index (interrupted copies).
export async function list() {
  const d = await dir();
  const idx = await readIndex(d);
  const models = [];
  let changed = false;
  for (const [name, e] of Object.entries(idx)) {
    let size = -1;
    try { size = (await (await d.getFileHandle(name)).getFile()).size; } catch { /* gone */ }
    if (size !== e.size) { delete idx[name]; changed = true; continue; }
    models.push({ name, ...e });
  }
  for await (const name of d.keys()) {
    if (name !== 'index.json' && !(name in idx)) await d.removeEntry(name).catch(() => {});
  }
  if (changed) await writeIndex(d, idx);
  models.sort((a, b) => b.saved - a.saved);
  const est = navigator.storage.estimate ? await navigator.storage.estimate() : {};
  return { models, usage: est.usage ?? null, quota: est.quota ?? null };
}

export async function open(name) {
  const d = await dir();
  const idx = await readIndex(d);
  if (!(name in idx)) throw new StorageError(`"${name}" is not in the model cache`);
  return (await d.getFileHandle(name)).getFile();
}

export async function remove(name) {
  const d = await dir();
  const idx = await readIndex(d);
  delete idx[name];
  await writeIndex(d, idx);
  await d.removeEntry(name).catch(() => {});
}

// Write chunks from `next()` (async, returns Uint8Array or null at the end) into cache file `name`.
async function write(name, next, onBytes, meta) {
  const d = await dir();
  const idx = await readIndex(d);
  if (name in idx) { delete idx[name]; await writeIndex(d, idx); }
  const fh = await d.getFileHandle(name, { create: true });
  const h = await fh.createSyncAccessHandle();
  let pos = 0;
  try {
    h.truncate(0);
    for (let chunk = await next(); chunk; chunk = await next()) {
      let off = 0;
      while (off < chunk.byteLength) off += h.write(chunk.subarray(off), { at: pos + off });
      pos += chunk.byteLength;
      onBytes(pos);
    }
    h.flush();
  } catch (e) {
    h.close();
    await d.removeEntry(name).catch(() => {});
    if (e.name === 'QuotaExceededError') {
      throw new StorageError(`not enough browser storage to cache "${name}" (${pos} bytes written): free space or delete cached models`);
    }
    throw e;
  }
  h.close();
  idx[name] = { size: pos, saved: Date.now(), ...meta };
  await writeIndex(d, idx);
  return fh.getFile();
}

// Chunks of a byte stream, each read into the same reused buffer (BYOB reader): copying a file
// of any size holds `size` bytes (CHUNK for files, 1 MiB for downloads: finer progress). Falls back to the stream's own chunks without BYOB support.
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

// Copy a local File into the cache.
export async function saveFile(file, name, progress) {
  return write(name, chunksOf(file.stream()), (n) => progress(n, file.size), { source: 'file: ' + file.name, lastModified: file.lastModified });
}

// GET `url`, uncached; a NetworkError that names the URL when it fails or is not 200.
async function download(url) {
  let r;
  try {
    r = await fetch(url, { cache: 'no-store' });
  } catch (e) {
    throw new NetworkError(`could not download ${url}: ${e.message || e}`);
  }
  if (!r.ok) throw new NetworkError(`could not download ${url}: HTTP ${r.status} ${r.statusText}`);
  return r;
}

// Without OPFS (some private windows): the download as a Blob, not cached (the browser decides
// whether it stays in memory or goes to disk).
export async function fetchBlob(url, progress) {
  const r = await download(url);
  const total = Number(r.headers.get('content-length') || 0);
  progress(0, total);
  const blob = await r.blob();
  progress(blob.size, blob.size);
  return blob;
}

export function hasCache() {
  return !!(navigator.storage && navigator.storage.getDirectory);
}

async function head(url) {
  try {
    const r = await fetch(url, { method: 'HEAD', cache: 'no-store' });
    if (!r.ok) return { status: r.status };
    return { status: r.status, size: Number(r.headers.get('content-length') || -1), lastModified: r.headers.get('last-modified') };
  } catch (e) {
    return { offline: true, error: String(e) };
  }
}

// A File for `url`: the cached copy when it is still current (or when the network is not
// reachable), otherwise a fresh download streamed into the cache.
export async function fromUrl(url, name, progress) {
  const d = await dir();
  const entry = (await readIndex(d))[name];
  const h = await head(url);
  if (entry && entry.source === url) {
    const same = h.offline || (h.status === 200 && h.size === entry.size && (h.lastModified || null) === (entry.lastModified || null));
    if (same) return { file: await open(name), cached: true };
  }
  if (h.offline && !entry) throw new NetworkError(`could not reach ${url} (${h.error}) and it is not in the cache`);
  const r = await download(url);
  const total = Number(r.headers.get('content-length') || 0);
  let last = 0;
  const file = await write(name, chunksOf(r.body, 1 << 20), (n) => {
    const now = performance.now();
    if (now - last > 50 || n === total) { last = now; progress(n, total); }
  }, { source: url, lastModified: r.headers.get('last-modified') });
  if (total && file.size !== total) {
    await remove(name);
    throw new NetworkError(`download of ${url} stopped at ${file.size} of ${total} bytes`);
  }
  progress(file.size, file.size);
  return { file, cached: false };
}
