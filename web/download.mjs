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
// mismatch deletes the part with a clear error. A host that asks for signing in (HTTP 401 / 403) or
// has lost the file (404 / 410) fails at once with its own error (`reason` "sign-in" / "gone") and
// deletes the part: nothing of that URL stays cached. Only one download of a name runs at a time,
// across tabs: web/models.mjs holds the name's Web Lock around it.
//
// One download is a Download: open() finds or starts its part (and the hash so far), connect()
// gets an answer that continues it (request(), retried with backoff()), receive() writes a body,
// verify() checks the SHA-256, finish() records it complete, and failed() says what went wrong and
// what is kept; run() is those steps in order, and start() the entry point web/models.mjs calls.
export const CHECKPOINT = 2 << 20;        // bytes between records (at most what a page that dies loses)
export const DEFAULTS = Object.freeze({ stallMs: 30_000, retries: 3, retryDelayMs: 1000 });

// Errors with the kind the library reports (web/bitweb.mjs); web/models.mjs exports this class.
export class ModelsError extends Error {
  constructor(kind, message, extra = {}) { super(message); this.kind = kind; Object.assign(this, extra); }
}
const fail = (kind, message, extra) => new ModelsError(kind, message, extra);
class Retryable extends Error {}

const hostOf = (url) => { try { return new URL(url).host; } catch { return String(url); } };
/**
 * The error of an HTTP answer that is not the file and not worth retrying. `reason` says which:
 * "sign-in" (401 / 403: the host wants an account, e.g. a gated repository), "gone" (404 / 410),
 * "http" (any other status). Each deletes what was downloaded of the URL (`drop`).
 */
export function httpError(url, status, statusText = '') {
  const st = `HTTP ${status}${statusText ? ' ' + statusText : ''}`;
  if (status === 401 || status === 403) {
    return fail('download', `this model's host requires signing in: ${hostOf(url)} answered ${st} for ${url} ` +
      '(a gated or private repository). bitweb sends no credentials: download the file where you are signed in ' +
      'and open it here, or choose another copy of the model. Nothing was cached.', { reason: 'sign-in', status, drop: true });
  }
  if (status === 404 || status === 410) {
    return fail('download', `the file is gone: ${hostOf(url)} answered ${st} for ${url} (the repository, revision or ` +
      'file no longer exists there). Nothing was cached.', { reason: 'gone', status, drop: true });
  }
  return fail('download', `could not download ${url}: ${st}`, { reason: 'http', status, drop: true });
}

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
 * One download of `url` into the part of `name` (resuming it when there is one): its named steps.
 * opts: {sha256, size, signal, progress(done, total, info), stallMs, retries, retryDelayMs,
 *        Growing (the GrowingFile class), free: async () => bytes the cache may still take or null,
 *        whyNoResponse(url, error, signal): the error of a fetch that got no answer}
 */
export class Download {
  constructor(dir, name, url, opts) {
    this.dir = dir; this.name = name; this.url = url;
    this.o = { ...DEFAULTS, ...Object.fromEntries(Object.entries(opts).filter(([, v]) => v != null)) };
    this.signal = this.o.signal;
    this.progress = this.o.progress || (() => {});
    this.notes = [];
    this.have = 0; this.size = null; this.resumedFrom = 0;
    this.rec = null; this.fname = null;
    this.h = null; this.recH = null; this.recClosed = false;   // the part's and the record's access handles
    this.hasher = null;
    this.stopped = null;                  // the error stop() was given
    this.live = null;                     // the AbortController of the request in flight
    this.waits = [];                      // cancels of the retry waits in progress
    this.growing = null;                  // the GrowingFile the caller reads (once the server answered)
    this.attempts = 0; this.lastError = null;
    this.t0 = 0; this.got0 = 0;           // this session's first byte and the bytes before it (speed, time left)
  }

  say(note) { this.notes.push(note); this.progress(this.have, this.size, { note }); }
  halted() { return this.stopped || (this.signal?.aborted ? fail('aborted', 'the download was aborted') : null); }

  /** Step 1: the part of this name (a resumable one, or a new one), its handles, and the hash so far. */
  async open() {
    const { dir, name, url, o } = this;
    let rec = await findPart(dir, name, url);
    if (rec && o.sha256 && rec.sha256 && hex(rec.sha256) !== hex(o.sha256)) { await dropPart(dir, rec.file); rec = null; }
    this.fname = rec?.file || `${name}.${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}.part`;
    rec ??= { url, name, file: this.fname, size: o.size ?? null, etag: null, lastModified: null, sha256: o.sha256 || null,
      offset: 0, hashState: null, complete: false };
    if (o.sha256) rec.sha256 = hex(o.sha256);
    this.rec = rec;
    try {
      const openSync = async (f) => (await dir.getFileHandle(f, { create: true })).createSyncAccessHandle();
      this.recH = await bounded(openSync(this.fname + '.json'), o.stallMs, `opening the download record of ${name}`);
      putRecord(this.recH, rec);            // (from here on the part is a download of its own, kept)
      this.h = await bounded(openSync(this.fname), o.stallMs, `opening the download of ${name}`);
    } catch (e) {
      this.recH?.close();
      if (e instanceof ModelsError) throw e;
      throw fail('storage', `the cached part of ${name} is in use (${e.name}): is another tab writing it? ${e.message}`);
    }
    const h = this.h;
    this.have = Math.min(rec.offset, h.getSize());
    h.truncate(this.have);                  // (bytes past the last record are not known to be right)
    this.size = rec.size;
    this.resumedFrom = this.have;
    if (rec.sha256) {                       // the saved state, or (no state) the part read again
      this.hasher = await sha256Hasher();
      this.hasher.init();
      if (this.have && rec.hashState && rec.offset === this.have) this.hasher.load(unb64(rec.hashState));
      else if (this.have) {
        const buf = new Uint8Array(1 << 20);
        for (let at = 0; at < this.have;) {
          const n = h.read(buf.subarray(0, Math.min(buf.length, this.have - at)), { at });
          this.hasher.update(buf.subarray(0, n));
          at += n;
        }
      }
    }
  }

  // The record of the bytes on disk now (synchronous: its handle is held).
  checkpoint() {
    if (this.recClosed) return;
    this.h.flush();
    this.rec.offset = this.have;
    if (this.hasher) this.rec.hashState = b64(this.hasher.save());
    putRecord(this.recH, this.rec);
  }
  closeRecord() { if (!this.recClosed) { this.recClosed = true; this.recH.close(); } }

  // A size known before the bytes that the cache cannot take: refused.
  async ensureRoom() {
    const { size, have, o } = this;
    if (size == null || !o.free) return;
    const free = await o.free();
    if (free != null && size - have > free) {
      throw fail('storage', `not enough browser storage to download ${this.name}: it needs ${mb(size - have)} more and ` +
        `${mb(free)} is free for this site; delete cached models or allow the site more storage. Nothing was downloaded.`,
        { need: size - have, free });
    }
  }

  report() {
    const info = {};
    const s = (performance.now() - this.t0) / 1000;
    if (this.t0 && s > 0.2 && this.have > this.got0 && this.size) {
      info.bytesPerSecond = Math.round((this.have - this.got0) / s);
      info.etaSeconds = Math.max(0, (this.size - this.have) / info.bytesPerSecond);
    }
    this.progress(this.have, this.size || 0, info);
  }

  // The part from its first byte again (the file changed, or the server sends it whole).
  async startOver(why) {
    if (this.growing) {        // the load read bytes of the old file: it cannot go on with the new one
      this.growing.ended(this.have, fail('download', `${why} while it was loading: load it again`));
    }
    this.h.truncate(0);
    this.have = 0;
    this.hasher?.init();
    this.say(why);
  }

  /** Step 2: one request from `have` on: {r, ctl} whose body continues the part, or {done: true}. */
  async request() {
    const { url, name, rec, o, signal } = this;
    const ctl = new AbortController();
    this.live = ctl;
    const both = signal ? AbortSignal.any([signal, ctl.signal]) : ctl.signal;
    const headers = {};
    if (this.have > 0) {
      headers.Range = `bytes=${this.have}-`;
      if (rec.etag || rec.lastModified) headers['If-Range'] = rec.etag || rec.lastModified;
    }
    const watch = stallWatch(o.stallMs, () => ctl.abort(new Retryable(`no answer for ${o.stallMs / 1000} s`)));
    let r;
    try {
      r = await fetch(url, { cache: 'no-store', signal: both, headers });
    } catch (e) {
      if (this.halted()) throw this.halted();
      if (ctl.signal.aborted) throw ctl.signal.reason;
      if (this.attempts > 0 || this.have > 0) throw new Retryable(`the connection failed (${e.message || e})`);
      throw await o.whyNoResponse(url, e, signal);          // never connected: no retry (CORS, no server)
    } finally {
      watch.stop();
    }
    if (r.status === 416 && this.size != null && this.have === this.size) return { done: true };
    if (r.status >= 500 || r.status === 408 || r.status === 429) throw new Retryable(`HTTP ${r.status} ${r.statusText}`.trim());
    if (!r.ok) throw httpError(url, r.status, r.statusText);
    const etag = r.headers.get('etag'), modified = r.headers.get('last-modified');
    const encoded = !!r.headers.get('content-encoding');
    const length = Number(r.headers.get('content-length') || -1);
    const again = `${name} changed on the server: the download starts again from the beginning`;
    if (r.status === 206) {
      const m = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(r.headers.get('content-range') || '');
      const total = m && m[3] !== '*' ? Number(m[3]) : null;
      const changed = (etag && rec.etag && etag !== rec.etag) || (total != null && this.size != null && total !== this.size);
      if (!m || Number(m[1]) !== this.have || changed) {
        ctl.abort();
        rec.etag = null; rec.lastModified = null; this.size = o.size ?? null;        // ask for the whole file, plainly
        await this.startOver(changed ? again
          : `the server sent another range (${r.headers.get('content-range')}): the download starts again from the beginning`);
        return this.request();
      }
      if (this.have > 0) this.say(`resuming ${name} at ${mb(this.have)} of ${mb(total ?? this.size)}`);
      this.size = total ?? this.size;
    } else {                                                      // 200: the whole file
      if (this.have > 0) {
        const changed = (etag && rec.etag && etag !== rec.etag) || (!rec.etag && modified && rec.lastModified && modified !== rec.lastModified);
        await this.startOver(changed ? again
          : `the server does not support resuming (it ignores Range requests): the download of ${name} starts again from the beginning`);
      }
      this.size = length >= 0 && !encoded ? length : (o.size ?? null);
    }
    rec.etag = etag || rec.etag;
    rec.lastModified = modified || rec.lastModified;
    rec.size = this.size;
    this.checkpoint();
    try {
      await this.ensureRoom();
    } catch (e) {
      ctl.abort();
      throw e;
    }
    return { r, ctl };
  }

  // Wait before the next try (checkpointed first); throws the last failure once the tries are spent.
  async backoff() {
    const { o, signal } = this;
    this.checkpoint();
    if (this.attempts >= o.retries) throw this.lastError;
    const wait = Math.min(30_000, o.retryDelayMs * 2 ** this.attempts);
    this.attempts++;
    const msg = this.lastError.message;
    this.notes.push(`try ${this.attempts + 1}: ${msg}`);
    this.progress(this.have, this.size || 0, { note: `${msg}; trying again in ${(wait / 1000).toFixed(1)} s (try ${this.attempts + 1} of ${o.retries + 1})` });
    await new Promise((resolve, reject) => {
      const t = setTimeout(resolve, wait);
      const cancel = () => { clearTimeout(t); reject(this.halted() || fail('aborted', 'the download was aborted')); };
      if (this.halted()) cancel();
      signal?.addEventListener('abort', cancel, { once: true });
      this.waits.push(cancel);
    });
  }

  /** A response to read from (retrying the tries worth retrying), or {done: true}. */
  async connect() {
    for (;;) {
      try {
        return await this.request();
      } catch (e) {
        if (!(e instanceof Retryable)) throw e;
        this.lastError = e;
      }
      await this.backoff();
    }
  }

  /** Step 3: the body of `r` into the part, from `have` on (the only wait is the read, which stallWatch sees). */
  async receive(r, ctl) {
    const { o, h, url } = this;
    const reader = r.body.getReader();
    const watch = stallWatch(o.stallMs, () => ctl.abort(new Retryable(`no data for ${o.stallMs / 1000} s`)));
    let since = this.have;
    this.t0 = 0; this.got0 = this.have;
    try {
      for (;;) {
        let v;
        try {
          v = await reader.read();
        } catch (e) {
          if (this.halted()) throw this.halted();
          if (ctl.signal.aborted && ctl.signal.reason instanceof Retryable) throw ctl.signal.reason;
          throw new Retryable(`the connection dropped (${e.message || e})`);
        }
        if (v.done) break;
        watch.kick();
        const chunk = v.value;
        if (this.size != null && this.have + chunk.byteLength > this.size) throw fail('download', `the server sent more than the ${this.size} bytes it announced for ${url}`);
        let off = 0;
        while (off < chunk.byteLength) off += h.write(chunk.subarray(off), { at: this.have + off });
        this.hasher?.update(chunk);
        this.have += chunk.byteLength;
        this.t0 ||= performance.now();
        this.growing.grew(this.have);
        this.report();
        if (this.have - since >= CHECKPOINT) { since = this.have; this.checkpoint(); }
      }
    } finally {
      watch.stop();
      reader.releaseLock?.();
    }
    if (this.size != null && this.have < this.size) throw new Retryable(`the connection closed after ${this.have} of ${this.size} bytes`);
  }

  /** Step 4: the whole file's SHA-256 against the one asked for; a wrong file is refused and deleted. */
  verify() {
    if (!this.hasher) return;
    const digest = this.hasher.digest('hex');
    this.hasher = null;                    // (its state is spent: the record keeps the last one)
    if (digest !== this.rec.sha256) {
      throw fail('download', `the download of ${this.url} is not the expected file: its SHA-256 is ${digest}, ` +
        `${this.rec.sha256} was expected (the file on the server changed, or it is not the one the catalogue names). ` +
        'The downloaded file was deleted.', { reason: 'sha256', drop: true });
    }
  }

  /** Step 5: the part recorded complete. */
  finish() {
    this.rec.complete = true;
    this.checkpoint();
    this.closeRecord();
    this.growing.ended(this.have, null);
    this.progress(this.have, this.have, {});
    return { size: this.have, resumedFrom: this.resumedFrom, attempts: this.attempts, notes: this.notes, sha256: this.rec.sha256 };
  }

  /** What a failure says, and what is kept: the part (resumable) unless nothing came or the file must go. */
  async failed(e0) {
    let e = e0;
    const { have, size, attempts } = this;
    if (e instanceof Retryable) {
      e = fail('download', `the download of ${this.url} broke off after ${have} of ${size ?? '?'} bytes (${e.message}; ` +
        `${attempts + 1} ${attempts ? 'tries' : 'try'}): the connection dropped` +
        (have ? `; the ${mb(have)} downloaded so far are kept: load it again to resume` : ''));
    } else if (e.name === 'QuotaExceededError') {
      e = fail('storage', `not enough browser storage to cache ${this.name} (${have} bytes written): free space or delete cached models`);
    }
    this.growing?.ended(have, e);
    const drop = e0.drop || have === 0;
    if (!drop) {
      try { this.checkpoint(); } catch { /* (the part is kept with its last record) */ }
    }
    this.closeRecord();
    if (this.growing) this.growing.close(); else this.h.close();
    if (drop) await dropPart(this.dir, this.fname);
    return e;
  }

  /** The rest of the file after the first answer `cur`: receive (retrying), verify, finish. */
  async run(cur) {
    try {
      while (!cur.done) {
        try {
          await this.receive(cur.r, cur.ctl);
          break;
        } catch (e) {
          if (!(e instanceof Retryable)) throw e;
          this.lastError = e;
        }
        await this.backoff();
        cur = await this.connect();
      }
      this.h.flush();
      this.verify();
      return this.finish();
    } catch (e) {
      throw await this.failed(e);
    }
  }

  /** Stop the download (its part is kept: the next attempt resumes it). */
  stop(error) {
    this.stopped ??= error || fail('aborted', 'the download was stopped');
    this.live?.abort(this.stopped);
    for (const cancel of this.waits) cancel();
  }
}

/**
 * Download `url` into the part of `name` (resuming it when there is one). Returns once the server
 * has answered (or the part is complete already): {file: GrowingFile over the part, record, fname,
 * written: Promise (settles when the whole file is on disk and verified; its failure keeps the part
 * unless the file was wrong or the host refused it), notes, stop(error)}. opts: see Download.
 */
export async function start(dir, name, url, opts) {
  const d = new Download(dir, name, url, opts);
  await d.open();
  let cur;
  try {
    const complete = d.rec.complete && d.size != null && d.have === d.size;
    if (!complete) await d.ensureRoom();   // a size known before the first byte: refused before it
    cur = complete ? { done: true } : await d.connect();
  } catch (e) {
    throw await d.failed(e);
  }
  d.growing = new d.o.Growing(d.h, d.size ?? -1);
  d.growing.grew(d.have);
  d.progress(d.have, d.size || 0, {});
  const written = d.run(cur);
  written.catch(() => {});
  return { file: d.growing, record: d.rec, fname: d.fname, written, notes: d.notes, stop: (error) => d.stop(error) };
}
