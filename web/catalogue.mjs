// The model catalogue (web/catalogue.json, exported by the library as bitweb.models), the fit
// check that runs before any byte is downloaded, the model addresses people paste, what of an entry
// rests on one public source (sourceNote) and where a loaded header disagrees with it (headerDiff).
//
// fit(entry, env) mirrors what the engine checks when it loads (pyapp/bitweb: generation.fit_context,
// webapp.estimate_bytes, Engine.check_limits), from the figures tools/catalogue.py computed from
// the entry's shapes (entry.gpu); tests/test_catalogue.py runs both on the same limits and
// compares the verdicts. No GPU and no network here: plain data in, a verdict out.
import data from './catalogue.json' with { type: 'json' };

const freeze = (o) => { Object.values(o).forEach((v) => { if (v && typeof v === 'object') freeze(v); }); return Object.freeze(o); };
/** The catalogue's entries (web/catalogue.json "models"), frozen. */
export const models = freeze(data.models);

export const KV_BUDGET = 2 ** 30;        // bytes the default context lets the KV cache take (generation.KV_BUDGET)
export const CONTEXT_STEP = 256;         // a reduced default context is a multiple of this (generation.CONTEXT_STEP)
const KV_VALUE_BYTES = 2;                // f16 K and V (the default KV cache)

const mib = (n) => (n < 2 ** 10 ? `${n} bytes` : n < 2 ** 20 ? `${(n / 2 ** 10).toFixed(1)} KiB`
  : `${(n / 2 ** 20).toFixed(n < 10 * 2 ** 20 ? 1 : 0)} MiB`);

/** Bytes of GPU memory the model needs at n_ctx positions (webapp.estimate_bytes). */
export function memoryAt(entry, nCtx) {
  const s = entry.shape, g = entry.gpu;
  const qDim = s.n_head * s.head_dim, kvDim = s.n_head_kv * s.head_dim;
  const widest = Math.max(s.n_embd, qDim + 2 * kvDim, s.n_ff);
  return g.weightBytes + g.kvBytesPerPosition * nCtx + 4 * (64 * 4 * widest + 2 * s.n_vocab);
}

// The default context (generation.fit_context without max_context): the model's, or the largest
// multiple of CONTEXT_STEP whose KV cache fits `budget` bytes and whose one-layer K buffer fits
// `maxBinding`; {n, why} (n < 2: none fits).
function fitContext(entry, maxBinding, budget) {
  const s = entry.shape;
  const caps = [[Math.floor(budget / entry.gpu.kvBytesPerPosition), 'budget']];
  if (maxBinding) caps.push([Math.floor(maxBinding / (KV_VALUE_BYTES * s.n_head_kv * s.head_dim)), 'binding']);
  let [n, why] = caps.reduce((a, b) => (b[0] < a[0] ? b : a));
  if (n >= entry.context) return { n: entry.context, why: null };
  if (n >= CONTEXT_STEP) n -= n % CONTEXT_STEP;
  return { n, why };
}

/**
 * Whether a catalogue model can run here, before any byte is downloaded.
 * env: {limits: {maxBufferSize, maxStorageBufferBindingSize} (the adapter's, with ?cap= applied),
 *       gpuMemory: bytes for models or null (unknown), storage: {usage, quota} (navigator.storage.estimate()),
 *       have: bytes of it already in the cache (a partial download), cached: it is cached whole}
 * -> {verdict: 'fits' | 'smaller' | 'no', text, context, memory, limit?, short?}
 *    (context: the positions it gets; 'smaller': fewer than its default, defaultContext)
 */
export function fit(entry, env = {}) {
  const g = entry.gpu, L = env.limits || {};
  const binding = L.maxStorageBufferBindingSize ?? Infinity, buffer = L.maxBufferSize ?? Infinity;
  const no = (limit, text, short) => ({ verdict: 'no', limit, short, text: `will not fit: ${limit}, ${text}` });
  // (in the order the engine checks as it loads: webapp.WebApp._load, then Engine.check_limits)
  const stage = L.maxStorageBuffersPerShaderStage ?? Infinity;
  if (stage < g.storageBuffersPerStage) {
    return no('maxStorageBuffersPerShaderStage', `its kernels bind ${g.storageBuffersPerStage} storage buffers, over ${stage} (short by ${g.storageBuffersPerStage - stage})`, g.storageBuffersPerStage - stage);
  }
  // the context: the KV cache within its budget (and within gpuMemory), one layer's K buffer within a binding
  let budget = KV_BUDGET;
  if (env.gpuMemory) budget = Math.max(0, Math.min(budget, env.gpuMemory - memoryAt(entry, 0)));
  const lim = Math.min(binding, buffer);
  const { n, why } = fitContext(entry, Number.isFinite(lim) ? lim : 0, budget);
  if (n < 2) {
    if (why === 'binding') {
      const perPos = KV_VALUE_BYTES * entry.shape.n_head_kv * entry.shape.head_dim;
      return no(binding <= buffer ? 'maxStorageBufferBindingSize' : 'maxBufferSize',
        `not even 2 positions of context fit (one layer's K buffer takes ${perPos} bytes a position; ${lim} bytes allowed)`, 2 * perPos - lim);
    }
    const m2 = memoryAt(entry, 2);
    return no('GPU memory', `it needs ${mib(m2)} with 2 positions of context; ${mib(env.gpuMemory)} is there (short by ${mib(m2 - env.gpuMemory)})`, m2 - env.gpuMemory);
  }
  const memory = memoryAt(entry, n);
  if (env.gpuMemory && memory > env.gpuMemory) {
    return no('GPU memory', `it needs ${mib(memory)}; ${mib(env.gpuMemory)} is there (short by ${mib(memory - env.gpuMemory)})`, memory - env.gpuMemory);
  }
  // one weight row of each table must fit a binding (the tables are split in shards of whole rows)
  for (const t of g.tables) {
    if (t.rowBytes > binding) {
      return no('maxStorageBufferBindingSize', `one ${t.name} row is ${t.rowBytes} bytes, over ${binding} (short by ${t.rowBytes - binding} bytes)`, t.rowBytes - binding);
    }
  }
  // the largest buffer: a block tensor, the logits, or a table's shard (as many rows as a binding holds)
  let need = g.largestBuffer, what = g.largestBufferName;
  for (const t of g.tables) {
    const shard = Math.min(t.rows, Math.floor(binding / t.rowBytes)) * t.rowBytes;
    if (shard > need) { need = shard; what = `a ${t.name} shard`; }
  }
  if (need > binding) return no('maxStorageBufferBindingSize', `${what} needs ${mib(need)}, over ${mib(binding)} (short by ${mib(need - binding)})`, need - binding);
  if (need > buffer) return no('maxBufferSize', `${what} needs ${mib(need)}, over ${mib(buffer)} (short by ${mib(need - buffer)})`, need - buffer);
  // browser storage for the file (what is in the cache already does not count)
  const st = env.storage || {};
  const needBytes = env.cached ? 0 : Math.max(0, entry.fileSize - (env.have || 0));
  if (st.quota != null && needBytes > 0) {
    const free = Math.max(0, st.quota - (st.usage || 0));
    if (needBytes > free) return no('browser storage', `the file needs ${mib(needBytes)} more; ${mib(free)} of the site's ${mib(st.quota)} is free (short by ${mib(needBytes - free)})`, needBytes - free);
  }
  if (n >= g.defaultContext) return { verdict: 'fits', context: n, memory, text: `fits (context ${n}, about ${mib(memory)} of GPU memory)` };
  return { verdict: 'smaller', context: n, memory, text: `fits with a smaller context (${n} of ${g.defaultContext}, about ${mib(memory)} of GPU memory)` };
}

/**
 * A model address as people paste it, as the URL to download: `hf:owner/repo/path/file.gguf`
 * (optionally `hf:owner/repo@revision/file.gguf`) and Hugging Face page addresses
 * (`https://huggingface.co/owner/repo/blob/REV/file.gguf`) become the file's `resolve` URL;
 * anything else is returned as it is (relative to `base` when given).
 */
export function resolveUrl(text, base) {
  const s = String(text).trim();
  const hf = /^hf:(?:\/\/)?([^/@\s]+)\/([^/@\s]+)(?:@([^/\s]+))?\/(.+)$/i.exec(s);
  if (hf) {
    const [, owner, repo, rev, path] = hf;
    return `https://huggingface.co/${owner}/${repo}/resolve/${encodeURIComponent(rev || 'main')}/${path.split('/').map(encodeURIComponent).join('/')}`;
  }
  let u;
  try { u = base ? new URL(s, base) : new URL(s); } catch { return s; }
  if (/^(www\.)?(huggingface\.co|hf\.co)$/i.test(u.hostname)) {
    const m = /^\/([^/]+)\/([^/]+)\/(?:blob|raw)\/([^/]+)\/(.+)$/.exec(u.pathname);
    if (m) {
      u.pathname = `/${m[1]}/${m[2]}/resolve/${m[3]}/${m[4]}`;
      u.search = '';
    }
  }
  return u.href;
}

const FACTS = { size: 'its size', sha256: 'its SHA-256', revision: 'its revision', shape: 'its shapes' };
const COUNT = ['no', 'one', 'two'];

/**
 * What of an entry rests on one public source or none (its `sources`: {size, sha256, revision,
 * shape}, each {agree, from}), in words for the app to show beside the download button; null when
 * every fact has two sources or more. Plain text: the app sets it as text.
 */
export function sourceNote(entry) {
  const weak = Object.entries(FACTS).filter(([k]) => (entry.sources?.[k]?.agree ?? 0) < 2);
  if (!weak.length) return null;
  return weak.map(([k, what]) => {
    const s = entry.sources?.[k];
    const n = s?.agree ?? 0;
    return `${what} rests on ${COUNT[n]} public source${n === 1 ? '' : 's'}${s?.from ? ` (${s.from})` : ''}`;
  }).join('; ');
}

// The catalogue's facts of a model against what its GGUF header says once loaded (the engine's
// info: webapp.model_info), [catalogue name, info name, how to read the info].
const HEADER_FACTS = [
  ['architecture', 'arch'], ['context', 'n_ctx'], ['weights', 'linear_type'], ['n_layer'], ['n_embd'], ['n_head'],
  ['n_head_kv'], ['n_ff'], ['n_vocab'], ['tied', 'tied'],
];
/**
 * Where a loaded model's header and its catalogue entry disagree: [{fact, catalogue, header}]
 * ([] when they agree). The model has loaded by its header (the engine reads only the file); the
 * catalogue's figures were used only before the download (the fit check), so this is what to log.
 */
export function headerDiff(entry, info) {
  const cat = { ...entry.shape, architecture: entry.architecture, context: entry.context, weights: entry.weights, tied: entry.output === null };
  const out = [];
  for (const [fact, key = fact] of HEADER_FACTS) {
    const header = info?.[key];
    if (header == null || header === cat[fact]) continue;
    out.push({ fact, catalogue: cat[fact], header });
  }
  return out;
}

/** The catalogue entry whose url is `url` (after resolveUrl), or null. */
export function entryForUrl(url) {
  let href;
  try { href = resolveUrl(url); } catch { return null; }
  return models.find((m) => m.url === href) || null;
}
