// The chat page, built on the public library (bitweb.mjs) only: every model load, reply, token
// count and cache operation goes through its API. This module wires the page's controls to the
// app's modules and boots it; they import downward only:
//   util, store, markdown  <-  state  <-  settings  <-  status  <-  errors  <-  chatview
//     <-  conversations  <-  reply  <-  models  <-  main
// and the few calls that go back up (an error's "Reload model", the chat's example prompts,
// Regenerate and Edit, the cache list's redraw) are hooks main sets (errors.onReload,
// chatview.onChatActions, models.onCacheChange).
import * as bitweb from '../bitweb.mjs';
import * as store from './store.mjs';
import * as offline from '../offline.mjs';
import { $ } from './util.mjs';
import { ADDRESS, params, state, stopReply } from './state.mjs';
import { checkFields, contextProblem, restoreSettings, saveSettings, saveThinkingChoice, showOptions } from './settings.mjs';
import { updatePhase } from './status.mjs';
import { onReload, showError, watchSilence } from './errors.mjs';
import { onChatActions } from './chatview.mjs';
import { exportConversation, importConversation, newChat, openConversation } from './conversations.mjs';
import { editMessage, regenerate, send } from './reply.mjs';
import { loadModel, onCacheChange, refreshCache, reloadCurrent } from './models.mjs';
import { mountCatalogue } from './catalogue.mjs';

window.bitwebApp = { state, bitweb, store };
onReload((source) => loadModel(source));
onChatActions({ send, regenerate, edit: editMessage });
watchSilence();
// The Models list (catalogue.mjs): the catalogue with fit verdicts, unfinished downloads.
const catalogue = mountCatalogue($('catalogue-list'), $('download-list'), { bitweb, load: (s) => loadModel(s), address: ADDRESS });
window.bitwebApp.catalogue = catalogue;
onCacheChange(() => catalogue.refresh());

function setDrawer(open) {
  document.body.classList.toggle('side-open', open);
  $('menu').setAttribute('aria-expanded', String(open));
}

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
  $('url-form').addEventListener('submit', (e) => { e.preventDefault(); loadModel(bitweb.resolveUrl($('url-input').value, location.href)); });
  $('cancel-load').addEventListener('click', () => { state.loading?.ctl.abort(); });
  $('persist').addEventListener('click', async () => { await bitweb.cache.persist(); refreshCache(); });
  $('kv-clear').addEventListener('click', async () => { await bitweb.cache.clearConversations(); refreshCache(); });
  $('kv-save-mb').addEventListener('change', () => { saveSettings(); refreshCache(); });
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
  for (const id of ['json-on', 'json-schema']) $(id).addEventListener('input', () => { checkFields(); updatePhase(); saveSettings(); });
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
  showOptions();
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
  // one engine for every tab of the site (a SharedWorker; ?share=0: this tab's own): a second tab
  // attaches to the model the first one loaded (bitweb.connect / load share, web/shared.mjs); only
  // tabs of one version of the app (as its service worker serves it: web/sw.js pins) share one.
  // Where the browser has no SharedWorker, or no WebGPU in one, this tab has its own (info.sharedNote)
  const sw = await offline.status().catch(() => null);
  const group = sw ? `${sw.pin}:${sw.version}` : '';
  await bitweb.connect({ share: params.get('share') !== '0', group }).catch((e) => console.warn('bitweb: no shared engine:', e));
  refreshCache();
  let source = ADDRESS.defaultSource, fallback = false;
  try {
    const last = JSON.parse(localStorage.getItem('bitweb.last') || 'null');
    if (last && last.cached && !params.get('model')) { source = last; fallback = true; }
  } catch { /* the default */ }
  await loadModel(source, fallback ? { fallback } : {});
}

boot();
