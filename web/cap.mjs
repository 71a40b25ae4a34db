// `?cap=` in the page address: make bitweb treat the GPU as a weaker one (README, "Weak GPUs").
// Entries, comma-separated, later ones winning:
//   limitName:N   at most N for one of the limits bitweb uses (bitweb.LIMITS)
//   -feature      without one of the features bitweb uses (bitweb.FEATURES: shader-f16, subgroups,
//                 timestamp-query, and WGSL's packed_4x8_integer_dot_product)
//   mobile        the typical phone GPU: every limit at WebGPU's guaranteed minimum (128 MiB
//                 bindings, 256 MiB buffers, 16 KiB of workgroup memory, 256 invocations, 8 storage
//                 buffers), no shader-f16, no subgroups
//   memory:N      N bytes of GPU memory for models (the library's gpuMemory)
// The device is then requested that way: a masked feature is not asked for (the kernels take their
// fallbacks), a limit is requested at most at N (the browser enforces it when N is at least
// WebGPU's minimum; below that bitweb's own checks do), exactly as on such a GPU.

import { FEATURES, LIMITS } from './bitweb.mjs';

/** WebGPU's guaranteed minimum of each limit bitweb uses (what every adapter has). */
export const WEBGPU_MINIMUM = Object.freeze({
  maxBufferSize: 268435456, maxStorageBufferBindingSize: 134217728, maxStorageBuffersPerShaderStage: 8,
  maxComputeWorkgroupStorageSize: 16384, maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupSizeX: 256,
  maxComputeWorkgroupsPerDimension: 65535,
});

export const PRESETS = Object.freeze({
  mobile: { capLimits: WEBGPU_MINIMUM, maskFeatures: ['shader-f16', 'subgroups'] },
});

/**
 * Parse a cap= value. -> {capLimits: {limit: n} | null, maskFeatures: [names] | null, gpuMemory: n | null,
 * problem: a message naming the bad entry | null}.
 * @param {string | null} text
 */
export function parseCap(text) {
  const out = { capLimits: null, maskFeatures: null, gpuMemory: null, problem: null };
  if (!text) return out;
  const limits = {}, masked = new Set();
  const bad = (part, why) => `The page address has cap=${part}: ${why}. Fix or remove "cap" in the address.`;
  for (const part of text.split(',').map((s) => s.trim()).filter(Boolean)) {
    if (PRESETS[part]) {
      Object.assign(limits, PRESETS[part].capLimits);
      PRESETS[part].maskFeatures.forEach((f) => masked.add(f));
      continue;
    }
    if (part.startsWith('-')) {
      const f = part.slice(1);
      if (!FEATURES.includes(f)) { out.problem = bad(part, `"-" masks a feature, one of ${FEATURES.join(', ')}`); break; }
      masked.add(f);
      continue;
    }
    const [k, v, ...rest] = part.split(':');
    const n = Number(v);
    if (!k || v === undefined || rest.length || v.trim() === '' || !Number.isInteger(n) || n <= 0) {
      out.problem = bad(part, 'each entry must be limitName:positive-integer (e.g. cap=maxStorageBufferBindingSize:134217728), ' +
        `-feature (e.g. cap=-subgroups), memory:bytes, or ${Object.keys(PRESETS).join(' / ')}`);
      break;
    }
    if (k === 'memory') { out.gpuMemory = n; continue; }
    if (!LIMITS.includes(k)) { out.problem = bad(part, `${k} is not a limit bitweb uses (one of ${LIMITS.join(', ')})`); break; }
    limits[k] = n;
  }
  if (Object.keys(limits).length) out.capLimits = limits;
  if (masked.size) out.maskFeatures = FEATURES.filter((f) => masked.has(f));
  return out;
}
