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

// Copy [offset, offset+size) of a buffer to a mappable one and return it as a Uint8Array.
const staging = new Map();
export async function read(device, buffer, offset, size) {
  const padded = Math.max(4, Math.ceil(size / 4) * 4);
  let st = staging.get(padded);
  if (!st || st.busy) {
    st = { buf: device.createBuffer({ size: padded, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: 'readback' }), busy: false };
    if (padded <= 65536) staging.set(padded, st);
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
// JS memory -> queue.writeBuffer; the bytes never enter the wasm heap.
export async function uploadBlob(device, buffer, bufferOffset, blob, start, end, chunk = 16 << 20, onBytes = null) {
  for (let pos = start; pos < end; pos += chunk) {
    const stop = Math.min(end, pos + chunk);
    let ab = await blob.slice(pos, stop).arrayBuffer();
    if (ab.byteLength % 4) { const padded = new Uint8Array(ab.byteLength + 4 - (ab.byteLength % 4)); padded.set(new Uint8Array(ab)); ab = padded.buffer; }
    device.queue.writeBuffer(buffer, bufferOffset + (pos - start), ab);
    if (onBytes) onBytes(stop - pos);
  }
}
