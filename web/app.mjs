// The page: renders what the worker (worker.mjs; protocol at its top) reports. No model code here.
// Model output is only ever inserted as text (Text nodes / textContent), never as HTML.

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const DEFAULT_URL = params.get('model') ? new URL(params.get('model'), location.href).href : null;
const SILENCE_MS = 120_000;      // warn when a busy worker says nothing for this long
// ?cap=maxStorageBufferBindingSize:65536,... : act as a GPU with smaller limits (to see what happens there)
const CAP_LIMITS = Object.fromEntries((params.get('cap') || '').split(',').filter(Boolean).map((kv) => kv.split(':')).map(([k, v]) => [k, Number(v)]));

const state = {
  phase: 'boot',                 // boot | loading | ready | generating | failed
  model: null,                   // last 'ready' payload
  lastLoad: null,                // the last load request (for "Reload model")
  reply: null,                   // {node: Text, el, text} of the streaming assistant message
  chatStarted: false,
  lastHeard: performance.now(),
  seen: {},                      // progress stages seen during the last load: {stage: {done, total}}
  lastDone: null,                // the last 'done' message
};
window.bitweb = { state };

// ------------------------------------------------------------------ worker
let worker = null;

function startWorker() {
  worker = new Worker(new URL('./worker.mjs', import.meta.url), { type: 'module' });
  worker.onmessage = ({ data }) => { state.lastHeard = performance.now(); hideSilence(); handle(data); };
  worker.onerror = (e) => {
    e.preventDefault();
    showError('internal', `The worker failed to start or crashed: ${e.message || 'unknown error'}` +
      (e.filename ? ` (${e.filename}:${e.lineno})` : ''));
    setPhase('failed');
  };
  worker.onmessageerror = () => showError('internal', 'A message from the worker could not be read.');
  window.bitweb.worker = worker;
}

function send(msg) { state.lastHeard = performance.now(); worker.postMessage(msg); }

function setPhase(p) {
  state.phase = p;
  document.body.dataset.state = p;
  $('send').disabled = p !== 'ready';
  $('send').hidden = p === 'generating';
  $('stop').hidden = p !== 'generating';
  const status = { boot: 'starting…', loading: 'loading model…', generating: 'generating…', failed: 'no model' }[p];
  $('status').textContent = p === 'ready' ? (state.model ? state.model.model.title : 'ready') : status;
}

// ------------------------------------------------------------------ messages from the worker
function handle(m) {
  switch (m.type) {
    case 'progress': return progress(m);
    case 'ready': return ready(m);
    case 'token': return token(m.text);
    case 'done': return done(m);
    case 'error': return workerError(m);
    case 'cache': return renderCache(m);
    case 'idle': return idle();
  }
}

const BAR_OF = { cache: 'download' };
const STAGE_LABEL = { pyodide: 'Starting Python (Pyodide)…', upload: 'Uploading the weights to the GPU…', compile: 'Compiling the GPU kernels…' };
function progress(m) {
  state.seen[m.stage] = { done: m.done, total: m.total };
  if (m.stage === 'ready') return;
  $('progress').hidden = false;
  const bar = document.querySelector(`#progress .bar[data-stage="${BAR_OF[m.stage] || m.stage}"]`);
  const label = m.label || STAGE_LABEL[m.stage];
  if (label) $('progress-label').textContent = label;
  if (!bar) return;
  bar.classList.add('active');
  const p = bar.querySelector('progress');
  if (m.total > 0 && !(m.stage === 'pyodide' && m.done === 0)) { p.max = m.total; p.value = m.done; } else p.removeAttribute('value');
  bar.querySelector('small').textContent = m.total > 1 ? (m.total > 4096 ? `${mb(m.done)} / ${mb(m.total)}` : `${m.done} / ${m.total}`)
    : m.done >= m.total && m.total ? 'done' : '';
}

function ready(m) {
  state.model = m;
  state.bootFallback = false;
  $('progress').hidden = true;
  document.querySelectorAll('#progress .bar').forEach((b) => b.classList.remove('active'));
  hideError();
  const i = m.model;
  kv($('model-info'), [
    ['Model', i.title], ['File', `${i.name} (${mb(i.file_size)})`], ['Architecture', i.arch],
    ['Layers × width', i.n_layer != null ? `${i.n_layer} × ${i.n_embd}` : null],
    ['Heads (KV)', i.n_head != null ? `${i.n_head} (${i.n_head_kv})` : null],
    ['Vocabulary', i.n_vocab], ['Context', m.load.n_ctx && m.load.n_ctx !== i.n_ctx ? `${m.load.n_ctx} of ${i.n_ctx}` : i.n_ctx],
    ['Weights', i.linear_type],
    ['Activations', m.load.activations],
  ]);
  const a = m.adapter;
  const L = a.limits || {};
  kv($('adapter'), [
    ['Adapter', [a.info.vendor, a.info.description || a.info.device || a.info.architecture].filter(Boolean).join(' ') || '(unnamed)'],
    ['Features used', a.features.length ? a.features.join(', ') : 'none'],
    ['Shader paths', a.caps],
    ['maxBufferSize', mb(L.maxBufferSize)],
    ['maxStorageBufferBindingSize', mb(L.maxStorageBufferBindingSize)],
    ['maxStorageBuffersPerShaderStage', L.maxStorageBuffersPerShaderStage],
    ['maxComputeWorkgroupStorageSize', L.maxComputeWorkgroupStorageSize != null ? `${L.maxComputeWorkgroupStorageSize} B` : null],
  ]);
  setStats({ 'Load time': sec(m.load.ms), 'Header read': mb(m.load.header_read) });
  if (state.lastLoad) localStorage.setItem('bitweb.last', JSON.stringify(lastSource(state.lastLoad.source, i.name)));
  state.chatStarted = false;
  setPhase('ready');
}

function token(text) {
  if (state.discard) return;             // the tail of a generation the user walked away from
  if (!state.reply) state.reply = addMessage('assistant', '');
  state.reply.node.appendData(text);          // text, never HTML
  state.reply.text += text;
  if (state.reply.first == null) state.reply.first = performance.now();
  scrollDown();
}

function done(m) {
  state.lastDone = m;
  if (state.discard) {                   // stopped by "New chat" or a model load: nothing to show
    state.discard = false;
    if (state.phase === 'generating') setPhase('ready');
    return;
  }
  const r = state.reply || addMessage('assistant', '');
  state.reply = null;
  r.el.classList.remove('streaming');
  r.el.dataset.stopReason = m.stop_reason;
  r.el.dataset.done = '1';
  const s = m.stats;
  const foot = [`${s.tokens} tokens`];
  if (s.ttft_ms != null) foot.push(`first token ${sec(s.ttft_ms)}`);
  if (s.decode_tok_s) foot.push(`${s.decode_tok_s.toFixed(1)} tok/s`);
  if (m.stop_reason === 'stopped') foot.push('stopped');
  else if (m.stop_reason === 'max_tokens') foot.push('max tokens reached');
  else if (m.stop_reason === 'context') foot.push('context full');
  r.foot.textContent = foot.join(' · ');
  setStats({
    'Load time': state.model ? sec(state.model.load.ms) : '–',
    'Time to first token': s.ttft_ms != null ? sec(s.ttft_ms) : '–',
    'Tokens/s (decode)': s.decode_tok_s != null ? s.decode_tok_s.toFixed(2) : '–',
    'Prefill tokens/s': s.prefill_tok_s != null ? `${s.prefill_tok_s.toFixed(1)} (${s.prefill_tokens} tokens)` : '–',
    'Tokens': s.tokens, 'Stop': m.stop_reason,
  });
  setPhase('ready');
  $('input').focus();
}

function idle() {
  if (state.phase === 'loading' && !state.model) setPhase('failed');
  else if (state.phase === 'loading' || state.phase === 'generating') setPhase(state.model ? 'ready' : 'failed');
}

// ------------------------------------------------------------------ errors
const ADVICE = {
  'no-webgpu': ['WebGPU is not available', [
    'Use a recent Chrome or Edge (version 113 or later) on a desktop or laptop.',
    'On Linux, start Chrome with --enable-unsafe-webgpu (and --enable-features=Vulkan), or enable chrome://flags/#enable-unsafe-webgpu.',
    'Firefox Nightly and Safari Technology Preview: enable WebGPU in their settings or feature flags.',
    'Open the page from http://localhost, http://127.0.0.1 or https (WebGPU needs a secure context).']],
  limits: ['This GPU\'s limits are too small for this model', ['Try a smaller model, or another browser or GPU with larger limits.']],
  format: ['This file is not a model bitweb can read', ['bitweb reads GGUF files (versions 2 and 3) with BitNet b1.58 weights.']],
  context: ['The conversation no longer fits the model\'s context', ['Start a new chat (or use a model with a longer context).']],
  unsupported: ['This model is not supported', ['bitweb runs the BitNet architectures bitnet-b1.58 (2B4T) and bitnet (1bitLLM).']],
  'device-lost': ['The GPU device was lost', ['This happens when the GPU driver resets, the GPU runs out of memory, or the tab was in the background for long. Reload the model to continue.']],
  oom: ['Out of GPU memory', ['Close other tabs or programs that use the GPU, or load a smaller model.']],
  network: ['Download failed', ['Check the URL and your connection. A model downloaded once stays in the browser cache and loads offline.']],
  storage: ['Browser storage problem', ['Delete cached models you do not need, or allow the site more storage.']],
  settings: ['Invalid setting', []],
  'no-model': ['No model loaded', ['Load the default model, a file, or a URL first.']],
  gpu: ['GPU error', []],
  internal: ['Something went wrong', ['Reload the page. If it happens again, the message above helps to report it.']],
  timeout: ['No answer from the worker', ['It has said nothing for two minutes. A slow (software) GPU may still finish; otherwise reload the page.']],
};

function workerError(m) {
  if (state.discard && m.during === 'generate') { state.discard = false; return; }
  if (state.phase === 'loading' && m.during !== 'cache') $('progress').hidden = true;
  if (state.reply) {                       // a generation ended in an error
    state.reply.el.classList.remove('streaming');
    state.reply.foot.textContent = 'error';
    state.reply = null;
  }
  showError(m.kind, m.message, m.advice);
  if (m.kind === 'device-lost') { state.model = null; setPhase('failed'); return; }
  if (state.phase === 'loading' && m.loaded && state.prevModel) {   // the old model is still there
    state.model = state.prevModel;
    setPhase('ready');
    return;
  }
  if (m.during === 'cache' && m.kind === 'storage') return;  // the load itself goes on
  if (state.phase === 'loading' && state.bootFallback && m.kind === 'storage') {
    state.bootFallback = false;              // the remembered cached model is gone: use the default
    hideError();
    return load('default');
  }
  if (state.phase === 'generating') setPhase('ready');
}

function showError(kind, message, extra = []) {       // extra: the worker's advice lines (e.g. the formats)
  const [title, ownAdvice] = ADVICE[kind] || ADVICE.internal;
  const advice = [...ownAdvice, ...extra];
  $('error').hidden = false;
  $('error').dataset.kind = kind;
  $('error-title').textContent = title;
  $('error-text').textContent = message;
  const ul = $('error-advice');
  ul.replaceChildren(...advice.map((a) => { const li = document.createElement('li'); li.textContent = a; return li; }));
  const actions = [];
  if ((kind === 'device-lost' || kind === 'oom' || kind === 'gpu') && state.lastLoad) actions.push(['Reload model', () => { hideError(); load(state.lastLoad.source); }]);
  if (kind === 'internal' || kind === 'timeout' || kind === 'device-lost') actions.push(['Reload page', () => location.reload()]);
  actions.push(['Dismiss', hideError]);
  $('error-actions').replaceChildren(...actions.map(([t, fn]) => { const b = document.createElement('button'); b.type = 'button'; b.textContent = t; b.onclick = fn; return b; }));
}

function hideError() { $('error').hidden = true; delete $('error').dataset.kind; }

let silenceShown = false;
function hideSilence() { if (silenceShown) { silenceShown = false; if ($('error').dataset.kind === 'timeout') hideError(); } }
setInterval(() => {
  const busy = state.phase === 'boot' || state.phase === 'loading' || state.phase === 'generating';
  if (busy && !silenceShown && performance.now() - state.lastHeard > SILENCE_MS) {
    silenceShown = true;
    showError('timeout', `The worker has not reported anything for ${SILENCE_MS / 1000} s (while ${state.phase}).`);
  }
}, 5000);

// ------------------------------------------------------------------ chat
function addMessage(role, text) {
  const el = document.createElement('div');
  el.className = `msg ${role}` + (role === 'assistant' ? ' streaming' : '');
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = role === 'user' ? 'You' : 'Model';
  const body = document.createElement('div');
  body.className = 'text';
  const node = document.createTextNode(text);
  body.append(node);
  const foot = document.createElement('div');
  foot.className = 'foot';
  el.append(who, body, foot);
  $('chat').append(el);
  scrollDown();
  return { el, node, foot, text };
}

function scrollDown() { const c = $('chat'); c.scrollTop = c.scrollHeight; }

function settings() {
  const s = {};
  for (const input of $('settings').querySelectorAll('input')) s[input.name] = input.value === '' ? null : Number(input.value);
  return s;
}

function sendMessage() {
  const text = $('input').value;
  if (state.phase !== 'ready' || !text.trim()) return;
  $('input').value = '';
  addMessage('user', text).el.classList.remove('streaming');
  state.reply = addMessage('assistant', '');
  setPhase('generating');
  send({ type: 'generate', text, system: state.chatStarted ? undefined : $('system').value, settings: settings() });
  state.chatStarted = true;
}

// Stop a running generation whose reply will not be shown.
function abandon() {
  if (state.phase !== 'generating') return;
  send({ type: 'stop' });
  state.discard = true;
}

function newChat() {
  abandon();
  send({ type: 'reset' });
  $('chat').replaceChildren();
  state.reply = null;
  state.chatStarted = false;
  $('input').focus();
}

// ------------------------------------------------------------------ models
function load(source) {
  abandon();
  hideError();
  state.lastLoad = { source, activations: $('activations').value, maxContext: $('max-context').value };
  state.prevModel = state.model;
  state.model = null;
  state.seen = {};
  $('chat').replaceChildren();
  state.reply = null;
  state.chatStarted = false;
  document.querySelectorAll('#progress .bar').forEach((b) => { b.classList.remove('active'); b.querySelector('small').textContent = ''; });
  setPhase('loading');
  const msg = { type: 'load', source, activations: $('activations').value, cache: $('cache-files').checked };
  if ($('max-context').value) msg.maxContext = Number($('max-context').value);
  if (DEFAULT_URL) msg.defaultUrl = DEFAULT_URL;
  if (Object.keys(CAP_LIMITS).length) msg.capLimits = CAP_LIMITS;
  send(msg);
}

// What to load next time: the default model by its source (so a newer default is noticed), others by cache name.
function lastSource(source, name) {
  if (source === 'default') return 'default';
  if (source.file && !$('cache-files').checked) return 'default';
  return { cached: source.cached || name };
}

function renderCache(m) {
  const ul = $('cache-list');
  ul.replaceChildren(...m.models.map((e) => {
    const li = document.createElement('li');
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = e.name;
    name.title = e.source || '';
    const size = document.createElement('small');
    size.textContent = mb(e.size);
    const use = document.createElement('button');
    use.type = 'button'; use.textContent = 'Load'; use.onclick = () => load({ cached: e.name });
    const del = document.createElement('button');
    del.type = 'button'; del.textContent = 'Delete'; del.className = 'danger';
    del.setAttribute('aria-label', `Delete ${e.name} from the cache`);
    del.onclick = () => send({ type: 'cache-delete', name: e.name });
    li.append(name, size, use, del);
    return li;
  }));
  if (!m.models.length) { const li = document.createElement('li'); li.className = 'hint'; li.textContent = 'none'; ul.append(li); }
  const total = m.models.reduce((a, e) => a + e.size, 0);
  $('cache-usage').textContent = `${m.models.length} cached, ${mb(total)}` + (m.quota ? ` (browser storage: ${mb(m.usage)} of ${mb(m.quota)} available)` : '') + (m.error ? ` — ${m.error}` : '');
}

// ------------------------------------------------------------------ small helpers
function mb(n) {
  if (n == null) return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  return `${(n / (1 << 30)).toFixed(2)} GiB`;
}
function sec(ms) { return ms == null ? '–' : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`; }

function kv(el, rows) {
  const dl = document.createElement('dl');
  for (const [k, v] of rows) {
    if (v == null || v === '') continue;
    const dt = document.createElement('dt'); dt.textContent = k;
    const dd = document.createElement('dd'); dd.textContent = String(v);
    dl.append(dt, dd);
  }
  el.replaceChildren(dl);
}

function setStats(obj) {
  const dl = $('stats');
  dl.replaceChildren();
  for (const [k, v] of Object.entries(obj)) {
    const dt = document.createElement('dt'); dt.textContent = k;
    const dd = document.createElement('dd'); dd.textContent = String(v); dd.dataset.stat = k;
    dl.append(dt, dd);
  }
}

// ------------------------------------------------------------------ settings persistence
function restoreSettings() {
  try {
    const saved = JSON.parse(localStorage.getItem('bitweb.settings') || '{}');
    for (const input of $('settings').querySelectorAll('input')) if (saved[input.name] != null) input.value = saved[input.name];
    if (saved.system != null) $('system').value = saved.system;
    if (saved.activations) $('activations').value = saved.activations;
    if (saved.maxContext) $('max-context').value = saved.maxContext;
    if (saved.cacheFiles != null) $('cache-files').checked = saved.cacheFiles;
  } catch { /* ignore a bad saved value */ }
}
function saveSettings() {
  const s = settings();
  s.system = $('system').value;
  s.activations = $('activations').value;
  s.maxContext = $('max-context').value;
  s.cacheFiles = $('cache-files').checked;
  localStorage.setItem('bitweb.settings', JSON.stringify(s));
}

// ------------------------------------------------------------------ wiring
function wire() {
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); sendMessage(); });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); sendMessage(); }
  });
  $('stop').addEventListener('click', () => { send({ type: 'stop' }); $('stop').textContent = 'Stopping…'; setTimeout(() => { $('stop').textContent = 'Stop'; }, 0); });
  $('new-chat').addEventListener('click', newChat);
  $('load-default').addEventListener('click', () => load('default'));
  $('file-input').addEventListener('change', (e) => { const f = e.target.files[0]; if (f) load({ file: f }); e.target.value = ''; });
  $('url-form').addEventListener('submit', (e) => { e.preventDefault(); load({ url: $('url-input').value }); });
  const reload = () => {     // activations / context changed: load the current model again with them
    saveSettings();
    const same = state.lastLoad && state.lastLoad.activations === $('activations').value && state.lastLoad.maxContext === $('max-context').value;
    if (state.lastLoad && state.model && !same) load(state.lastLoad.source.file && $('cache-files').checked ? { cached: state.model.model.name } : state.lastLoad.source);
  };
  $('activations').addEventListener('change', reload);
  $('max-context').addEventListener('change', reload);
  $('side').addEventListener('change', saveSettings);
  $('menu').addEventListener('click', () => {
    const open = document.body.classList.toggle('side-open');
    $('menu').setAttribute('aria-expanded', String(open));
  });
  let depth = 0;
  window.addEventListener('dragenter', (e) => { if (e.dataTransfer?.types.includes('Files')) { depth++; $('drop').hidden = false; } });
  window.addEventListener('dragleave', () => { if (--depth <= 0) { depth = 0; $('drop').hidden = true; } });
  window.addEventListener('dragover', (e) => e.preventDefault());
  window.addEventListener('drop', (e) => {
    e.preventDefault();
    depth = 0; $('drop').hidden = true;
    const f = e.dataTransfer?.files?.[0];
    if (f) load({ file: f });
  });
}

function boot() {
  wire();
  restoreSettings();
  if (!('gpu' in navigator)) {
    setPhase('failed');
    showError('no-webgpu', window.isSecureContext
      ? 'This browser does not expose WebGPU (navigator.gpu is missing).'
      : `This page is not a secure context (${location.origin}), so WebGPU is off.`);
    return;
  }
  startWorker();
  send({ type: 'cache-list' });
  let source = 'default';
  try {
    const last = JSON.parse(localStorage.getItem('bitweb.last') || 'null');
    if (last && last.cached && !DEFAULT_URL) { source = last; state.bootFallback = true; }
  } catch { /* default */ }
  load(source);
}

boot();
