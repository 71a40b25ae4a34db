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
// Every `settle` bytes (over all calls) it waits for the queue, so the GPU process's staging memory stays bounded too.
let spare = null, unsettled = 0;
export async function uploadBlob(device, buffer, bufferOffset, blob, start, end, chunk = 16 << 20, onBytes = null, settle = 64 << 20) {
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
      if (unsettled >= settle) { unsettled = 0; await device.queue.onSubmittedWorkDone(); }
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
