// Errors as the page shows them: a title and advice per kind (bitweb.ERROR_KINDS and the app's
// own: timeout, import), the message, and actions (reload the model or the page, dismiss).
import { lastHeard } from '../bitweb.mjs';
import { $, button } from './util.mjs';
import { state } from './state.mjs';
import { busy } from './status.mjs';

const SILENCE_MS = 120_000;      // warn when a busy engine says nothing for this long

// What the page does for an error's actions: reload(source) loads a model again (models.mjs, set by main.mjs).
const hooks = { reload: null };
export function onReload(fn) { hooks.reload = fn; }

const ADVICE = {
  'no-webgpu': ['WebGPU is not available', [
    'Use a recent Chrome or Edge (version 113 or later) on a desktop or laptop.',
    'On Linux, start Chrome with --enable-unsafe-webgpu (and --enable-features=Vulkan), or enable chrome://flags/#enable-unsafe-webgpu.',
    'Firefox Nightly and Safari Technology Preview: enable WebGPU in their settings or feature flags.',
    'Open the page from http://localhost, http://127.0.0.1 or https (WebGPU needs a secure context).']],
  limits: ['This GPU\'s limits are too small for this model', ['Try a smaller model or a smaller context, or another browser or GPU with larger limits. The model you had still works.']],
  format: ['This file is not a model bitweb can read', ['bitweb reads GGUF files (versions 2 and 3): BitNet b1.58, Bonsai (Qwen3), Qwen2 / Qwen2.5 and Llama-style models such as SmolLM2, in the architectures and weight formats below.']],
  unsupported: ['This model is not supported', ['bitweb runs BitNet b1.58 (2B4T, 1bitLLM), Bonsai (Qwen3), Qwen2 / Qwen2.5 and Llama-style models such as SmolLM2 and Falcon3 1.58-bit, in the architectures and weight formats below.']],
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

export function showError(e) {           // e: a BitwebError or {kind, message, advice?}
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
  if (['device-lost', 'out-of-memory', 'gpu'].includes(kind) && again) actions.push(['Reload model', () => { hideError(); hooks.reload(again); }]);
  if (kind === 'internal' || kind === 'timeout') actions.push(['Reload page', () => location.reload()]);
  actions.push(['Dismiss', hideError]);
  $('error-actions').replaceChildren(...actions.map(([t, fn]) => button(t, fn)));
}

export function hideError() { $('error').hidden = true; delete $('error').dataset.kind; }

// Warn when a busy engine has said nothing for SILENCE_MS (checked every 5 s): neither the request
// (progress, text) nor the worker itself (its heartbeat while a request runs: bitweb.lastHeard), so a
// slow machine that is still working (a long prefill, a slow compile or download) is never warned.
export function watchSilence() {
  setInterval(() => {
    const heard = Math.max(state.lastHeard, lastHeard() ?? -Infinity);
    if (busy() && performance.now() - heard > SILENCE_MS && $('error').dataset.kind !== 'timeout') {
      showError({ kind: 'timeout', message: `The engine has not reported anything for ${SILENCE_MS / 1000} s (while ${document.body.dataset.state}).` });
    }
  }, 5000);
}
