// A cached model's bytes for a shared worker (web/shared.mjs), which has no OPFS sync access
// handles: read by a dedicated worker (the page's download worker) into one buffer that goes back
// and forth over a MessagePort. A File's own stream reads ahead of the upload (a shared worker's
// renderer held 20-38 MB of a 35 MB model, where a sync access handle holds one chunk).
// readThrough is the shared worker's side (web/models.mjs open), serveReads the dedicated one's.
import { ModelsError } from './download.mjs';

const fail = (kind, message) => new ModelsError(kind, message);

// A read-only sync access handle of `path` ("dir/file") under the origin private file system.
async function syncHandle(path) {
  let d = await navigator.storage.getDirectory();
  const parts = path.split('/');
  for (const p of parts.slice(0, -1)) d = await d.getDirectoryHandle(p);
  return (await d.getFileHandle(parts.at(-1))).createSyncAccessHandle({ mode: 'read-only' });
}

// `file` (a cached model's File, for its size, slice() and small reads) with readInto(view, at) and
// close() that ask serveReads over `port` for the bytes of `fname` (its OPFS path): one read at a time,
// into one scratch buffer that goes back and forth (transferred: no copy left behind for the GC).
// A read in flight fails when `signal` aborts (the page that serves it may be gone).
export function readThrough(file, fname, { port, signal }) {
  let scratch = null, chain = Promise.resolve(), closed = false;
  const ask = (m) => new Promise((resolve, reject) => {
    const stop = () => reject(fail('aborted', 'the load was aborted'));
    if (signal?.aborted) return stop();
    signal?.addEventListener('abort', stop, { once: true });
    port.onmessage = ({ data }) => {
      signal?.removeEventListener('abort', stop);
      if (data.error) reject(fail('storage', `reading "${fname}" from the model cache: ${data.error}`)); else resolve(data);
    };
    port.postMessage(m, [m.buf]);
  });
  const one = async (view, at) => {
    if (closed) throw fail('internal', 'read after close');
    if (!scratch || scratch.byteLength < view.byteLength) scratch = new ArrayBuffer(view.byteLength);
    const r = await ask({ file: fname, at, len: view.byteLength, buf: scratch });
    scratch = r.buf;
    view.set(new Uint8Array(scratch, 0, r.n));
    return r.n;
  };
  file.readInto = (view, at) => {
    const run = chain.then(() => one(view, at));
    chain = run.catch(() => {});
    return run;
  };
  file.close = () => {
    if (closed) return;
    closed = true;
    port.postMessage({ close: true });
    port.close();
  };
  return file;
}

/** A dedicated worker's side of readThrough: reads cache files into the buffers that come on
 *  `port` and sends them back, until {close: true}. */
export function serveReads(port) {
  const handles = new Map();          // cache file name -> Promise of its read-only sync access handle
  port.onmessage = async ({ data: m }) => {
    if (m.close) {
      for (const h of handles.values()) h.then((x) => x.close(), () => {});
      handles.clear();
      port.close();
      return;
    }
    try {
      if (!handles.has(m.file)) handles.set(m.file, syncHandle(m.file));
      const h = await handles.get(m.file);
      const view = new Uint8Array(m.buf, 0, m.len);
      let n = 0;
      while (n < m.len) {
        const k = h.read(view.subarray(n), { at: m.at + n });
        if (!k) break;
        n += k;
      }
      port.postMessage({ n, buf: m.buf }, [m.buf]);
    } catch (e) {
      port.postMessage({ error: `${e?.name || 'Error'}: ${e?.message || e}` });
    }
  };
}
