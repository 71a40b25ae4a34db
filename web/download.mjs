// Resumable, verified downloads into the model cache (runs in the library's worker; web/models.mjs
// owns the cache directory and calls this for URLs).
//
// A download writes "NAME.<stamp>.part" in the cache directory with a record beside it,
// "NAME.<stamp>.part.json": {url, name, size, etag, lastModified, sha256, offset, hashState,
// complete}. `offset` bytes of the part are on disk (flushed) and `hashState` is the SHA-256 state
// after them (hash-wasm's save()), so a download that fails, is stopped, or dies with its page keeps
// its bytes: the next attempt (an automatic retry, Resume, or the next visit) truncates the part to
// `offset` and asks for the rest with `Range: bytes=offset-` and `If-Range: <etag or date>`. A
// server that answers 206 from `offset` continues the file; one that answers 200 sends the whole
// file, because it changed (restart, said as a note) or has no ranges (restart, said as a note).
// Failures worth retrying (connection dropped, no byte for stallMs of this worker's own time:
// stallWatch, HTTP 5xx / 408 / 429) are retried `retries` times, waiting retryDelayMs, 2x, 4x ...
// between tries; others fail at once. The record is written through one access handle held while
// the download runs (opening one per record, every 2 MiB, sometimes never got an answer from the
// browser under load: the download then hung in silence), so a record write never waits: the byte
// loop only ever waits on the network.
// With `sha256` the bytes are hashed as they arrive (in this worker, resumable across visits) and a
// mismatch deletes the part with a clear error. Only one download of a name runs at a time, across
// tabs: web/models.mjs holds the name's Web Lock around it.
export const CHECKPOINT = 2 << 20;        // bytes between records (at most what a page that dies loses)
export const DEFAULTS = Object.freeze({ stallMs: 30_000, retries: 3, retryDelayMs: 1000 });

// Errors with the kind the library reports (web/bitweb.mjs); web/models.mjs exports this class.
export class ModelsError extends Error {
  constructor(kind, message, extra = {}) { super(message); this.kind = kind; Object.assign(this, extra); }
}
const fail = (kind, message, extra) => new ModelsError(kind, message, extra);
class Retryable extends Error {}

let hashing = null;                       // hash-wasm, loaded the first time a download is verified
const sha256Hasher = async () => {
  hashing ??= import('../node_modules/hash-wasm/dist/index.esm.min.js');
  return (await hashing).createSHA256();
};
const hex = (s) => String(s || '').toLowerCase();
const b64 = (u8) => { let s = ''; for (const b of u8) s += String.fromCharCode(b); return btoa(s); };
const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
const mb = (n) => `${(n / 2 ** 20).toFixed(1)} MiB`;

// Calls onStall() once `ms` of this worker's own time have passed without kick(): time the thread
// spent blocked (Python parsing a header, a busy machine: a tick that came late) is not counted, so a
// slow page never reads as a stalled network. stop() ends it.
export function stallWatch(ms, onStall) {
  const every = Math.max(10, Math.min(1000, ms / 4));
  let quiet = 0, last = performance.now();
  const t = setInterval(() => {
    const now = performance.now();
    quiet += Math.min(now - last, 2 * every);
    last = now;
    if (quiet >= ms) { clearInterval(t); onStall(); }
  }, every);
  return { kick() { quiet = 0; last = performance.now(); }, stop() { clearInterval(t); } };
}

// `p`, or a storage error once `ms` of this worker's time (stallWatch) passed first.
function bounded(p, ms, what) {
  let watch;
  const late = new Promise((_, reject) => { watch = stallWatch(ms, () => reject(fail('storage', `${what}: the browser did not answer for ${ms / 1000} s`))); });
  return Promise.race([p, late]).finally(() => watch.stop());
}

// The record beside a part, one line of JSON: read (null when missing or unreadable) and written in
// place through its sync access handle, new line first, then cut to its length (a record is read up
// to its first newline: one written half way reads as unreadable, the part then starts again).
export async function readRecord(dir, fname) {
  try {
    const text = await (await (await dir.getFileHandle(fname + '.json')).getFile()).text();
    return JSON.parse(text.slice(0, text.indexOf('\n')));
  } catch {
    return null;
  }
}
function putRecord(h, rec) {
  const bytes = new TextEncoder().encode(JSON.stringify(rec) + '\n');
  let off = 0;
  while (off < bytes.length) off += h.write(bytes.subarray(off), { at: off });
  h.truncate(bytes.length);
  h.flush();
}
export async function dropPart(dir, fname) {
  await dir.removeEntry(fname).catch(() => {});
  await dir.removeEntry(fname + '.json').catch(() => {});
}

// The part of `name` (its record), or null. Parts of another URL are deleted.
export async function findPart(dir, name, url) {
  for await (const f of dir.keys()) {
    if (!f.startsWith(name + '.') || !f.endsWith('.part.json')) continue;
    const fname = f.slice(0, -5);
    const rec = await readRecord(dir, fname);
    if (!rec || rec.name !== name) continue;
    if (url && rec.url !== url) { await dropPart(dir, fname); continue; }
    return rec;
  }
  return null;
}

/**
 * Download `url` into the part of `name` (resuming it when there is one). Returns once the server
 * has answered (or the part is complete already): {file: GrowingFile over the part, record,
 * written: Promise (settles when the whole file is on disk and verified; its failure keeps the part
 * unless the file was wrong), stop(error)}.
 * opts: {sha256, size, signal, progress(done, total, info), stallMs, retries, retryDelayMs,
 *        Growing (the GrowingFile class), free: async () => bytes the cache may still take or null}
 */
export async function start(dir, name, url, opts) {
  const o = { ...DEFAULTS, ...Object.fromEntries(Object.entries(opts).filter(([, v]) => v != null)) };
  const { signal, progress = () => {} } = o;
  const notes = [];
  const say = (note) => { notes.push(note); progress(have, size, { note }); };
  let rec = await findPart(dir, name, url);
  if (rec && o.sha256 && rec.sha256 && hex(rec.sha256) !== hex(o.sha256)) { await dropPart(dir, rec.file); rec = null; }
  const fname = rec?.file || `${name}.${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}.part`;
  rec ??= { url, name, file: fname, size: o.size ?? null, etag: null, lastModified: null, sha256: o.sha256 || null,
    offset: 0, hashState: null, complete: false };
  if (o.sha256) rec.sha256 = hex(o.sha256);
  let h, recH;                              // the part's and the record's access handles, held until it ends
  try {
    const open = async (f) => (await dir.getFileHandle(f, { create: true })).createSyncAccessHandle();
    recH = await bounded(open(fname + '.json'), o.stallMs, `opening the download record of ${name}`);
    putRecord(recH, rec);                   // (from here on the part is a download of its own, kept)
    h = await bounded(open(fname), o.stallMs, `opening the download of ${name}`);
  } catch (e) {
    recH?.close();
    if (e instanceof ModelsError) throw e;
    throw fail('storage', `the cached part of ${name} is in use (${e.name}): is another tab writing it? ${e.message}`);
  }
  let have = Math.min(rec.offset, h.getSize());
  h.truncate(have);                         // (bytes past the last record are not known to be right)
  let size = rec.size;
  const resumedFrom = have;
  // the SHA-256 of the bytes so far: the saved state, or (no state) the part read again
  let hasher = null;
  if (rec.sha256) {
    hasher = await sha256Hasher();
    hasher.init();
    if (have && rec.hashState && rec.offset === have) hasher.load(unb64(rec.hashState));
    else if (have) {
      const buf = new Uint8Array(1 << 20);
      for (let at = 0; at < have;) { const n = h.read(buf.subarray(0, Math.min(buf.length, have - at)), { at }); hasher.update(buf.subarray(0, n)); at += n; }
    }
  }
  // The record of the bytes on disk now (synchronous: its handle is held).
  let recClosed = false;
  const checkpoint = () => {
    if (recClosed) return;
    h.flush();
    rec.offset = have;
    if (hasher) rec.hashState = b64(hasher.save());
    putRecord(recH, rec);
  };
  const closeRecord = () => { if (!recClosed) { recClosed = true; recH.close(); } };
  const restart = async (why) => {
    h.truncate(0);
    have = 0;
    hasher?.init();
    say(why);
  };
  const ensureRoom = async () => {
    if (size == null || !o.free) return;
    const free = await o.free();
    if (free != null && size - have > free) {
      throw fail('storage', `not enough browser storage to download ${name}: it needs ${mb(size - have)} more and ` +
        `${mb(free)} is free for this site; delete cached models or allow the site more storage. Nothing was downloaded.`,
        { need: size - have, free });
    }
  };

  let stopped = null;                      // the error stop() was given
  let live = null;                         // the AbortController of the request in flight
  const waits = [];                        // cancels of the retry waits in progress
  let growing = null;                      // the GrowingFile the caller reads (once the server answered)
  let attempts = 0, lastError = null;
  let t0 = 0, got0 = 0;                    // this session's first byte and the bytes before it (speed, time left)
  const report = () => {
    const info = {};
    const s = (performance.now() - t0) / 1000;
    if (t0 && s > 0.2 && have > got0 && size) {
      info.bytesPerSecond = Math.round((have - got0) / s);
      info.etaSeconds = Math.max(0, (size - have) / info.bytesPerSecond);
    }
    progress(have, size || 0, info);
  };
  const halted = () => stopped || (signal?.aborted ? fail('aborted', 'the download was aborted') : null);
  const startOver = async (why) => {
    if (growing) {           // the load read bytes of the old file: it cannot go on with the new one
      growing.ended(have, fail('download', `${why} while it was loading: load it again`));
    }
    await restart(why);
  };

  // One request from `have` on: {r, ctl} whose body continues the part, or {done: true}.
  async function request() {
    const ctl = new AbortController();
    live = ctl;
    const both = signal ? AbortSignal.any([signal, ctl.signal]) : ctl.signal;
    const headers = {};
    if (have > 0) {
      headers.Range = `bytes=${have}-`;
      if (rec.etag || rec.lastModified) headers['If-Range'] = rec.etag || rec.lastModified;
    }
    const watch = stallWatch(o.stallMs, () => ctl.abort(new Retryable(`no answer for ${o.stallMs / 1000} s`)));
    let r;
    try {
      r = await fetch(url, { cache: 'no-store', signal: both, headers });
    } catch (e) {
      if (halted()) throw halted();
      if (ctl.signal.aborted) throw ctl.signal.reason;
      if (attempts > 0 || have > 0) throw new Retryable(`the connection failed (${e.message || e})`);
      throw await o.whyNoResponse(url, e, signal);          // never connected: no retry (CORS, no server)
    } finally {
      watch.stop();
    }
    if (r.status === 416 && size != null && have === size) return { done: true };
    if (r.status >= 500 || r.status === 408 || r.status === 429) throw new Retryable(`HTTP ${r.status} ${r.statusText}`.trim());
    if (!r.ok) throw fail('download', `could not download ${url}: HTTP ${r.status} ${r.statusText}`.trim());
    const etag = r.headers.get('etag'), modified = r.headers.get('last-modified');
    const encoded = !!r.headers.get('content-encoding');
    const length = Number(r.headers.get('content-length') || -1);
    if (r.status === 206) {
      const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(r.headers.get('content-range') || '');
      const total = m && m[3] !== '*' ? Number(m[3]) : null;
      const changed = (etag && rec.etag && etag !== rec.etag) || (total != null && size != null && total !== size);
      if (!m || Number(m[1]) !== have || changed) {
        ctl.abort();
        rec.etag = null; rec.lastModified = null; size = o.size ?? null;        // ask for the whole file, plainly
        await startOver(changed ? `${name} changed on the server: the download starts again from the beginning`
          : `the server sent another range (${r.headers.get('content-range')}): the download starts again from the beginning`);
        return request();
      }
      if (have > 0) say(`resuming ${name} at ${mb(have)} of ${mb(total ?? size)}`);
      size = total ?? size;
    } else {                                                      // 200: the whole file
      if (have > 0) {
        const changed = (etag && rec.etag && etag !== rec.etag) || (!rec.etag && modified && rec.lastModified && modified !== rec.lastModified);
        await startOver(changed ? `${name} changed on the server: the download starts again from the beginning`
          : `the server does not support resuming (it ignores Range requests): the download of ${name} starts again from the beginning`);
      }
      size = length >= 0 && !encoded ? length : (o.size ?? null);
    }
    rec.etag = etag || rec.etag;
    rec.lastModified = modified || rec.lastModified;
    rec.size = size;
    checkpoint();
    try {
      await ensureRoom();
    } catch (e) {
      ctl.abort();
      throw e;
    }
    return { r, ctl };
  }

  // Wait before the next try (checkpointed first); throws the last failure once the tries are spent.
  async function backoff() {
    checkpoint();
    if (attempts >= o.retries) throw lastError;
    const wait = Math.min(30_000, o.retryDelayMs * 2 ** attempts);
    attempts++;
    notes.push(`try ${attempts + 1}: ${lastError.message}`);
    progress(have, size || 0, { note: `${lastError.message}; trying again in ${(wait / 1000).toFixed(1)} s (try ${attempts + 1} of ${o.retries + 1})` });
    await new Promise((resolve, reject) => {
      const t = setTimeout(resolve, wait);
      const cancel = () => { clearTimeout(t); reject(halted() || fail('aborted', 'the download was aborted')); };
      if (halted()) cancel();
      signal?.addEventListener('abort', cancel, { once: true });
      waits.push(cancel);
    });
  }

  // A response to read from (retrying the tries worth retrying), or {done: true}.
  async function connect() {
    for (;;) {
      try {
        return await request();
      } catch (e) {
        if (!(e instanceof Retryable)) throw e;
        lastError = e;
      }
      await backoff();
    }
  }

  // The body of `r` into the part, from `have` on.
  // The only wait in this loop is the read, which stallWatch sees.
  async function body(r, ctl) {
    const reader = r.body.getReader();
    const watch = stallWatch(o.stallMs, () => ctl.abort(new Retryable(`no data for ${o.stallMs / 1000} s`)));
    let since = have;
    t0 = 0; got0 = have;
    try {
      for (;;) {
        let v;
        try {
          v = await reader.read();
        } catch (e) {
          if (halted()) throw halted();
          if (ctl.signal.aborted && ctl.signal.reason instanceof Retryable) throw ctl.signal.reason;
          throw new Retryable(`the connection dropped (${e.message || e})`);
        }
        if (v.done) break;
        watch.kick();
        const chunk = v.value;
        if (size != null && have + chunk.byteLength > size) throw fail('download', `the server sent more than the ${size} bytes it announced for ${url}`);
        let off = 0;
        while (off < chunk.byteLength) off += h.write(chunk.subarray(off), { at: have + off });
        hasher?.update(chunk);
        have += chunk.byteLength;
        t0 ||= performance.now();
        growing.grew(have);
        report();
        if (have - since >= CHECKPOINT) { since = have; checkpoint(); }
      }
    } finally {
      watch.stop();
      reader.releaseLock?.();
    }
    if (size != null && have < size) throw new Retryable(`the connection closed after ${have} of ${size} bytes`);
  }

  // What a failure says, and what is kept: the part (resumable) unless nothing came or the file was wrong.
  async function failed(e0) {
    let e = e0;
    if (e instanceof Retryable) {
      e = fail('download', `the download of ${url} broke off after ${have} of ${size ?? '?'} bytes (${e.message}; ` +
        `${attempts + 1} ${attempts ? 'tries' : 'try'}): the connection dropped` +
        (have ? `; the ${mb(have)} downloaded so far are kept: load it again to resume` : ''));
    } else if (e.name === 'QuotaExceededError') {
      e = fail('storage', `not enough browser storage to cache ${name} (${have} bytes written): free space or delete cached models`);
    }
    growing?.ended(have, e);
    const drop = e0.drop || have === 0;
    if (!drop) {
      try { checkpoint(); } catch { /* (the part is kept with its last record) */ }
    }
    closeRecord();
    if (growing) growing.close(); else h.close();
    if (drop) await dropPart(dir, fname);
    return e;
  }

  let cur;
  try {
    const complete = rec.complete && size != null && have === size;
    if (!complete) await ensureRoom();     // a size known before the first byte: refused before it
    cur = complete ? { done: true } : await connect();
  } catch (e) {
    throw await failed(e);
  }
  growing = new o.Growing(h, size ?? -1);
  growing.grew(have);
  progress(have, size || 0, {});

  const written = (async () => {
    try {
      while (!cur.done) {
        try {
          await body(cur.r, cur.ctl);
          break;
        } catch (e) {
          if (!(e instanceof Retryable)) throw e;
          lastError = e;
        }
        await backoff();
        cur = await connect();
      }
      h.flush();
      if (hasher) {
        const digest = hasher.digest('hex');
        hasher = null;                     // (its state is spent: the record keeps the last one)
        if (digest !== rec.sha256) {
          throw fail('download', `the download of ${url} is not the expected file: its SHA-256 is ${digest}, ` +
            `${rec.sha256} was expected (the file on the server changed, or it is not the one the catalogue names). ` +
            `The downloaded file was deleted.`, { reason: 'sha256', drop: true });
        }
      }
      rec.complete = true;
      checkpoint();
      closeRecord();
      growing.ended(have, null);
      progress(have, have, {});
      return { size: have, resumedFrom, attempts, notes, sha256: rec.sha256 };
    } catch (e) {
      throw await failed(e);
    }
  })();
  written.catch(() => {});
  return {
    file: growing, record: rec, fname, written, notes,
    /** Stop the download (its part is kept: the next attempt resumes it). */
    stop(error) {
      stopped ??= error || fail('aborted', 'the download was stopped');
      live?.abort(stopped);
      for (const cancel of waits) cancel();
    },
  };
}
