// Saved KV caches (the engine outlives the page): after a reply the worker saves the KV cache of
// the conversation's tokens to OPFS, and a later request whose prompt starts with saved tokens
// restores those positions instead of computing them (bitweb.engine export_kv / restore_kv, called
// from bitweb.webapp through the hooks `find` and `save`). Only the async OPFS API is used
// (getFileHandle, createWritable, getFile): a SharedWorker has no sync access handles.
//
// Directory "bitweb-kv" of the origin's OPFS: one file per saved conversation, "<key>.kv", where key
// is the SHA-256 of [model, kv, n_ctx, n_layer, ids]: model = the model file's SHA-256, kv = the
// cache's value type as the engine stores it, n_ctx = the context size, ids = the token ids whose
// K/V rows it holds. A file: "BWKV", u32 version, u32 header length, the header (JSON: those
// facts, rows, bytes, sha256 of the data), the data (export_kv's block). Before use the header must
// hash to its file's name and the data to its checksum: a file that fails (corrupt, truncated,
// stale) is deleted, never used. "lru.json": file -> when it was last saved or used; files are
// evicted least recently used first while the directory is over the bound. A save replaces the
// saved prefixes of its own tokens (the conversation's shorter ancestors). "index.json": file ->
// its header's facts, so that a lookup reads one file, not every header; it is checked before use
// (its names are the directory's, each entry's facts hash to its name) and rebuilt from the
// headers when it fails (missing, corrupt, or stale: another worker of the origin saved or deleted).
const DIR = 'bitweb-kv';
const MAGIC = 0x564b5742;            // "BWKV" little-endian
const VERSION = 1;
const LRU = 'lru.json';
const INDEX = 'index.json';
export const DEFAULT_BOUND = 256 << 20;

const engines = new Map();           // engine id -> {model, kv, n_ctx, n_layer, bound}
let chain = Promise.resolve();       // one store operation at a time (in this worker)
const serial = (fn) => { const run = chain.then(fn, fn); chain = run.catch(() => {}); return run; };

export const available = () => typeof navigator !== 'undefined' && !!navigator.storage?.getDirectory;

async function dir() {
  return (await navigator.storage.getDirectory()).getDirectoryHandle(DIR, { create: true });
}
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const sha256 = async (bytes) => hex(await crypto.subtle.digest('SHA-256', bytes));
const keyOf = (h) => sha256(new TextEncoder().encode(JSON.stringify([h.model, h.kv, h.n_ctx, h.n_layer, h.ids])));
const same = (h, f) => h.model === f.model && h.kv === f.kv && h.n_ctx === f.n_ctx && h.n_layer === f.n_layer;
function commonPrefix(a, b) {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** An engine whose conversations may be saved: facts {model (a function giving a promise of the file's
 *  SHA-256, or of null: nothing is saved), kv, n_ctx, n_layer}, bound (bytes). */
export function register(eid, facts) { engines.set(Number(eid), facts); }
async function factsOf(eid) {
  const f = engines.get(Number(eid));
  const model = f && available() ? await f.model() : null;
  return model ? { ...f, model } : null;
}
export function unregister(eid) { engines.delete(Number(eid)); }

async function remove(d, name) {
  await d.removeEntry(name).catch(() => {});
}
async function readLru(d) {
  try {
    const v = JSON.parse(await (await (await d.getFileHandle(LRU)).getFile()).text());
    return v && typeof v === 'object' ? v : {};
  } catch { return {}; }
}
async function writeLru(d, lru) {
  const w = await (await d.getFileHandle(LRU, { create: true })).createWritable();
  await w.write(JSON.stringify(lru));
  await w.close();
}

// The header of a saved file, checked against its name; null (and the file deleted) when it fails.
async function header(d, name) {
  try {
    const file = await (await d.getFileHandle(name)).getFile();
    const head = new DataView(await file.slice(0, 12).arrayBuffer());
    if (head.byteLength < 12 || head.getUint32(0, true) !== MAGIC || head.getUint32(4, true) !== VERSION) throw new Error('magic');
    const len = head.getUint32(8, true);
    const h = JSON.parse(new TextDecoder().decode(await file.slice(12, 12 + len).arrayBuffer()));
    if (!Array.isArray(h.ids) || !Number.isInteger(h.rows) || h.rows !== h.ids.length || !Number.isInteger(h.bytes)
      || !Number.isInteger(h.prompt)
      || file.size !== 12 + len + h.bytes || `${await keyOf(h)}.kv` !== name) throw new Error('stale');
    return { h, file, at: 12 + len };
  } catch {
    await remove(d, name);
    return null;
  }
}

// The index's entry of a header: what a lookup and a save compare.
const facts = (h) => ({ model: h.model, kv: h.kv, n_ctx: h.n_ctx, n_layer: h.n_layer, ids: h.ids, prompt: h.prompt });
async function readIndex(d) {
  const names = await entries(d);
  try {
    const idx = JSON.parse(await (await (await d.getFileHandle(INDEX)).getFile()).text());
    const ok = async (n) => Array.isArray(idx[n]?.ids) && Number.isInteger(idx[n].prompt) && `${await keyOf(idx[n])}.kv` === n;
    if (idx && typeof idx === 'object' && Object.keys(idx).length === names.length
      && (await Promise.all(names.map((n) => Object.hasOwn(idx, n) && ok(n)))).every(Boolean)) return idx;
  } catch { /* missing or corrupt: rebuilt */ }
  const idx = {};
  for (const name of names) {
    const e = await header(d, name);
    if (e) idx[name] = facts(e.h);
  }
  await writeIndex(d, idx);
  return idx;
}
async function writeIndex(d, idx) {
  const w = await (await d.getFileHandle(INDEX, { create: true })).createWritable();
  await w.write(JSON.stringify(idx));
  await w.close();
}

async function entries(d) {
  const out = [];
  for await (const [name, handle] of d.entries()) if (handle.kind === 'file' && name.endsWith('.kv')) out.push(name);
  return out;
}

/** The longest saved prefix of `ids` (the prompt less its last token) for engine eid, longer than
 *  `have` (the rows the engine holds already): {n, rows, name, data: Uint8Array} or undefined. */
export async function find(eid, idsJson, have) {
  const f = await factsOf(eid);             // (outside serial: the hash may wait on remember)
  if (!f) return undefined;
  return serial(async () => {
    const ids = JSON.parse(idsJson);
    const d = await dir();
    const idx = await readIndex(d);
    const found = [];
    for (const [name, h] of Object.entries(idx)) {
      const n = same(h, f) ? commonPrefix(h.ids, ids) : 0;
      if (n > have) found.push({ n, name });
    }
    found.sort((a, b) => b.n - a.n);
    for (const c of found) {
      const e = await header(d, c.name);          // (its name is its facts' hash: the index's entry)
      const data = e && new Uint8Array(await e.file.slice(e.at).arrayBuffer());
      if (!e || data.byteLength !== e.h.bytes || (await sha256(data)) !== e.h.sha256) {
        await remove(d, c.name);                   // corrupt: deleted, never used
        delete idx[c.name];
        await writeIndex(d, idx);
        continue;
      }
      const lru = await readLru(d);
      lru[c.name] = Date.now();
      await writeLru(d, lru);
      return { n: c.n, rows: e.h.rows, name: c.name, data };
    }
    return undefined;
  });
}

/** A saved file that the engine refused (bitweb.webapp): deleted. */
export function drop(name) {
  return serial(async () => {
    const d = await dir();
    const idx = await readIndex(d);
    await remove(d, name);
    delete idx[name];
    await writeIndex(d, idx);
  });
}

/** Save the KV cache `data` (export_kv's block) of the tokens `idsJson` for engine eid, after a reply
 *  to the first `prompt` of them; its saved ancestors go (the saved caches whose prompt these tokens
 *  continue: earlier turns of this conversation, or a reply it regenerates), then the least recently used while over the bound. Resolves the file's name, or
 *  null when nothing was saved (no facts, or the block alone passes the bound). */
export async function save(eid, idsJson, data, prompt) {
  const f = await factsOf(eid);
  if (!f) return null;
  return serial(async () => {
    const ids = JSON.parse(idsJson);
    const h = { model: f.model, kv: f.kv, n_ctx: f.n_ctx, n_layer: f.n_layer, rows: ids.length, ids, prompt: Math.min(prompt, ids.length),
      bytes: data.byteLength, sha256: await sha256(data) };
    const json = new TextEncoder().encode(JSON.stringify(h));
    const head = new DataView(new ArrayBuffer(12));
    head.setUint32(0, MAGIC, true); head.setUint32(4, VERSION, true); head.setUint32(8, json.byteLength, true);
    if (12 + json.byteLength + data.byteLength > f.bound) return null;
    const d = await dir();
    const idx = await readIndex(d);                // (before the new file: checked against the directory)
    const name = `${await keyOf(h)}.kv`;
    const w = await (await d.getFileHandle(name, { create: true })).createWritable();
    try {
      await w.write(head.buffer); await w.write(json); await w.write(data);
      await w.close();
    } catch (e) {
      await w.abort().catch(() => {});
      await remove(d, name);
      throw e;
    }
    const lru = await readLru(d);
    // its ancestors: their prompt is a prefix of these tokens, but for its last token, which the
    // conversation re-encoded may merge with the reply's first ("Assistant: " + "The" -> " The")
    for (const [other, o] of Object.entries(idx)) {
      if (other !== name && same(o, f) && commonPrefix(o.ids, ids) >= o.prompt - 1) {
        await remove(d, other);
        delete lru[other];
      }
    }
    lru[name] = Date.now();
    await evict(d, lru, f.bound);
    const left = {};                               // (a file it does not know: rebuilt at the next read)
    for (const n of await entries(d)) { const x = n === name ? facts(h) : idx[n]; if (x) left[n] = x; }
    await writeIndex(d, left);
    await writeLru(d, lru);
    return name;
  });
}

async function evict(d, lru, bound) {
  const sizes = [];
  for (const name of await entries(d)) {
    try { sizes.push([name, (await (await d.getFileHandle(name)).getFile()).size]); } catch { /* gone */ }
  }
  let total = sizes.reduce((s, [, n]) => s + n, 0);
  sizes.sort((a, b) => (lru[a[0]] ?? 0) - (lru[b[0]] ?? 0));
  for (const [name, n] of sizes) {
    if (total <= bound) break;
    await remove(d, name);
    delete lru[name];
    total -= n;
  }
  for (const name of Object.keys(lru)) if (!sizes.some(([s]) => s === name)) delete lru[name];
}

/** What is saved: {bytes, entries, bound: the default bound} (the app's storage line). */
export async function usage() {
  if (!available()) return { bytes: 0, entries: 0, bound: DEFAULT_BOUND };
  const d = await dir();
  let bytes = 0, n = 0;
  for (const name of await entries(d)) {
    try { bytes += (await (await d.getFileHandle(name)).getFile()).size; n++; } catch { /* gone */ }
  }
  return { bytes, entries: n, bound: DEFAULT_BOUND };
}

/** Delete every saved KV cache. */
export async function clear() {
  if (!available()) return;
  await (await navigator.storage.getDirectory()).removeEntry(DIR, { recursive: true }).catch(() => {});
}

// The SHA-256 of a model file (a models.mjs GrowingFile, a File or Blob), read in chunks.
let hashing = null;
export async function hashFile(file, chunk = 1 << 20) {
  hashing ??= import('../node_modules/hash-wasm/dist/index.esm.min.js');
  const h = await (await hashing).createSHA256();
  h.init();
  for (let at = 0; at < file.size; at += chunk) {
    const n = Math.min(chunk, file.size - at);
    h.update(file.readSync ? file.readSync(at, n) : new Uint8Array(await file.slice(at, at + n).arrayBuffer()));
  }
  return h.digest('hex');
}

// Model hashes computed before, by a memo of the file (its cache entry's name, size and time saved).
const MODELS = 'models.json';
export async function recall(memo) {
  try {
    return JSON.parse(await (await (await (await dir()).getFileHandle(MODELS)).getFile()).text())[memo] || null;
  } catch { return null; }
}
export function remember(memo, hash) {
  return serial(async () => {
    const d = await dir();
    let v = {};
    try { v = JSON.parse(await (await (await d.getFileHandle(MODELS)).getFile()).text()) || {}; } catch { /* none yet */ }
    v[memo] = hash;
    const w = await (await d.getFileHandle(MODELS, { create: true })).createWritable();
    await w.write(JSON.stringify(v));
    await w.close();
  });
}
