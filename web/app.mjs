// The chat page, built on the public library (bitweb.mjs) only: every model load, reply, token
// count and cache operation goes through its API. Conversations live in IndexedDB (app/store.mjs);
// replies render as Markdown built as DOM nodes (app/markdown.mjs): model text never becomes HTML.
import * as bitweb from './bitweb.mjs';
import * as store from './app/store.mjs';
import { copyText, render, splitThinking } from './app/markdown.mjs';
import { parseCap } from './cap.mjs';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const DEFAULT_NAME = 'bitweb-chat-i2_s.gguf';
const SILENCE_MS = 120_000;      // warn when a busy engine says nothing for this long

const state = {
  engine: null,                  // the bitweb Engine answering now
  source: null,                  // what it was loaded from (to reload it with other settings)
  loading: null,                 // {ctl, source} of the load in progress
  gen: null,                     // {ctl, reply, engine, done} of the reply being generated
  conv: null,                    // the open conversation (store.mjs shape)
  convs: [],                     // all conversations (newest first)
  seen: {},                      // progress stages seen during the last load: {stage: {done, total}}
  lastLoadError: null,
  lastReply: null,               // {finish_reason, usage, timing} of the last reply
  lastHeard: performance.now(),
  context: null,                 // tokens the open conversation takes, as last counted
};
window.bitwebApp = { state, bitweb, store };

// ------------------------------------------------------------------ the address: ?model= and ?cap= (cap.mjs)
function fromAddress() {
  const out = { defaultSource: bitweb.DEFAULT_MODEL, ...parseCap(params.get('cap')) };
  if (params.get('model')) out.defaultSource = new URL(params.get('model'), location.href).href;
  return out;
}
const ADDRESS = fromAddress();

// ------------------------------------------------------------------ phase and status
function busy() { return !!(state.loading || state.gen); }
function updatePhase() {
  const p = state.gen ? 'generating' : state.loading ? 'loading' : state.engine ? 'ready' : (state.lastLoadError ? 'failed' : 'boot');
  document.body.dataset.state = p;
  const problem = settingsProblem();
  $('send').disabled = !state.engine || !!state.gen || !!problem;
  $('send').hidden = !!state.gen;
  $('stop').hidden = !state.gen;
  $('send-problem').hidden = !problem || !state.engine;
  $('send-problem').textContent = problem ? `Fix the settings to send: ${problem}` : '';
  const loadingText = state.loading ? `loading ${state.loading.name}…` : '';
  const status = state.gen ? 'generating…' : state.engine ? state.engine.info.title + (loadingText ? ` (${loadingText})` : '')
    : loadingText || (p === 'failed' ? 'no model' : 'starting…');
  $('status').textContent = status;
  document.querySelectorAll('.example').forEach((b) => { b.disabled = !state.engine || !!state.gen; });
}

// ------------------------------------------------------------------ loading models
function loadOptions(extra = {}) {
  const ctx = $('max-context').value;
  return { activations: $('activations').value, kvCache: $('kv-cache').value, context: ctx === '' ? null : Number(ctx), capLimits: ADDRESS.capLimits,
    maskFeatures: ADDRESS.maskFeatures, gpuMemory: ADDRESS.gpuMemory, cache: $('cache-files').checked, ...extra };
}

const nameOf = (source) => {
  if (source && typeof source === 'object' && source.cached) return source.cached;
  if (typeof Blob !== 'undefined' && source instanceof Blob) return source.name || 'file';
  return String(source).split(/[?#]/)[0].split('/').pop() || 'model';
};

async function loadModel(source, { fallback = false, ...extra } = {}) {
  if (ADDRESS.problem) {
    state.lastLoadError = { kind: 'settings', message: ADDRESS.problem };
    showError(state.lastLoadError);
    updatePhase();
    return;
  }
  if (contextProblem()) { showError({ kind: 'settings', message: `Context: ${contextProblem()}` }); return; }
  state.loading?.ctl.abort();                    // a newer load wins
  const ctl = new AbortController();
  const me = { ctl, source, name: nameOf(source) };
  state.loading = me;
  state.seen = {};
  hideError();
  resetProgress(`Loading ${me.name}…`);
  updatePhase();
  let engine;
  try {
    engine = await bitweb.load(source, { ...loadOptions(extra), signal: ctl.signal, onProgress: (p) => { if (state.loading === me) progress(p); } });
  } catch (e) {
    if (state.loading !== me) return;            // replaced by a newer load: nothing to say
    state.loading = null;
    $('progress').hidden = true;
    if (e.kind === 'aborted') { updatePhase(); return; }
    if (e.kind === 'no-room') {
      updatePhase();
      const keep = state.engine ? state.engine.info.name : 'the loaded model';
      const ok = await ask(`${e.message}\n\nUnload ${keep} and load ${me.name}? Your conversations stay.`, `Unload ${keep} and load`, `Keep ${keep}`);
      if (ok) return loadModel(source, { ...extra, replace: 'always' });
      return;
    }
    state.lastLoadError = e;
    showError(e);
    if (source?.cached && fallback) {      // the remembered cached model is gone: the default then
      hideError();
      return loadModel(ADDRESS.defaultSource);
    }
    updatePhase();
    refreshCache();
    return;
  }
  if (state.loading !== me) { engine.unload(); return; }
  state.loading = null;
  const old = state.engine;
  if (old && state.gen && state.gen.engine === old) { state.gen.ctl.abort(); await state.gen.done; }
  state.engine = engine;
  state.source = source;
  state.lastLoadError = null;
  if (old) old.unload().catch(() => {});
  engine.lost.then((message) => {
    if (state.engine !== engine) return;
    state.engine = null;
    showError({ kind: 'device-lost', message });
    updatePhase();
  });
  $('progress').hidden = true;
  remember(source, engine);
  showModel(engine);
  updatePhase();
  renderChat();
  countContext();
  refreshCache();
  if (engine.info.cacheError) showError({ kind: 'storage', message: 'The model works, but could not be cached: ' + engine.info.cacheError });
  $('input').focus();
}

// What to load next time: the default by its source (a newer default is noticed), others by cache name.
function remember(source, engine) {
  const byName = source !== ADDRESS.defaultSource && $('cache-files').checked && !engine.info.cacheError;
  localStorage.setItem('bitweb.last', JSON.stringify(byName ? { cached: engine.info.name } : 'default'));
}

// The current model again with the settings now in the form (activations, KV cache, context).
function reloadCurrent() {
  if (!state.engine || !state.source) return;
  const s = state.source;
  const again = s instanceof Blob && $('cache-files').checked ? { cached: state.engine.info.name } : s;
  loadModel(again);
}

const STAGE_LABEL = { boot: 'Starting Python (Pyodide)…', header: 'Reading the model header…', upload: 'Uploading the weights to the GPU…', compile: 'Compiling the GPU kernels…' };
const BAR_OF = { cache: 'download' };

function resetProgress(label) {
  $('progress').hidden = false;
  $('progress-label').textContent = label;
  document.querySelectorAll('#progress .bar').forEach((b) => { b.classList.remove('active'); b.querySelector('small').textContent = ''; });
}

function progress(p) {
  state.lastHeard = performance.now();
  state.seen[p.stage] = { done: p.done, total: p.total };
  $('progress').hidden = false;
  const label = p.label || STAGE_LABEL[p.stage];
  // a download still going names the load (the header and the upload read it as it arrives)
  const dl = state.seen.download;
  const downloading = p.stage !== 'download' && dl && dl.total > 0 && dl.done < dl.total;
  if (label && !downloading) $('progress-label').textContent = label;
  const bar = document.querySelector(`#progress .bar[data-stage="${BAR_OF[p.stage] || p.stage}"]`);
  if (!bar) return;
  bar.classList.add('active');
  const el = bar.querySelector('progress');
  if (p.total > 0 && !(p.stage === 'boot' && p.done === 0)) { el.max = p.total; el.value = p.done; } else el.removeAttribute('value');
  let text = p.total > 1 ? (p.total > 4096 ? `${mb(p.done)} / ${mb(p.total)}` : `${p.done} / ${p.total}`) : p.done >= p.total && p.total ? 'done' : '';
  if (p.bytesPerSecond) text += ` · ${mb(p.bytesPerSecond)}/s` + (p.etaSeconds != null && p.done < p.total ? ` · ${Math.ceil(p.etaSeconds)} s left` : '');
  bar.querySelector('small').textContent = text;
}

function showModel(engine) {
  const i = engine.info;
  kv($('model-info'), [
    ['Model', i.title], ['File', `${i.name} (${mb(i.fileSize)})`], ['Architecture', i.architecture],
    ['Layers × width', i.layers != null ? `${i.layers} × ${i.width}` : null],
    ['Heads (KV)', i.heads != null ? `${i.heads} (${i.kvHeads})` : null],
    ['Vocabulary', i.vocabulary], ['Context', i.context !== i.contextMax ? `${i.context} of ${i.contextMax}` : i.context],
    ['Context note', i.contextNote || null],
    ['Weights', i.weights], ['Activations', i.activations],
    ['KV cache', i.kvCache ? `${i.kvCache}, ${mb(i.load.kv_cache_bytes)}` : null],
  ]);
  const a = i.adapter, L = a.limits || {};
  // a CPU rasteriser (SwiftShader, llvmpipe, a fallback adapter): said as text, next to the message box
  $('software-gpu').hidden = !a.software;
  $('software-gpu').textContent = a.software ? `No hardware GPU: expect a few tokens per second (WebGPU runs on the CPU here: ${a.software}).` : '';
  kv($('adapter'), [
    ['Adapter', [a.info.vendor, a.info.description || a.info.device || a.info.architecture].filter(Boolean).join(' ') || '(unnamed)'],
    ['Hardware GPU', a.software ? `no (${a.software})` : 'yes'],
    ['Features used', a.features.length ? a.features.join(', ') : 'none'],
    ['Shader paths', a.caps],
    ['Acting as a weaker GPU (?cap=)', a.weaker || null],
    ['maxBufferSize', mb(L.maxBufferSize)],
    ['maxStorageBufferBindingSize', mb(L.maxStorageBufferBindingSize)],
    ['maxStorageBuffersPerShaderStage', L.maxStorageBuffersPerShaderStage],
    ['maxComputeWorkgroupStorageSize', L.maxComputeWorkgroupStorageSize != null ? `${L.maxComputeWorkgroupStorageSize} B` : null],
  ]);
  setStats({ 'Load time': sec(i.load.ms), 'Header read': mb(i.load.header_read) });
  $('thinking-row').hidden = !i.thinking;
  $('thinking').checked = thinkingChoices()[i.name] ?? i.thinkingDefault;
  $('s-max_tokens').max = String(i.context - 1);
}

// ------------------------------------------------------------------ errors
const ADVICE = {
  'no-webgpu': ['WebGPU is not available', [
    'Use a recent Chrome or Edge (version 113 or later) on a desktop or laptop.',
    'On Linux, start Chrome with --enable-unsafe-webgpu (and --enable-features=Vulkan), or enable chrome://flags/#enable-unsafe-webgpu.',
    'Firefox Nightly and Safari Technology Preview: enable WebGPU in their settings or feature flags.',
    'Open the page from http://localhost, http://127.0.0.1 or https (WebGPU needs a secure context).']],
  limits: ['This GPU\'s limits are too small for this model', ['Try a smaller model or a smaller context, or another browser or GPU with larger limits. The model you had still works.']],
  format: ['This file is not a model bitweb can read', ['bitweb reads GGUF files (versions 2 and 3) with BitNet b1.58 weights.']],
  unsupported: ['This model is not supported', ['bitweb runs the BitNet architectures bitnet-b1.58 (2B4T) and bitnet (1bitLLM).']],
  download: ['Download failed', ['Check the address and your connection, then try again. A model downloaded once stays in the browser cache and loads offline.']],
  cors: ['The model\'s server does not allow this page to download it', ['Download the file yourself and open it with "Open file…", or serve it with an Access-Control-Allow-Origin header for this page.']],
  storage: ['Browser storage problem', ['Delete cached models you do not need, or allow the site more storage.']],
  'device-lost': ['The GPU device was lost', ['This happens when the GPU driver resets, the GPU runs out of memory, or the tab was in the background for long. Reload the model to continue; your conversations are kept.']],
  'out-of-memory': ['Out of GPU memory', ['Close other tabs or programs that use the GPU, load a smaller model, or set a smaller context.']],
  'no-room': ['Not enough GPU memory for two models', ['Unload the current model to load this one.']],
  context: ['The conversation no longer fits the model\'s context', ['Continue without the oldest turns, or start a new chat.']],
  settings: ['Invalid setting', ['Correct the value shown; nothing was changed.']],
  unloaded: ['No model loaded', ['Load the default model, a file, or a URL.']],
  busy: ['Still busy', ['Wait for the reply to finish, or press Stop.']],
  gpu: ['GPU error', ['Reload the model; if it happens again, try another browser or GPU.']],
  internal: ['Something went wrong', ['Reload the page. If it happens again, the message above helps to report it.']],
  timeout: ['No answer from the engine', ['It has said nothing for two minutes. A slow (software) GPU may still finish; otherwise reload the page.']],
  import: ['This file is not a conversation', ['Import a JSON file written by "Export chat": {"messages": [{"role": "user", "content": "…"}, …]}.']],
};

function showError(e) {           // e: a BitwebError or {kind, message, advice?}
  const kind = e.kind || 'internal';
  const [title, ownAdvice] = ADVICE[kind] || ADVICE.internal;
  const advice = [...ownAdvice, ...(Array.isArray(e.advice) ? e.advice : [])];   // the worker's lines (the formats)
  $('error').hidden = false;
  $('error').dataset.kind = kind;
  $('error-title').textContent = title;
  $('error-text').textContent = e.message || String(e);
  $('error-advice').replaceChildren(...advice.map((a) => { const li = document.createElement('li'); li.textContent = a; return li; }));
  const actions = [];
  const again = state.source || (state.loading && state.loading.source);
  if (['device-lost', 'out-of-memory', 'gpu'].includes(kind) && again) actions.push(['Reload model', () => { hideError(); loadModel(again); }]);
  if (kind === 'internal' || kind === 'timeout') actions.push(['Reload page', () => location.reload()]);
  actions.push(['Dismiss', hideError]);
  $('error-actions').replaceChildren(...actions.map(([t, fn]) => button(t, fn)));
}

function hideError() { $('error').hidden = true; delete $('error').dataset.kind; }

setInterval(() => {
  if (busy() && performance.now() - state.lastHeard > SILENCE_MS && $('error').dataset.kind !== 'timeout') {
    showError({ kind: 'timeout', message: `The engine has not reported anything for ${SILENCE_MS / 1000} s (while ${document.body.dataset.state}).` });
  }
}, 5000);

// ------------------------------------------------------------------ a question in a dialog
function ask(text, okLabel, cancelLabel = 'Cancel', input = null) {
  const dlg = $('ask');
  $('ask-text').textContent = text;
  $('ask-ok').textContent = okLabel;
  $('ask-cancel').textContent = cancelLabel;
  $('ask-input').hidden = input === null;
  if (input !== null) $('ask-input').value = input;
  dlg.returnValue = '';
  dlg.showModal();
  if (input !== null) $('ask-input').select();
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      const ok = dlg.returnValue === 'ok';
      resolve(input !== null ? (ok ? $('ask-input').value : null) : ok);
    }, { once: true });
  });
}

// ------------------------------------------------------------------ settings (checked as typed)
const FIELDS = () => [...$('settings').querySelectorAll('input')];

function fieldProblem(input) {
  if (input.value.trim() === '') return 'enter a value';
  const why = bitweb.checkSetting(input.name, Number(input.value));
  return why ? why.replace(/ \(got .*\)$/, '') : null;
}

function contextProblem() {
  const v = $('max-context').value.trim();
  if (v === '') return null;
  const n = Number(v);
  return Number.isInteger(n) && n >= 2 ? null : 'must be a whole number of at least 2 (or empty: the model\'s)';
}

function showFieldError(input, errEl, problem) {
  input.setAttribute('aria-invalid', problem ? 'true' : 'false');
  errEl.hidden = !problem;
  errEl.textContent = problem || '';
}

function checkFields() {
  for (const input of FIELDS()) {
    let err = $(`${input.id}-error`);
    if (!err) {
      err = document.createElement('span');
      err.id = `${input.id}-error`;
      err.className = 'field-error';
      input.setAttribute('aria-describedby', err.id);
      input.after(err);
    }
    showFieldError(input, err, fieldProblem(input));
  }
  showFieldError($('max-context'), $('max-context-error'), contextProblem());
}

function settingsProblem() {
  for (const input of FIELDS()) {
    const p = fieldProblem(input);
    if (p) return `${input.labels[0]?.textContent || input.name} ${p}`;
  }
  return null;
}

function samplingSettings() {
  const s = {};
  for (const input of FIELDS()) s[input.name] = Number(input.value);
  return s;
}

function restoreSettings() {
  try {
    const saved = JSON.parse(localStorage.getItem('bitweb.settings') || '{}');
    for (const input of FIELDS()) if (saved[input.name] != null) input.value = saved[input.name];
    if (saved.system != null) $('system').value = saved.system;
    if (saved.activations) $('activations').value = saved.activations;
    if (saved.kvCache === 'f16' || saved.kvCache === 'f32') $('kv-cache').value = saved.kvCache;
    if (saved.maxContext != null) $('max-context').value = saved.maxContext;
    if (saved.cacheFiles != null) $('cache-files').checked = saved.cacheFiles;
  } catch { /* a bad saved value: the defaults */ }
}

function saveSettings() {
  const s = {};
  for (const input of FIELDS()) s[input.name] = input.value;
  Object.assign(s, { system: $('system').value, activations: $('activations').value, kvCache: $('kv-cache').value, maxContext: $('max-context').value,
    cacheFiles: $('cache-files').checked });
  localStorage.setItem('bitweb.settings', JSON.stringify(s));
}

// The Thinking switch starts from the model's own default (what its template does without
// enable_thinking); a change the user makes is kept for that model (by file name), not for others.
function thinkingChoices() {
  try { return JSON.parse(localStorage.getItem('bitweb.thinking') || '{}'); } catch { return {}; }
}

function saveThinkingChoice() {
  const name = state.engine?.info.name;
  if (!name) return;
  const c = thinkingChoices();
  delete c[name];                       // most recent last; keep the last 32 models
  c[name] = $('thinking').checked;
  localStorage.setItem('bitweb.thinking', JSON.stringify(Object.fromEntries(Object.entries(c).slice(-32))));
}

// ------------------------------------------------------------------ conversations
async function openConversation(conv) {
  if (state.gen) await stopReply();
  state.conv = conv;
  localStorage.setItem('bitweb.conv', conv.id);
  renderChat();
  renderConversations();
  countContext();
}

async function newChat() {
  if (state.gen) await stopReply();
  const conv = store.newConversation($('system').value.trim() || null);
  state.convs.unshift(conv);
  await openConversation(conv);
  $('input').focus();
}

async function persist(conv = state.conv) {
  if (!conv.messages.some((m) => m.role !== 'system')) return;      // an empty chat is not worth a row
  if (conv.title === 'New chat') conv.title = store.titleOf(conv) || conv.title;
  await store.save(conv);
  if (!state.convs.includes(conv)) state.convs.unshift(conv);
  renderConversations();
}

function renderConversations() {
  const ul = $('conv-list');
  const shown = state.convs.filter((c) => c === state.conv || c.messages.some((m) => m.role !== 'system'));
  ul.replaceChildren(...shown.map((c) => {
    const li = document.createElement('li');
    const open = button(c.title, () => openConversation(c), 'conv-open');
    if (c === state.conv) { open.setAttribute('aria-current', 'true'); li.classList.add('current'); }
    const rename = button('✎', async () => {
      const t = await ask('Rename the conversation', 'Rename', 'Cancel', c.title);
      if (t && t.trim()) { c.title = t.trim(); await store.save(c); renderConversations(); }
    }, 'icon');
    rename.setAttribute('aria-label', `Rename “${c.title}”`);
    const del = button('✕', () => deleteConversation(c), 'icon danger');
    del.setAttribute('aria-label', `Delete “${c.title}”`);
    li.append(open, rename, del);
    return li;
  }));
}

async function deleteConversation(c) {
  if (!(await ask(`Delete the conversation “${c.title}”? This cannot be undone.`, 'Delete'))) return;
  await store.remove(c.id);
  state.convs = state.convs.filter((x) => x !== c);
  if (c === state.conv) {
    if (state.gen) await stopReply();
    const next = state.convs[0];
    if (next) await openConversation(next); else await newChat();
  } else renderConversations();
}

function exportConversation() {
  const data = JSON.stringify(store.exported(state.conv), null, 1);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([data], { type: 'application/json' }));
  a.download = `${(state.conv.title || 'chat').replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 60)}.json`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

async function importConversation(file) {
  let conv;
  try {
    conv = store.imported(await file.text(), file.name.replace(/\.json$/i, ''));
  } catch (e) {
    showError({ kind: 'import', message: `${file.name}: ${e.message}` });
    return;
  }
  await store.save(conv);
  state.convs.unshift(conv);
  await openConversation(conv);
}

// ------------------------------------------------------------------ the chat
function button(text, onclick, cls) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  if (cls) b.className = cls;
  b.addEventListener('click', onclick);
  return b;
}

function renderChat() {
  const chat = $('chat');
  const conv = state.conv;
  const visible = conv.messages.map((m, i) => [m, i]).filter(([m]) => m.role !== 'system');
  const nodes = [];
  if (!visible.length) nodes.push(introCard());
  let lastModel = null;
  for (const [m, i] of visible) {
    if (i === conv.contextStart && i > 0) nodes.push(divider('Earlier turns are no longer sent to the model (they did not fit its context).'));
    if (m.role === 'assistant') {
      if (lastModel && m.model && m.model !== lastModel) nodes.push(divider(`Continued with ${m.model}`));
      if (m.model) lastModel = m.model;
    }
    nodes.push(messageEl(m, i));
  }
  if (state.engine && lastModel && lastModel !== state.engine.info.name) nodes.push(divider(`The next reply comes from ${state.engine.info.name}`));
  chat.replaceChildren(...nodes);
  chat.scrollTop = chat.scrollHeight;
}

function divider(text) {
  const p = document.createElement('p');
  p.className = 'divider';
  p.textContent = text;
  return p;
}

function introCard() {
  const card = document.createElement('div');
  card.className = 'intro';
  const h = document.createElement('h2');
  const p = document.createElement('p');
  const isDefault = state.engine?.info.name === DEFAULT_NAME;
  let examples = [];
  if (isDefault) {
    h.textContent = 'bitweb-chat: a tiny BitNet model on your GPU';
    p.textContent = 'A 2.6 M-parameter BitNet b1.58 model trained for this app. It adds and subtracts numbers up to 99, '
      + 'compares numbers, counts a letter in a word, reverses short words and knows the weekdays. It knows no facts. '
      + 'Everything runs here: nothing you type leaves this page.';
    examples = ['What is 37 + 45?', 'How many r\'s are in strawberry?', 'Which is larger, 412 or 398?', 'Reverse the word house.', 'What day comes after Friday?'];
  } else {
    h.textContent = state.engine ? `${state.engine.info.title} is ready` : 'Loading a model…';
    p.textContent = 'Everything runs here, on your GPU: nothing you type leaves this page.';
  }
  card.append(h, p);
  if (examples.length) {
    const row = document.createElement('div');
    row.className = 'row examples';
    for (const text of examples) {
      const b = button(text, () => send(text), 'example');
      b.disabled = !state.engine || !!state.gen;
      row.append(b);
    }
    card.append(row);
  }
  return card;
}

function messageEl(m, i) {
  const el = document.createElement('article');
  el.className = `msg ${m.role}`;
  el.dataset.index = String(i);
  el.raw = m.content;
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = m.role === 'user' ? 'You' : (m.model || 'Model');
  const body = document.createElement('div');
  body.className = 'text';
  const foot = document.createElement('div');
  foot.className = 'foot';
  el.append(who, body, foot);
  if (m.role === 'assistant' && m.finish) { el.dataset.done = '1'; el.dataset.finish = m.finish; }
  fillMessage(el, m);
  return el;
}

function fillMessage(el, m, streaming = false) {
  el.raw = m.content;
  const body = el.querySelector('.text');
  if (m.role === 'assistant') {
    const { thinking, answer, open } = splitThinking(m.content);
    const nodes = [];
    if (thinking !== null) {
      const d = document.createElement('details');
      d.className = 'thinking';
      const s = document.createElement('summary');
      s.textContent = open && streaming ? 'Thinking…' : 'Thought';
      const t = document.createElement('div');
      t.textContent = thinking;
      d.append(s, t);
      nodes.push(d);
    }
    const ans = document.createElement('div');
    ans.className = 'answer';
    ans.append(render(answer));
    nodes.push(ans);
    body.replaceChildren(...nodes);
  } else body.textContent = m.content;
  el.classList.toggle('streaming', streaming);
  const foot = el.querySelector('.foot');
  const bits = [];
  if (m.stats) bits.push(m.stats);
  if (m.finish === 'abort') bits.push('stopped');
  else if (m.finish === 'length') bits.push(m.contextFull ? 'context full' : 'max tokens reached');
  const i = Number(el.dataset.index);
  const actions = [];
  if (!streaming) {
    actions.push(button('Copy', (ev) => copyText(m.content, ev.currentTarget), 'act'));
    if (m.role === 'assistant') actions.push(button('Regenerate', () => regenerate(i), 'act'));
    if (m.role === 'user') actions.push(button('Edit', () => editMessage(el, i), 'act'));
    for (const b of actions) b.setAttribute('aria-label', `${b.textContent} ${m.role === 'user' ? 'your message' : 'this reply'}`);
  }
  const text = document.createElement('span');
  text.textContent = bits.join(' · ');
  foot.replaceChildren(text, ...actions);
}

function lastMessageEl() { const all = $('chat').querySelectorAll('.msg'); return all[all.length - 1]; }

// The messages the model sees: the system message, then those from contextStart on.
function contextMessages(conv = state.conv) {
  const out = [];
  conv.messages.forEach((m, i) => {
    if (m.role === 'system' ? i === 0 : i >= conv.contextStart) out.push({ role: m.role, content: m.content });
  });
  return out;
}

async function countContext() {
  const eng = state.engine;
  if (!eng || !state.conv) { $('context-meter').textContent = ''; return; }
  const msgs = contextMessages();
  let n = 0;
  if (msgs.length) {
    try { n = (await eng.tokenize(msgs)).length; } catch { return; }
  }
  if (eng !== state.engine) return;
  state.context = n;
  showMeter(n, eng.info.context);
}

function showMeter(n, N) {
  const m = $('context-meter');
  m.textContent = `context ${n} / ${N} tokens`;
  m.classList.toggle('full', n >= N - 1);
  m.title = 'Tokens of this conversation that the model reads for its next reply, of its context size';
}

async function send(text) {
  if (!state.engine || state.gen || !text.trim()) return;
  const problem = settingsProblem();
  if (problem) { checkFields(); updatePhase(); return; }
  state.conv.messages.push({ role: 'user', content: text });
  $('input').value = '';
  await persist();
  renderChat();
  await reply();
}

// A reply to the conversation as it is (its last message is the user's).
async function reply() {
  const eng = state.engine;
  if (!eng || state.gen) return;
  const conv = state.conv;
  const msgs = contextMessages(conv);
  let ids;
  try { ids = await eng.tokenize(msgs, thinkingOption(eng)); } catch (e) { showError(e); return; }
  if (ids.length > eng.info.context - 1) { contextFull(ids.length, eng.info.context); return; }
  const m = { role: 'assistant', content: '', model: eng.info.name };
  conv.messages.push(m);
  renderChat();
  const el = lastMessageEl();
  el.classList.add('streaming');
  const ctl = new AbortController();
  let finish = null, usage = null, timing = null, resolveDone;
  state.gen = { ctl, reply: m, engine: eng, done: new Promise((r) => { resolveDone = r; }) };
  state.lastHeard = performance.now();
  updatePhase();
  let paint = 0, saved = performance.now();
  try {
    const stream = await eng.chat.completions.create({ messages: msgs, stream: true, ...samplingSettings(), ...thinkingOption(eng), signal: ctl.signal });
    for await (const chunk of stream) {
      state.lastHeard = performance.now();
      const c = chunk.choices[0];
      if (c.delta.content) m.content += c.delta.content;
      el.raw = m.content;
      if (c.finish_reason) { finish = c.finish_reason; usage = chunk.usage; timing = chunk.timing; }
      if (!paint) paint = requestAnimationFrame(() => { paint = 0; if (state.gen?.reply === m) fillMessage(el, m, true); scrollDown(); });
      if (performance.now() - saved > 1000) { saved = performance.now(); persist(conv); }
    }
  } catch (e) {
    conv.messages.splice(conv.messages.indexOf(m), 1);     // never an empty or broken bubble
    if (m.content) { m.finish = 'error'; conv.messages.push(m); }
    state.gen = null;
    resolveDone();
    renderChat();
    await persist(conv);
    if (e.kind === 'aborted') { /* stopped before it started: nothing to say */ }
    else if (e.kind === 'context') contextFull(e.prompt_tokens, e.context);
    else if (e.kind === 'settings' && e.field) { showError(e); checkFields(); }
    else showError(e);
    updatePhase();
    return;
  }
  if (paint) cancelAnimationFrame(paint);
  state.gen = null;
  resolveDone();
  if (!m.content && finish === 'abort') conv.messages.splice(conv.messages.indexOf(m), 1);   // stopped before any text
  else {
    m.finish = finish;
    m.contextFull = timing?.stop_reason === 'context';
    const bits = [`${usage.completion_tokens} tokens`];
    if (timing.ttft_ms != null) bits.push(`first token ${sec(timing.ttft_ms)}`);
    if (timing.decode_tok_s) bits.push(`${timing.decode_tok_s.toFixed(1)} tok/s`);
    m.stats = bits.join(' · ');
  }
  state.lastReply = { finish_reason: finish, usage, timing, text: m.content };
  await persist(conv);
  renderChat();
  if (conv === state.conv && eng === state.engine && usage) {
    state.context = usage.total_tokens;
    showMeter(usage.total_tokens, eng.info.context);
  }
  setStats({
    'Load time': sec(eng.info.load.ms),
    'Time to first token': sec(timing.ttft_ms),
    'Tokens/s (decode)': timing.decode_tok_s != null ? timing.decode_tok_s.toFixed(2) : '–',
    'Prefill tokens/s': timing.prefill_tok_s != null ? `${timing.prefill_tok_s.toFixed(1)} (${timing.prefill_tokens} tokens)` : '–',
    Tokens: usage.completion_tokens, Finish: finish,
  });
  announce(m);
  updatePhase();
  if (document.activeElement === document.body || !document.activeElement || document.activeElement === $('stop')) $('input').focus();
}

function thinkingOption(eng) {
  return eng.info.thinking ? { enable_thinking: $('thinking').checked } : {};
}

// One announcement per finished reply (the chat itself is not a live region: no per-token chatter).
function announce(m) {
  const { answer } = splitThinking(m.content);
  $('announce').textContent = '';
  setTimeout(() => { $('announce').textContent = `Reply${m.finish === 'abort' ? ' (stopped)' : ''}: ${answer}`; }, 50);
}

async function stopReply() {
  const g = state.gen;
  if (!g) return;
  g.ctl.abort();
  await g.done;
}

async function regenerate(i) {
  if (state.gen || !state.engine) return;
  state.conv.messages.splice(i);
  await persist();
  renderChat();
  await reply();
}

function editMessage(el, i) {
  if (state.gen) return;
  const m = state.conv.messages[i];
  const body = el.querySelector('.text');
  const ta = document.createElement('textarea');
  ta.value = m.content;
  ta.rows = Math.min(8, m.content.split('\n').length + 1);
  ta.setAttribute('aria-label', 'Edit your message');
  const save = button('Send', async () => {
    if (!ta.value.trim() || !state.engine || state.gen) return;
    state.conv.messages.splice(i, state.conv.messages.length - i, { role: 'user', content: ta.value });
    await persist();
    renderChat();
    await reply();
  }, 'primary');
  const cancel = button('Cancel', () => renderChat());
  const row = document.createElement('div');
  row.className = 'row';
  row.append(save, cancel);
  body.replaceChildren(ta, row);
  el.querySelector('.foot').replaceChildren();
  ta.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); save.click(); }
    if (e.key === 'Escape') { e.stopPropagation(); renderChat(); }
  });
  ta.focus();
}

// The conversation does not fit: offer to drop the oldest turns or to start a new chat.
function contextFull(n, N) {
  const card = document.createElement('div');
  card.className = 'context-full';
  card.setAttribute('role', 'alert');
  const p = document.createElement('p');
  p.textContent = `This conversation no longer fits the model's context (${n} tokens; it holds ${N}).`;
  // The card goes at once (before any await), so a second click cannot start a second reply.
  const drop = button('Continue without the oldest turns', () => { card.remove(); dropOldest(); }, 'primary');
  const fresh = button('Start a new chat', () => { card.remove(); newChat(); });
  const row = document.createElement('div');
  row.className = 'row';
  row.append(drop, fresh);
  card.append(p, row);
  $('chat').append(card);
  scrollDown();
  showMeter(n, N);
}

async function dropOldest() {
  const eng = state.engine;
  const conv = state.conv;
  const want = Math.min(Number($('s-max_tokens').value) || 64, Math.floor(eng.info.context / 2));
  const userAt = () => conv.messages.findIndex((m, i) => i > conv.contextStart && m.role === 'user');
  for (;;) {
    const n = (await eng.tokenize(contextMessages(conv), thinkingOption(eng))).length;
    if (n <= eng.info.context - want) break;
    const next = userAt();
    if (next < 0) break;                          // only the last message is left: send what fits
    conv.contextStart = next;
  }
  if (conv.contextStart === 0 && conv.messages[0]?.role === 'system') conv.contextStart = 1;
  await persist(conv);
  renderChat();
  const n = (await eng.tokenize(contextMessages(conv), thinkingOption(eng))).length;
  if (n > eng.info.context - 1) { contextFull(n, eng.info.context); return; }
  await reply();
}

function scrollDown() { const c = $('chat'); c.scrollTop = c.scrollHeight; }

// ------------------------------------------------------------------ the cache
async function refreshCache() {
  let models = [], est = {};
  try {
    models = await bitweb.cache.list();
    est = await bitweb.cache.estimate();
  } catch (e) {
    $('cache-usage').textContent = e.kind === 'no-webgpu' ? '' : `The cache cannot be read: ${e.message}`;
    return;
  }
  const ul = $('cache-list');
  ul.replaceChildren(...models.map((e) => {
    const li = document.createElement('li');
    const name = document.createElement('span');
    name.className = 'name';
    name.textContent = e.name;
    name.title = e.source || '';
    const size = document.createElement('small');
    size.textContent = mb(e.size);
    const use = button('Load', () => loadModel({ cached: e.name }));
    use.setAttribute('aria-label', `Load ${e.name}`);
    const del = button('Delete', async () => {
      if (!(await ask(`Delete ${e.name} (${mb(e.size)}) from the browser cache? Loading it again needs the file or the network.`, 'Delete'))) return;
      await bitweb.cache.delete(e.name);
      refreshCache();
    }, 'danger');
    del.setAttribute('aria-label', `Delete ${e.name} from the cache`);
    li.append(name, size, use, del);
    return li;
  }));
  if (!models.length) { const li = document.createElement('li'); li.className = 'hint'; li.textContent = 'none'; ul.append(li); }
  const total = models.reduce((a, e) => a + e.size, 0);
  let line = `${models.length} cached model${models.length === 1 ? '' : 's'}, ${mb(total)}.`;
  if (est.quota) line += ` This site uses ${mb(Math.max(est.usage ?? 0, total))} of the ${mb(est.quota)} the browser allows it.`;
  if (est.persisted === true) line += ' Kept: the browser will not evict them.';
  else if (est.persisted === false && models.length) line += ' The browser may evict them when space runs low.';
  $('cache-usage').textContent = line;
  $('persist').hidden = est.persisted !== false || !models.length;
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

function setDrawer(open) {
  document.body.classList.toggle('side-open', open);
  $('menu').setAttribute('aria-expanded', String(open));
}

// ------------------------------------------------------------------ wiring
function wire() {
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send($('input').value); });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send($('input').value); }
  });
  $('stop').addEventListener('click', () => stopReply());
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || $('ask').open) return;
    if (state.gen) stopReply();
    if (document.body.classList.contains('side-open')) { setDrawer(false); $('menu').focus(); }
  });
  $('new-chat').addEventListener('click', () => newChat());
  $('export').addEventListener('click', exportConversation);
  $('import-input').addEventListener('change', (e) => { const f = e.target.files[0]; if (f) importConversation(f); e.target.value = ''; });
  $('load-default').addEventListener('click', () => loadModel(ADDRESS.defaultSource));
  $('file-input').addEventListener('change', (e) => { const f = e.target.files[0]; if (f) loadModel(f); e.target.value = ''; });
  $('url-form').addEventListener('submit', (e) => { e.preventDefault(); loadModel(new URL($('url-input').value, location.href).href); });
  $('cancel-load').addEventListener('click', () => { state.loading?.ctl.abort(); });
  $('persist').addEventListener('click', async () => { await bitweb.cache.persist(); refreshCache(); });
  $('activations').addEventListener('change', () => { saveSettings(); reloadCurrent(); });
  $('kv-cache').addEventListener('change', () => { saveSettings(); reloadCurrent(); });
  $('max-context').addEventListener('input', () => { checkFields(); });
  $('max-context').addEventListener('change', () => {
    checkFields();
    if (contextProblem()) return;             // refused beside the field; the model stays
    saveSettings();
    const want = $('max-context').value === '' ? state.engine?.info.contextMax : Number($('max-context').value);
    if (state.engine && Math.min(want, state.engine.info.contextMax) !== state.engine.info.context) reloadCurrent();
  });
  $('settings').addEventListener('input', () => { checkFields(); updatePhase(); saveSettings(); });
  $('side').addEventListener('change', saveSettings);
  $('thinking').addEventListener('change', saveThinkingChoice);
  $('menu').addEventListener('click', () => setDrawer(!document.body.classList.contains('side-open')));
  let depth = 0;
  window.addEventListener('dragenter', (e) => { if (e.dataTransfer?.types.includes('Files')) { depth++; $('drop').hidden = false; } });
  window.addEventListener('dragleave', () => { if (--depth <= 0) { depth = 0; $('drop').hidden = true; } });
  window.addEventListener('dragover', (e) => e.preventDefault());
  window.addEventListener('drop', (e) => {
    e.preventDefault();
    depth = 0; $('drop').hidden = true;
    const f = e.dataTransfer?.files?.[0];
    if (f) loadModel(f);
  });
}

async function boot() {
  wire();
  restoreSettings();
  checkFields();
  try {
    state.convs = (await store.all());
  } catch (e) {
    state.convs = [];
    showError({ kind: 'storage', message: `Saved conversations cannot be read (${e.message}); new ones will not be kept.` });
  }
  const lastId = localStorage.getItem('bitweb.conv');
  const conv = state.convs.find((c) => c.id === lastId) || state.convs[0];
  if (conv) await openConversation(conv); else await newChat();
  updatePhase();
  if (!('gpu' in navigator)) {
    state.lastLoadError = { kind: 'no-webgpu' };
    showError({ kind: 'no-webgpu', message: window.isSecureContext
      ? 'This browser does not expose WebGPU (navigator.gpu is missing).'
      : `This page is not a secure context (${location.origin}), so WebGPU is off.` });
    updatePhase();
    return;
  }
  refreshCache();
  let source = ADDRESS.defaultSource, fallback = false;
  try {
    const last = JSON.parse(localStorage.getItem('bitweb.last') || 'null');
    if (last && last.cached && !params.get('model')) { source = last; fallback = true; }
  } catch { /* the default */ }
  await loadModel(source, fallback ? { fallback } : {});
}

boot();
