// Models: loading one (bitweb.load with the settings' options; a newer load wins; "no-room" asks
// to unload the current model), its progress bars, what the panel shows about it and its GPU
// adapter, and the browser's cache of models (load or delete one).
import * as bitweb from '../bitweb.mjs';
import { $, ask, button, kv, mb, nameOf, sec, setStats } from './util.mjs';
import { ADDRESS, state } from './state.mjs';
import { contextProblem, loadOptions, thinkingChoices } from './settings.mjs';
import { updatePhase } from './status.mjs';
import { hideError, showError } from './errors.mjs';
import { countContext, renderChat } from './chatview.mjs';

const hooks = { cacheChanged: () => {} };
/** What runs after the cache list is drawn again (main: the catalogue's verdicts). */
export function onCacheChange(fn) { hooks.cacheChanged = fn; }

export async function loadModel(source, { fallback = false, ...extra } = {}) {
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
export function reloadCurrent() {
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
  const label = p.note ? `${p.label || STAGE_LABEL[p.stage] || ''}: ${p.note}` : p.label || STAGE_LABEL[p.stage];
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
    ['Not as the catalogue says', i.load.catalogueDiff?.length
      ? `${i.load.catalogueDiff.map((d) => `${d.fact} ${d.header} (catalogue: ${d.catalogue})`).join(', ')}; loaded as its header says` : null],
    ['Weights', i.weights], ['Activations', i.activations],
    ['KV cache', i.kvCache ? `${i.kvCache}, ${mb(i.load.kv_cache_bytes)}` : null],
    // one engine for every tab of the site (bitweb.load share: true), or this tab's own and why
    ['Engine', i.shared ? `shared by the tabs of this site${i.load.attached ? ' (loaded by another tab)' : ''}`
      : i.sharedNote || 'this tab\'s own'],
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

export async function refreshCache() {
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
  hooks.cacheChanged();
  // (not awaited: it answers once the saves after the replies, and so a reply still running, are done)
  bitweb.cache.conversations().catch(() => ({ bytes: 0, entries: 0, bound: 0 })).then((saved) => {
    $('kv-usage').textContent = `Saved conversation caches (a reply after a reload does not read its conversation again): ` +
      `${saved.entries}, ${mb(saved.bytes)} of at most ${mb(loadOptions().kvSaveBytes ?? saved.bound)}.`;
    $('kv-clear').hidden = !saved.entries;
  });
}
