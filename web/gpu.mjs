// JS side of bitweb.gpu.browser: the few calls that would otherwise cost Python
// hundreds of FFI crossings. Loaded by the worker as globalThis.bitwebGPU.

// A prepared plan: arrays of pipelines and bind groups, and x,y,z workgroup counts.
export function makePlan(pipelines, groups, counts) {
  return { pipelines, groups, counts, n: pipelines.length };
}

// Encode every dispatch of a plan into one compute pass and submit: one call per token.
export function replay(device, plan) {
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  const c = plan.counts;
  for (let i = 0; i < plan.n; i++) {
    pass.setPipeline(plan.pipelines[i]);
    pass.setBindGroup(0, plan.groups[i]);
    pass.dispatchWorkgroups(c[3 * i], c[3 * i + 1], c[3 * i + 2]);
  }
  pass.end();
  device.queue.submit([enc.finish()]);
}

// Buffers these helpers hold themselves (kept staging buffers), per device: [count, bytes].
// bitweb.gpu adds them to the buffers Python created for dev.live_buffers / dev.live_bytes.
const heldOf = new WeakMap();
function held(device, n, bytes) {
  const h = heldOf.get(device) || [0, 0];
  h[0] += n; h[1] += bytes;
  heldOf.set(device, h);
}
export function live(device) {
  return [...(heldOf.get(device) || [0, 0])];
}

// Copy [offset, offset+size) of a buffer to a mappable one and return it as a Uint8Array.
// Staging buffers are kept per device (a page may replace its device, e.g. for a new model).
const stagingOf = new WeakMap();
export async function read(device, buffer, offset, size) {
  const padded = Math.max(4, Math.ceil(size / 4) * 4);
  let staging = stagingOf.get(device);
  if (!staging) stagingOf.set(device, staging = new Map());
  let st = staging.get(padded);
  if (!st || st.busy) {
    st = { buf: device.createBuffer({ size: padded, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'readback' }), busy: false };
    if (padded <= 65536 && !staging.has(padded)) { staging.set(padded, st); held(device, 1, padded); }
  }
  st.busy = true;
  try {
    const enc = device.createCommandEncoder();
    enc.copyBufferToBuffer(buffer, offset, st.buf, 0, padded);
    device.queue.submit([enc.finish()]);
    await st.buf.mapAsync(GPUMapMode.READ, 0, padded);
    const out = new Uint8Array(st.buf.getMappedRange(0, padded).slice(0, size));
    st.buf.unmap();
    return out;
  } finally {
    st.busy = false;
    if (staging.get(padded) !== st) st.buf.destroy();
  }
}

// Stream bytes [start, end) of a Blob/File into a GPU buffer in chunks:
// JS memory -> queue.writeBuffer; the bytes never enter the wasm heap. Each chunk is read into one
// reused chunk buffer (writeBuffer copies at the call), so an upload of any size holds one chunk of
// memory: a models.mjs GrowingFile (a download streaming into the cache, or a cached model) reads
// straight into it (readInto, waiting for bytes still to come); a Blob's stream is read with a
// default reader and its pieces (tens of KiB) are copied in. (A BYOB reader would skip that copy,
// but in Chromium 156 its reads of an OPFS File in the library's worker sometimes never resolved
// while pipeline compiles were in flight.)
// writeBuffer's bytes wait in shared memory (counted in the renderer and the GPU process) until the
// GPU process takes them, which lags on a busy machine: every `settle` bytes (over all calls) it
// waits for the queue as it was one window before (the window since runs on meanwhile), so at most
// two windows and a chunk are in flight, whatever the file's size.
let spare = null, unsettled = 0, inFlight = null;
export async function uploadBlob(device, buffer, bufferOffset, blob, start, end, chunk = 16 << 20, onBytes = null, settle = 4 << 20) {
  const size = end - start;
  const cap = Math.max(4, Math.ceil(Math.min(chunk, size) / 4) * 4);
  let reader = null, fill;
  if (blob.readInto) {
    fill = (view, at) => blob.readInto(view, start + at);
  } else {
    try { reader = blob.slice(start, end).stream().getReader(); } catch { reader = null; }
    if (!reader) return uploadBlobCopies(device, buffer, bufferOffset, blob, start, end, chunk, onBytes);
    fill = fromReader(reader);
  }
  const buf = spare && spare.byteLength >= cap ? spare : new ArrayBuffer(cap);
  spare = null;
  let pos = 0;
  try {
    while (pos < size) {
      const want = Math.min(cap, size - pos);
      const filled = await fill(new Uint8Array(buf, 0, want), pos);
      if (!filled) break;
      const padded = Math.ceil(filled / 4) * 4;
      if (padded > filled) new Uint8Array(buf, filled, padded - filled).fill(0);
      device.queue.writeBuffer(buffer, bufferOffset + pos, buf, 0, padded);
      pos += filled;
      unsettled += filled;
      if (onBytes) onBytes(filled);
      if (filled < want) break;
      if (unsettled >= settle) {
        unsettled = 0;
        const before = inFlight;
        inFlight = device.queue.onSubmittedWorkDone();
        if (before) await before;
      }
    }
  } finally {
    if (reader) {
      if (pos < size) reader.cancel().catch(() => {});
      reader.releaseLock();
    }
    spare = buf;
  }
  if (pos !== size) throw new Error(`upload: read ${pos} of ${size} bytes of the file (was it changed or removed, or did its download end early?)`);
}

// uploadBlob for several ranges of one Blob, in order: buffers[i] at spans[3i] gets bytes
// [spans[3i + 1], spans[3i + 2]) (one call from Python for a load's tensors, not one each).
export async function uploadMany(device, blob, buffers, spans, chunk, onBytes = null) {
  for (let i = 0; i < buffers.length; i++) {
    await uploadBlob(device, buffers[i], spans[3 * i], blob, spans[3 * i + 1], spans[3 * i + 2], chunk, onBytes);
  }
}

// fill(view) from a stream's default reader: copies its pieces in order; fewer bytes only at its end.
function fromReader(reader) {
  let piece = null, used = 0;                 // the reader's last value, `used` bytes of it taken
  return async (view) => {
    let filled = 0;
    while (filled < view.byteLength) {
      if (!piece || used === piece.byteLength) {
        const r = await reader.read();
        if (r.done) break;
        piece = r.value; used = 0;
      }
      const n = Math.min(piece.byteLength - used, view.byteLength - filled);
      view.set(piece.subarray(used, used + n), filled);
      used += n; filled += n;
    }
    return filled;
  };
}

// Fallback without blob streams: one new ArrayBuffer per chunk.
async function uploadBlobCopies(device, buffer, bufferOffset, blob, start, end, chunk, onBytes) {
  for (let pos = start; pos < end; pos += chunk) {
    const stop = Math.min(end, pos + chunk);
    let ab = await blob.slice(pos, stop).arrayBuffer();
    if (ab.byteLength % 4) { const padded = new Uint8Array(ab.byteLength + 4 - (ab.byteLength % 4)); padded.set(new Uint8Array(ab)); ab = padded.buffer; }
    device.queue.writeBuffer(buffer, bufferOffset + (pos - start), ab);
    if (onBytes) onBytes(stop - pos);
  }
}

// ---- the device and the pipelines --------------------------------------------------------------
// bitweb.gpu.browser asks for its device (requestDevice) and its pipelines (compile) here. A page
// that has loaded the model before may have started both already (prepare: a pipeline manifest
// the worker kept after that load), while Python was still booting: requestDevice then hands over
// the device made with the same request, and compile the pipeline started with the same WGSL,
// entry point and constants (anything else compiles as usual).

const sameList = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const keyOf = (code, entry, constants) => JSON.stringify([code, entry, Object.entries(constants || {}).sort()]);
const adapterInfo = (a) => {
  const i = a.info || {};
  return { vendor: i.vendor || '', architecture: i.architecture || '', device: i.device || '', description: i.description || '' };
};
let early = null;         // prepare()'s device (a promise) and pipelines, until requestDevice takes them
let current = null;       // the last device made: its request, adapter, prepared and compiled pipelines

// The adapter and a device with `features` (those the adapter has) and the adapter's values of
// `limitNames`, each at most caps[name] when given (bitweb's capLimits: the browser enforces a
// cap at or above WebGPU's default; a lower one is raised to that default, so Python applies the
// caps to what it reads back): {adapter, device, want, limits} or {kind, message?, want?, limits?}
// when there is none.
async function makeDevice(features, limitNames, caps = null) {
  const gpu = navigator.gpu;
  if (!gpu) return { kind: 'no-webgpu' };
  let adapter;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
  } catch (e) {                                   // some browsers reject instead of resolving null
    return { kind: 'adapter-failed', message: String(e?.message || e) };
  }
  if (!adapter) return { kind: 'no-adapter' };
  const want = features.filter((f) => adapter.features?.has(f));
  const limits = {};
  for (const n of limitNames) {
    const v = adapter.limits?.[n];
    if (v != null) limits[n] = caps?.[n] != null ? Math.min(Number(v), Number(caps[n])) : Number(v);
  }
  let device;
  try {
    device = await adapter.requestDevice({ requiredFeatures: want, requiredLimits: limits, label: 'bitweb' });
  } catch (e) {
    return { kind: 'device-failed', message: String(e?.message || e), want, limits };
  }
  if (!device) return { kind: 'no-device', want, limits };
  return { adapter, device, want, limits };
}

// Start a device and the manifest's pipelines now (before Python asks for them). A manifest made
// on another adapter starts the device only.
export function prepare(manifest) {
  if (early || current) return false;
  const e = early = { features: manifest.features, limitNames: manifest.limits, caps: manifest.caps ?? null, pipelines: new Map(),
    lost: false, n: 0, asked: performance.timeOrigin + performance.now(), started: null };
  e.made = makeDevice(e.features, e.limitNames, e.caps).then((r) => {
    if (!r.device) return r;
    r.device.lost.then(() => { e.lost = true; });
    if (JSON.stringify(adapterInfo(r.adapter)) !== JSON.stringify(manifest.adapter)) return r;
    try {
      for (const p of manifest.pipelines) {
        const key = keyOf(p.code, p.entry, p.constants);
        if (e.pipelines.has(key)) continue;
        const pr = startCompile(r.device, p.code, p.entry, p.constants, p.label);
        pr.catch(() => {});                       // (a failure is compiled again, and reported, by compile())
        e.pipelines.set(key, pr);
      }
    } catch (err) {                               // (a manifest of another shape: what started stays offered)
      console.warn('bitweb: pipeline manifest not used:', err);
    }
    e.n = e.pipelines.size;
    e.started = performance.timeOrigin + performance.now();
    return r;
  });
  return true;
}

// The device Python asked for (bitweb.gpu.browser.request_device): prepare()'s when it was made
// with the same request and is not lost, else a new one. caps: {limitName: at most} or null.
const sameCaps = (a, b) => JSON.stringify(Object.entries(a || {}).sort()) === JSON.stringify(Object.entries(b || {}).sort());
export async function requestDevice(features, limitNames, caps = null) {
  features = [...features]; limitNames = [...limitNames];
  caps = caps ? Object.fromEntries(Object.entries(caps).map(([k, v]) => [k, Number(v)])) : null;
  const e = early;
  early = null;
  let r = null, prepared = null;
  if (e) {
    const got = await e.made.catch(() => ({}));   // (a manifest that could not start a device: ask anew)
    if (got.device && !e.lost && sameList(e.features, features) && sameList(e.limitNames, limitNames) && sameCaps(e.caps, caps)) {
      r = got; prepared = e;
    } else {
      got.device?.destroy();
    }
  }
  r ??= await makeDevice(features, limitNames, caps);
  if (r.device) {
    current = { device: r.device, features, limitNames, caps, adapter: adapterInfo(r.adapter), compiled: [],
      prepared: prepared ? prepared.pipelines : new Map(), offered: prepared ? prepared.n : 0, taken: 0,
      times: prepared ? [prepared.asked, prepared.started] : null };
  }
  return r;
}

function startCompile(device, code, entry, constants, label) {
  const module = device.createShaderModule({ code, label });
  const desc = { layout: 'auto', label, compute: { module, entryPoint: entry } };
  if (constants && Object.keys(constants).length) desc.compute.constants = constants;
  return device.createComputePipelineAsync(desc).catch(async (e) => {
    let msgs = [];
    try { msgs = (await module.getCompilationInfo()).messages.map((m) => `line ${m.lineNum}:${m.linePos} ${m.type}: ${m.message}`); } catch { /* none */ }
    throw new Error([String(e?.message || e), ...msgs.slice(0, 5)].join('; '));
  });
}

// A compute pipeline (layout 'auto'): the prepared one with the same WGSL, entry point and
// constants, or a new compile. A failed compile rejects with the compiler's first messages.
export async function compile(device, code, entry, constants, label) {
  const c = current && current.device === device ? current : null;
  const key = keyOf(code, entry, constants);
  const rec = { code, entry, constants: constants ? { ...constants } : {}, label };
  const pre = c?.prepared.get(key);
  if (pre) {
    c.prepared.delete(key);
    try {
      const p = await pre;
      c.taken += 1;
      c.compiled.push(rec);
      return p;
    } catch { /* compiled again below */ }
  }
  const p = await startCompile(device, code, entry, constants, label);
  c?.compiled.push(rec);
  return p;
}

// For the worker: how many pipelines the current device has compiled (a mark), and a manifest of
// those compiled since a mark: what prepare() needs to start them again on a later visit.
export function compiledCount() { return current ? current.compiled.length : 0; }
export function manifestSince(mark) {
  if (!current) return null;
  return { features: current.features, limits: current.limitNames, caps: current.caps, adapter: current.adapter,
    pipelines: current.compiled.slice(mark) };
}
// The prepared pipelines offered and taken so far, and (when a manifest prepared the device) when
// it was read (askedMs) and the compiles started (startedMs, null: no device), in ms from `t0`
// (epoch ms); the ones no one took are dropped.
export function settlePrepared(t0) {
  if (!current) return null;
  const r = { offered: current.offered, taken: current.taken };
  if (current.times) {
    const [asked, started] = current.times;
    r.askedMs = Math.round(asked - t0);
    r.startedMs = started == null ? null : Math.round(started - t0);
  }
  current.prepared.clear();
  return r;
}
export const hasDevice = () => !!(early || current);

// Several ranges of GPU buffers (spans: offset, size pairs; multiples of 4) read back in one copy
// pass and one map, as one Uint8Array in their order (the saved KV cache: bitweb.engine export_kv).
export async function readRanges(device, buffers, spans) {
  let total = 0;
  for (let i = 1; i < spans.length; i += 2) total += spans[i];
  const staging = device.createBuffer({ size: Math.max(4, total), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'readback-ranges' });
  try {
    const enc = device.createCommandEncoder();
    let at = 0;
    buffers.forEach((b, i) => { enc.copyBufferToBuffer(b, spans[2 * i], staging, at, spans[2 * i + 1]); at += spans[2 * i + 1]; });
    device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ, 0, Math.max(4, total));
    const out = new Uint8Array(staging.getMappedRange(0, total).slice(0));
    staging.unmap();
    return out;
  } finally {
    staging.destroy();
  }
}
