// bitweb: BitNet b1.58 models in the browser, with an OpenAI-style chat API.
//
//   import * as bitweb from './bitweb.mjs';
//   const engine = await bitweb.load(bitweb.DEFAULT_MODEL, { onProgress: (p) => console.log(p.stage, p.done, p.total) });
//   const stream = await engine.chat.completions.create({ messages: [{ role: 'user', content: 'Hello!' }], stream: true });
//   for await (const chunk of stream) out.textContent += chunk.choices[0].delta.content ?? '';
//
// The engine runs in a Web Worker (worker.mjs: Pyodide + WebGPU); this module only talks to it, through
// connection.mjs. With load(source, {share: true}) (or connect({share: true})) it runs once for all pages
// of the origin, in a SharedWorker (shared.mjs), where the browser has one with WebGPU.
// Types: bitweb.d.ts. Errors: BitwebError with a `kind` (README, "Errors"). The options and their
// bounds come from bitweb's one table of them (pyapp/bitweb/options.py), as tools/build_web.py
// writes it beside the Python archive.
import OPTIONS_DATA from '../build/web/options.json' with { type: 'json' };

import { models, fit, resolveUrl, entryForUrl, headerDiff } from './catalogue.mjs';
import { ERROR_KINDS, BitwebError, errors, error, settingsError } from './errors.mjs';
import { call, connect, hostFor, theDownloader, cacheWriter, lastHeard } from './connection.mjs';

export const DEFAULT_MODEL = new URL('./models/bitweb-chat-i2_s.gguf', import.meta.url).href;
/** The model catalogue (web/catalogue.json), its fit check and the addresses people paste (web/catalogue.mjs). */
export { models, fit, resolveUrl };
/** Which engine host this page's calls use (web/connection.mjs); when its worker last said anything. */
export { connect, lastHeard };

let adapterLimits = null;
/**
 * The fit verdict of a catalogue entry here, before any byte is downloaded (web/catalogue.mjs fit()):
 * this browser's WebGPU adapter limits (with capLimits applied), gpuMemory, the storage the site
 * has left, and what of the model is cached or downloaded already.
 * @param {object} entry one of bitweb.models
 * @param {{capLimits?: object|null, gpuMemory?: number|null}} [options]
 */
export async function checkFit(entry, { capLimits = null, gpuMemory = null } = {}, conn = null) {
  adapterLimits ??= (async () => {
    const a = await navigator.gpu?.requestAdapter();
    if (!a) throw error('no-webgpu', 'no WebGPU adapter: requestAdapter() returned null');
    return { maxBufferSize: a.limits.maxBufferSize, maxStorageBufferBindingSize: a.limits.maxStorageBufferBindingSize,
      maxStorageBuffersPerShaderStage: a.limits.maxStorageBuffersPerShaderStage };
  })();
  const limits = { ...(await adapterLimits) };
  for (const [k, v] of Object.entries(capLimits || {})) if (k in limits) limits[k] = Math.min(limits[k], v);
  const c = await call('cache-list', {}, {}, conn);
  const cached = c.models.some((m) => m.source === entry.url);
  const part = c.downloads.find((d) => d.source === entry.url);
  return { ...fit(entry, { limits, gpuMemory, storage: { usage: c.usage, quota: c.quota }, cached, have: part?.have || 0 }), cached };
}
const FIT_KINDS = { 'browser storage': 'storage', 'GPU memory': 'out-of-memory' };

/** The errors by kind (web/errors.mjs): ERROR_KINDS, BitwebError and one subclass per kind. */
export { ERROR_KINDS, BitwebError, errors };

// ------------------------------------------------------------------ checks (also done in Python)
const deepFreeze = (o) => { if (o && typeof o === 'object') { Object.values(o).forEach(deepFreeze); Object.freeze(o); } return o; };
/** The options and bounds bitweb shares with its Python side (pyapp/bitweb/options.py): activations,
 *  kv_cache, replace (each {default, choices: {value: label}}), lm_head, context ({min}), sampler, request
 *  (the create() settings' ranges), features and limits (what maskFeatures / capLimits name), download
 *  (its options' ranges), load (the load options: their types, their Python names), software_adapters. */
export const OPTIONS = deepFreeze(OPTIONS_DATA);
// name -> [integer?, lowest, highest, lowest excluded?], from OPTIONS.request (as bitweb.completions SETTINGS).
export const SETTINGS = Object.freeze(Object.fromEntries(Object.entries(OPTIONS.request)
  .map(([name, r]) => [name, Object.freeze([r.integer, r.min, r.max, !!r.min_excluded])])));
const MIN_CONTEXT = OPTIONS.context.min;
const oneOf = (values) => values.map((v) => JSON.stringify(v)).join(' or ');
/** The error message for one sampling setting, or null when `value` is fine. */
export function checkSetting(name, value) {
  const [integer, lo, hi, open] = SETTINGS[name];
  const want = integer ? `an integer from ${lo} to ${hi}` : `a number ${open ? 'above' : 'from'} ${lo} ${open ? 'and at most' : 'to'} ${hi}`;
  const ok = typeof value === 'number' && Number.isFinite(value) && (open ? value > lo : value >= lo) && value <= hi
    && (!integer || Number.isInteger(value));
  return ok ? null : `must be ${want} (got ${value === '' ? 'nothing' : JSON.stringify(value) ?? String(value)})`;
}
/** The GPU limits bitweb uses (capLimits may lower them; OPTIONS.limits, bitweb.gpu WANTED_LIMITS). */
export const LIMITS = OPTIONS.limits;
/** The GPU features bitweb uses when the adapter has them (maskFeatures may turn them off; OPTIONS.features, bitweb.gpu MASKABLE). */
export const FEATURES = OPTIONS.features;

// The load options are OPTIONS.load (pyapp/bitweb/options.py LOAD): each is checked here by its type, with
// the rules and messages of the Python side's check (bitweb.options check_load), before the worker starts.
const LOAD_CHECKS = {
  choice: (v, spec) => { const values = Object.keys(OPTIONS[spec.of].choices); return values.includes(v) ? null : `must be ${oneOf(values)} (got ${JSON.stringify(v)})`; },
  context: (v) => (Number.isInteger(v) && v >= MIN_CONTEXT ? null
    : `must be an integer of at least ${MIN_CONTEXT}, the positions the KV cache holds (got ${JSON.stringify(v)})`),
  number: (v, spec) => (Number.isFinite(v) && v > spec.min ? null : `must be a positive number of bytes (got ${JSON.stringify(v)})`),
  boolean: (v) => (typeof v === 'boolean' ? null : `must be true or false (got ${JSON.stringify(v)})`),
  limits: (v, spec, name) => {
    if (typeof v !== 'object') return 'must be an object {limitName: bytes or count}';
    for (const [k, n] of Object.entries(v)) {
      if (!LIMITS.includes(k)) throw settingsError(`${name}.${k}`, `not a limit bitweb uses (one of ${LIMITS.join(', ')})`);
      if (!(Number.isInteger(n) && n > 0)) throw settingsError(`${name}.${k}`, `must be a positive integer (got ${String(n)})`);
    }
    return null;
  },
  features: (v) => {
    if (!Array.isArray(v)) return `must be an array of feature names (${FEATURES.join(', ')})`;
    const bad = v.find((f) => !FEATURES.includes(f));
    return bad === undefined ? null : `${JSON.stringify(bad)} is not a feature bitweb uses (one of ${FEATURES.join(', ')})`;
  },
  download: (v, spec, name) => { checkDownload(v, name); return null; },
  source: (v) => ((typeof v === 'string' && v) || v instanceof URL || (typeof Blob !== 'undefined' && v instanceof Blob)
    || (v && typeof v === 'object' && (typeof v.url === 'string' || typeof v.cached === 'string')) ? null
    : 'must be a model as load() takes one: a URL, {url, sha256?, size?}, a File or Blob, or {cached: name}'),
};

function checkLoadOptions(o) {
  for (const [name, spec] of Object.entries(OPTIONS.load)) {
    if (o[name] == null) continue;
    const why = LOAD_CHECKS[spec.type](o[name], spec, name);
    if (why) throw settingsError(name, why);
  }
  if (o.onProgress != null && typeof o.onProgress !== 'function') throw settingsError('onProgress', 'must be a function');
}

// The load options as the worker takes them: each of OPTIONS.load, its default when unset.
function loadOptions(o) {
  const out = {};
  for (const [name, spec] of Object.entries(OPTIONS.load)) {
    out[name] = o[name] ?? (spec.type === 'choice' ? OPTIONS[spec.of].default : spec.default ?? null);
  }
  return out;
}

function checkDownload(d, name = 'download') {
  if (d == null) return;
  const ranges = OPTIONS.download;
  if (typeof d !== 'object') throw settingsError(name, `must be an object {${Object.keys(ranges).join(', ')}}`);
  for (const [k, v] of Object.entries(d)) {
    if (!ranges[k]) throw settingsError(`${name}.${k}`, `not a download option (one of ${Object.keys(ranges).join(', ')})`);
    const { min, max } = ranges[k];
    if (!(Number.isInteger(v) && v >= min && v <= max)) throw settingsError(`${name}.${k}`, `must be an integer from ${min} to ${max} (got ${String(v)})`);
  }
}

// One message as the worker takes it: {role, content}, an assistant's tool_calls, a tool result's tool_call_id
// (pyapp/bitweb/structured.py check_messages checks the rest).
function checkMessage(m, i) {
  const calls = m?.role === 'assistant' && m.tool_calls != null;
  if (!m || !['system', 'user', 'assistant', 'tool'].includes(m.role) || (typeof m.content !== 'string' && !(calls && m.content == null))) {
    throw settingsError('messages', `messages[${i}] must be {role: "system" | "user" | "assistant" | "tool", content: string}` +
      ' (an assistant\'s content may be null beside tool_calls)');
  }
  const out = { role: m.role, content: m.content ?? null };
  if (calls) {
    if (!Array.isArray(m.tool_calls) || m.tool_calls.some((c) => typeof c?.id !== 'string' || typeof c?.function?.name !== 'string'
      || typeof c.function.arguments !== 'string')) {
      throw settingsError('messages', `messages[${i}].tool_calls must be [{id, type: "function", function: {name, arguments: string}}]`);
    }
    out.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.function.name, arguments: c.function.arguments } }));
  }
  if (m.role === 'tool') {
    if (typeof m.tool_call_id !== 'string') throw settingsError('messages', `messages[${i}].tool_call_id must be the call's id (a string)`);
    out.tool_call_id = m.tool_call_id;
  }
  return out;
}
// A request's speculative decoding: null (plain decoding) or {mode: one of OPTIONS.speculative}; the same
// rules and messages as the worker's Python (bitweb.completions checked_speculative).
function checkSpeculative(v) {
  const modes = oneOf(Object.keys(OPTIONS.speculative.choices));
  const shown = (x) => JSON.stringify(x ?? null);
  if (typeof v !== 'object' || Array.isArray(v)) throw settingsError('speculative', `must be {mode: ${modes}} or null (got ${shown(v)})`);
  for (const k of Object.keys(v)) if (k !== 'mode') throw settingsError(`speculative.${k}`, 'not a speculative option (mode is the one)');
  if (typeof v.mode !== 'string' || !Object.hasOwn(OPTIONS.speculative.choices, v.mode)) throw settingsError('speculative.mode', `must be ${modes} (got ${shown(v.mode)})`);
  return { mode: v.mode };
}
// The structured-output fields go to the worker as given (JSON); Python checks them and names the field.
const STRUCTURED = ['response_format', 'grammar', 'tools', 'tool_choice', 'parallel_tool_calls'];

function checkRequest(r) {
  if (!r || typeof r !== 'object') throw settingsError('request', 'create() takes an object {messages, ...}');
  const msgs = r.messages;
  if (!Array.isArray(msgs) || !msgs.length) throw settingsError('messages', 'must be a non-empty array of {role, content}');
  const out = { messages: msgs.map(checkMessage) };
  for (const name of STRUCTURED) {
    if (r[name] == null) continue;
    try { out[name] = JSON.parse(JSON.stringify(r[name])); } catch (e) { throw settingsError(name, `must be plain JSON (${e.message})`); }
  }
  for (const name of Object.keys(SETTINGS)) {
    if (r[name] == null) continue;
    const why = checkSetting(name, r[name]);
    if (why) throw settingsError(name, why);
    out[name] = r[name];
  }
  if (r.stop != null) {
    const stops = typeof r.stop === 'string' ? [r.stop] : r.stop;
    if (!Array.isArray(stops) || stops.length > 4 || stops.some((s) => typeof s !== 'string' || !s)) {
      throw settingsError('stop', 'must be a non-empty string or an array of at most 4 non-empty strings');
    }
    out.stop = stops;
  }
  if (r.speculative != null) out.speculative = checkSpeculative(r.speculative);
  if (r.enable_thinking != null) {
    if (typeof r.enable_thinking !== 'boolean') throw settingsError('enable_thinking', 'must be true or false');
    out.enable_thinking = r.enable_thinking;
  }
  return out;
}

// ------------------------------------------------------------------ loading
// A URL source: the address resolved (hf: and Hugging Face page addresses, web/catalogue.mjs), and
// the SHA-256 and size the catalogue knows of it unless given.
function urlSource(url, sha256, size) {
  const href = resolveUrl(url, typeof location !== 'undefined' ? location.href : undefined);
  const e = entryForUrl(href);
  if (sha256 != null && !/^[0-9a-fA-F]{64}$/.test(sha256)) throw settingsError('sha256', `must be 64 hexadecimal digits (got ${JSON.stringify(sha256)})`);
  if (size != null && !(Number.isInteger(size) && size > 0)) throw settingsError('size', `must be a positive integer of bytes (got ${JSON.stringify(size)})`);
  const out = { url: href };
  const sha = sha256 ?? e?.sha256;
  if (sha) out.sha256 = sha.toLowerCase();
  if (size ?? (e?.sizeExact ? e.fileSize : null)) out.size = size ?? e.fileSize;
  return out;
}

function sourceOf(source) {
  if (source == null) return { url: DEFAULT_MODEL };
  if (typeof source === 'string' || source instanceof URL) return urlSource(String(source));
  if (typeof Blob !== 'undefined' && source instanceof Blob) return { file: source, name: source.name || 'model.gguf' };
  if (typeof source === 'object' && typeof source.cached === 'string') return { cached: source.cached };
  if (typeof source === 'object' && typeof source.url === 'string') return urlSource(source.url, source.sha256, source.size);
  if (typeof source === 'object' && typeof source.name === 'string' && 'saved' in source) return { cached: source.name };
  throw settingsError('source', 'must be a URL (or hf:owner/repo/file.gguf), {url, sha256?, size?}, a File or Blob, or {cached: name} ' +
    '(a name from bitweb.cache.list()), or a catalogue entry (bitweb.models)');
}

/**
 * Load a model into a new engine. The engines already loaded keep working while it loads; drop
 * the one it replaces with `old.unload()` once this resolves (or pass replace: 'always').
 * @param {string|URL|Blob|{cached: string}} [source] default: DEFAULT_MODEL
 * @param {import('./bitweb.d.ts').LoadOptions} [options]
 * @returns {Promise<Engine>}
 */
export async function load(source, options = {}) {
  checkLoadOptions(options);
  if (options.draft != null) return loadWithDraft(source, options);
  const src = sourceOf(source);
  const { signal, onProgress } = options;
  if (signal?.aborted) throw error('aborted', 'the load was aborted before it started');
  const opts = loadOptions({ ...options, maskFeatures: options.maskFeatures?.length ? [...options.maskFeatures] : null, draft: null });
  const conn = await hostFor(options.share);
  const entry = src.url ? entryForUrl(src.url) : null;
  if (entry) {                                  // a catalogue model that cannot fit is not downloaded
    const f = await checkFit(entry, opts, conn);
    if (f.verdict === 'no' && !f.cached) throw error(FIT_KINDS[f.limit] || 'limits', `${entry.name} ${f.text} (checked before downloading it)`);
  }
  const body = { source: src, options: opts };
  let v = await loadOn(conn, body, signal, onProgress);
  if (v.needsCache) {                           // the shared engine reads the cache only: this page's download worker fills it
    const epoch = () => performance.timeOrigin + performance.now();
    const d0 = epoch();
    const [d] = await Promise.all([    // (Python boots in the shared worker meanwhile: its progress too)
      call('cache-add', { source: src, options: { download: opts.download } }, { signal, onProgress }, theDownloader()),
      call('boot', {}, { onProgress }, conn)]);
    const d1 = epoch();
    try {
      v = await loadOn(conn, body, signal, onProgress);
    } catch (e) {                               // a model that does not load is not kept, as without share
      if (!d.cached && e.kind !== 'aborted') await call('cache-delete', { name: d.name }, {}, theDownloader()).catch(() => {});
      throw e;
    }
    if (v.needsCache) throw error('storage', `${src.url} was downloaded but the shared engine does not find it in the browser cache`);
    // the download is a stage of this load (whole before the load reads it: no upload while it goes on)
    Object.assign(v.load.stages, { download: [d0, d1], ready: [d0, v.load.stages.ready[1]] });
    if (!d.cached) v.load.download = { resumedFrom: d.resumedFrom, retries: d.retries, notes: d.notes, sha256: d.sha256 };
  }
  if (conn.kind === 'shared' && src.file && opts.cache !== false) {   // (the shared engine does not write the cache)
    try {
      await call('cache-add', { source: src, options: { download: null } }, { onProgress }, theDownloader());
    } catch (e) {
      v.cacheError = e.message;                 // the model works; it is just not cached
    }
  }
  v.load.catalogueDiff = entry ? headerDiff(entry, v.info) : [];      // the header wins; the difference is logged
  if (v.load.catalogueDiff.length) console.warn(`bitweb: ${entry.name} loaded by its header, which differs from the catalogue:`, v.load.catalogueDiff);
  const engine = new Engine(v, conn, options.share);
  conn.live.set(v.engine, engine);
  return engine;
}

// A load request. A shared engine's comes with a port to this page's download worker, which reads
// the cached copy for it (a shared worker has no OPFS sync access handles: web/models.mjs open).
async function loadOn(conn, body, signal, onProgress) {
  if (conn.kind !== 'shared') return call('load', body, { signal, onProgress }, conn);
  const ch = new MessageChannel();
  await call('file-port', { port: ch.port1 }, { transfer: [ch.port1] }, theDownloader());
  return call('load', { ...body, files: ch.port2 }, { signal, onProgress, transfer: [ch.port2] }, conn);
}

// load(source, {draft}): the target, then the draft model as an engine of its own with the same options and
// the target's context (on the same device: the same options ask for the same one), which the worker's
// Python checks (the same vocabulary) and attaches to the target (request set-draft); anything failing
// unloads both. The draft is engine.draft, unloaded with the target.
async function loadWithDraft(source, { draft, ...options }) {
  const target = await load(source, options);
  let drafter = null;
  try {
    drafter = await load(draft, { ...options, context: target.info.context, replace: null });   // (never unloads the target)
    await call('set-draft', { engine: target.id, draft: drafter.id }, {}, target._conn);
  } catch (e) {
    await drafter?.unload().catch(() => {});
    await target.unload().catch(() => {});
    throw e;
  }
  target.draft = drafter;
  return target;
}

// OpenAI's usage, with the prompt tokens whose KV came from the engine's cache (the longest prefix
// this engine had computed already: earlier turns, a regenerated reply, a conversation switched back to).
const usageOf = (v) => ({ ...v.usage, prompt_tokens_details: { cached_tokens: v.timing?.cached_tokens ?? 0 } });

let completionN = 0;
const completionId = () => `chatcmpl-${Date.now().toString(36)}${(completionN++).toString(36)}`;

// The load's stage times, from the worker's clock (epoch ms) to this page's (ms since it started,
// as performance.now()): {stage: [start, end]}.
function pageTimes(stages) {
  const out = {};
  for (const [k, [a, b]] of Object.entries(stages || {})) {
    out[k] = [a, b].map((t) => Math.round((t - performance.timeOrigin) * 10) / 10);
  }
  return out;
}

export class Engine {
  constructor(v, conn, share = null) {
    this.id = v.engine;
    this._conn = conn;
    this._sharedBy = v.sharedBy ?? 1;
    const engine = this;
    const i = v.info;
    v.load.stages = pageTimes(v.load.stages);
    /** What was loaded: the model, the GPU adapter and the load's own figures. */
    this.info = Object.freeze({
      name: v.name || i.name, title: i.title, architecture: i.arch, fileSize: i.file_size, headerBytes: i.header_bytes,
      tensorTypes: i.tensor_types, weights: i.linear_type, vocabulary: i.n_vocab,
      context: v.load.n_ctx, contextMax: i.n_ctx, contextNote: v.load.context_note || '', layers: i.n_layer, width: i.n_embd,
      heads: i.n_head, kvHeads: i.n_head_kv, ffn: i.n_ff, tied: i.tied,
      activations: v.load.activations, kvCache: v.load.kv_cache, thinking: !!i.thinking, thinkingDefault: !!i.thinking_default,
      adapter: v.adapter, features: v.adapter.features, load: v.load, cacheError: v.cacheError || null,
      // why this page has an engine of its own where it asked to share (load share: true, or connect)
      shared: conn.kind === 'shared', sharedNote: share === false ? '' : conn.note,
      get sharedBy() { return engine._sharedBy; },
    });
    this._state = 'ready';
    this._lostMessage = null;
    /** The draft model loaded with it (load(source, {draft})), unloaded with it; else null. */
    this.draft = null;
    let lose;
    /** Resolves with a message when the GPU device is lost (the engine is then gone). */
    this.lost = new Promise((r) => { lose = r; });
    this._lose = (message) => { this._state = 'lost'; this._lostMessage = message; lose(message); };
    this.chat = { completions: { create: (request) => engine._create(request) } };
  }

  /** 'ready' | 'unloaded' | 'lost' */
  get state() { return this._state; }

  _check() {
    if (this._state === 'lost') throw error('device-lost', this._lostMessage || 'the GPU device was lost; load the model again');
    if (this._state === 'unloaded') throw error('unloaded', 'this engine was unloaded; load a model again');
  }

  /**
   * Token ids of a text (no BOS), or of a chat's whole prompt (messages and tools, as create() would send).
   * @param {string|Array<{role: string, content: string}>} input
   * @returns {Promise<number[]>}
   */
  async tokenize(input, { enable_thinking, tools } = {}) {
    this._check();
    let request;
    if (typeof input === 'string') request = { text: input };
    else request = { ...checkRequest({ messages: input, tools }), enable_thinking };
    return (await call('tokenize', { engine: this.id, request }, {}, this._conn)).ids;
  }

  /** Free the engine's GPU buffers. Later calls on it fail with kind "unloaded". */
  async unload() {
    if (this._state !== 'ready') return;
    this._state = 'unloaded';
    this._conn.live.delete(this.id);
    await call('unload', { engine: this.id }, {}, this._conn);
    await this.draft?.unload();          // (after this engine's queued replies, which draft with it)
  }

  async _create(request) {
    this._check();
    const req = checkRequest(request);
    const { signal } = request;
    if (signal?.aborted) throw error('aborted', 'the request was aborted before it started');
    const id = completionId(), created = Math.floor(Date.now() / 1000), model = this.info.name;
    if (!request.stream) {
      const v = await call('generate', { engine: this.id, request: req }, { signal }, this._conn);
      const message = { role: 'assistant', content: v.text };
      if (v.tool_calls) Object.assign(message, { content: v.text || null, tool_calls: v.tool_calls });
      return { id, object: 'chat.completion', created, model,
        choices: [{ index: 0, message, finish_reason: v.finish_reason }], usage: usageOf(v), timing: v.timing };
    }
    return stream(this, req, signal, { id, created, model });
  }
}

// An async iterator of chat.completion.chunk objects; breaking out of the loop stops the generation.
function stream(engine, req, signal, head) {
  const queue = [];
  let wake = null, finished = false, failure = null, first = true;
  const push = (chunk) => { queue.push(chunk); wake?.(); };
  const chunk = (delta, finish_reason, extra) => ({ ...head, object: 'chat.completion.chunk',
    choices: [{ index: 0, delta, finish_reason }], ...extra });
  const own = new AbortController();
  const both = signal ? AbortSignal.any([signal, own.signal]) : own.signal;
  const delta = (d) => { push(chunk(first ? { role: 'assistant', ...d } : d, null)); first = false; };
  call('generate', { engine: engine.id, request: req }, {
    signal: both,
    onText: (text) => delta({ content: text }),
    // a tool call streams as OpenAI's: its id and name first, then pieces of its arguments
    onToolCall: (m) => delta({ tool_calls: [m.call_id
      ? { index: m.index, id: m.call_id, type: 'function', function: { name: m.name, arguments: '' } }
      : { index: m.index, function: { arguments: m.arguments } }] }),
  }, engine._conn).then((v) => {
    push(chunk(first ? { role: 'assistant', content: '' } : {}, v.finish_reason, { usage: usageOf(v), timing: v.timing }));
    finished = true; wake?.();
  }, (e) => { failure = e; finished = true; wake?.(); });
  return {
    [Symbol.asyncIterator]() { return this; },
    async next() {
      for (;;) {
        if (queue.length) return { value: queue.shift(), done: false };
        if (failure) { const e = failure; failure = null; throw e; }
        if (finished) return { value: undefined, done: true };
        await new Promise((r) => { wake = r; });
        wake = null;
      }
    },
    async return() {
      if (!finished) own.abort();
      queue.length = 0;
      finished = true;
      return { value: undefined, done: true };
    },
    /** Stop the generation (the stream then ends with finish_reason "abort"). */
    abort() { own.abort(); },
  };
}

// ------------------------------------------------------------------ the cache
export const cache = {
  /** Models in the browser cache (OPFS): [{name, size, source, saved}], newest first. */
  async list() { return (await call('cache-list')).models; },
  /** Downloads not in the cache yet (stopped, broken off, or not loaded yet): [{name, source, have, size, complete}];
   *  loading (or cache.download()) the same URL again resumes one. */
  async downloads() { return (await call('cache-list')).downloads; },
  /**
   * Download a model into the cache without loading it (resuming a download of it that broke off);
   * it enters the cache list once it has loaded. Resolves {name, size, cached, resumedFrom, retries, notes}.
   * @param {string|URL|{url: string, sha256?: string, size?: number}} source
   * @param {{onProgress?: Function, signal?: AbortSignal, download?: {stallMs?: number, retries?: number, retryDelayMs?: number}}} [options]
   */
  async download(source, { onProgress, signal, download } = {}) {
    if (onProgress != null && typeof onProgress !== 'function') throw settingsError('onProgress', 'must be a function');
    checkDownload(download);
    const src = typeof source === 'string' || source instanceof URL ? urlSource(String(source))
      : source && typeof source.url === 'string' ? urlSource(source.url, source.sha256, source.size) : null;
    if (!src) throw settingsError('source', 'must be a URL or {url, sha256?, size?}');
    if (signal?.aborted) throw error('aborted', 'the download was aborted before it started');
    const conn = cacheWriter();                             // (a shared worker cannot write the cache)
    return call('download', { source: src, options: { download: download || null } }, { signal, onProgress }, conn);
  },
  /** Storage figures: {usage, quota, persisted} (bytes; null when the browser does not say). */
  async estimate() { const v = await call('cache-list'); return { usage: v.usage, quota: v.quota, persisted: v.persisted }; },
  /** Delete a cached model; true when it was there. */
  async delete(name) { return (await call('cache-delete', { name })).removed; },
  /** The saved KV caches of conversations (OPFS bitweb-kv/, web/kvstore.mjs; load option kvSaveBytes bounds
   *  them): {bytes, entries, bound: the default bound}, once the saves still running after replies are done. */
  async conversations() { await call('kv-settled'); return (await import('./kvstore.mjs')).usage(); },
  /** Delete every saved KV cache of conversations (the next reply of each reads its conversation again). */
  async clearConversations() { await (await import('./kvstore.mjs')).clear(); },
  /** Ask the browser to keep the cache (navigator.storage.persist()): true when it will. */
  async persist() { return navigator.storage?.persist ? navigator.storage.persist() : false; },
};

/** Diagnostics: {wasm_bytes, live_buffers, live_bytes, engines} of the worker (live_*: GPU buffers alive);
 *  a shared engine's add `shared`: {page (this page's number), pages, engines, queued, running, served, hold}. */
export async function stats() { return call('stats'); }

/** Test hooks. */
export const debug = {
  /** Destroy the GPU device as if the GPU went away: every engine's `lost` resolves. */
  async loseDevice() { await call('debug-lose-device'); },
  /** A shared engine: hold (true) or go on starting (false) the queued generations of every page. */
  async hold(on) { await call('debug-hold', { hold: !!on }); },
};
