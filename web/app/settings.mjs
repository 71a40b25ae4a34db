// The settings in the side panel: the sampling fields (checked as typed, with bitweb.checkSetting),
// the load options (activations, KV cache, context, caching), the system prompt, the Thinking
// switch and JSON output (a schema, checked as typed); kept in localStorage. Their choices and bounds are the library's (bitweb.OPTIONS,
// bitweb.SETTINGS): the page keeps no copy of them.
import * as bitweb from '../bitweb.mjs';
import { $ } from './util.mjs';
import { ADDRESS, state } from './state.mjs';

const FIELDS = () => [...$('settings').querySelectorAll('input')];

// The load options' choices (with their labels) and every field's bounds, into the form.
export function showOptions() {
  for (const [id, opt] of [['activations', bitweb.OPTIONS.activations], ['kv-cache', bitweb.OPTIONS.kv_cache]]) {
    $(id).replaceChildren(...Object.entries(opt.choices).map(([value, label]) => new Option(label, value)));
    $(id).value = opt.default;
  }
  for (const input of FIELDS()) {
    const [, lo, hi, open] = bitweb.SETTINGS[input.name];
    input.min = String(open ? lo + Number(input.step) : lo);      // (a bound it excludes: the first step above)
    input.max = String(hi);
  }
  $('max-context').min = String(bitweb.OPTIONS.context.min);
  // Speculative decoding: Automatic, the library's modes that need no second model, Off.
  const modes = Object.entries(bitweb.OPTIONS.speculative.choices).filter(([mode]) => mode !== DRAFT);
  $('speculative').replaceChildren(new Option('Automatic: prompt lookup where it pays', AUTO),
    ...modes.map(([mode, label]) => new Option(label[0].toUpperCase() + label.slice(1), mode)), new Option('Off', OFF));
  $('speculative').value = AUTO;
}

// The speculative select's own entries (the others are bitweb.OPTIONS.speculative's modes).
const AUTO = 'auto', OFF = 'off', DRAFT = Object.keys(bitweb.OPTIONS.speculative.choices).at(-1);

function fieldProblem(input) {
  if (input.value.trim() === '') return 'enter a value';
  const why = bitweb.checkSetting(input.name, Number(input.value));
  return why ? why.replace(/ \(got .*\)$/, '') : null;
}

export function contextProblem() {
  const v = $('max-context').value.trim();
  if (v === '') return null;
  const n = Number(v), min = bitweb.OPTIONS.context.min;
  return Number.isInteger(n) && n >= min ? null : `must be a whole number of at least ${min} (or empty: the model's)`;
}

function showFieldError(input, errEl, problem) {
  input.setAttribute('aria-invalid', problem ? 'true' : 'false');
  errEl.hidden = !problem;
  errEl.textContent = problem || '';
}

// JSON output: the schema text, checked as typed (JSON, and a schema: an object or a boolean); the
// engine names what it cannot express when the request is sent (a settings error on this field).
export function jsonProblem() {
  if (!$('json-on').checked) return null;
  const text = $('json-schema').value.trim();
  if (!text) return null;
  let v;
  try { v = JSON.parse(text); } catch (e) { return `is not JSON: ${e.message}`; }
  return v !== null && (typeof v === 'object' && !Array.isArray(v) || typeof v === 'boolean') ? null : 'must be a JSON Schema: an object';
}

// The create() fields of JSON output: {} when it is off.
export function jsonOutput() {
  if (!$('json-on').checked) return {};
  const text = $('json-schema').value.trim();
  return { response_format: text ? { type: 'json_schema', json_schema: { name: 'reply', schema: JSON.parse(text) } } : { type: 'json_object' } };
}

// Speculative decoding: the create() field of the setting for the loaded model. 'auto' drafts by prompt
// lookup on a hardware GPU only. Measured on CPU rasterisers (PERFORMANCE.md, "Speculative decoding"):
// in Chromium on SwiftShader (two runs, default model) copy, extraction and code went 0.75-1.58x as fast
// with drafting, extraction slower in both, a question asked again 1.9-4.2x: no gain outside repeats
// beyond the noise, a loss where drafts fail. A checking pass of 8 rows costs 1.5-2.5 decode steps on
// a CPU, whose arithmetic grows with the rows. A GPU's decode is bound by reading the weights, which
// a pass reads once for all its rows (not measured here: no GPU in this project's runs).
export const lookupPays = (info) => !info.adapter?.software;

export function speculativeOption(info) {
  const v = $('speculative').value;
  const mode = v === AUTO ? (lookupPays(info) ? Object.keys(bitweb.OPTIONS.speculative.choices)[0] : null) : v === OFF ? null : v;
  return mode ? { speculative: { mode } } : {};
}

export function checkFields() {
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
  showFieldError($('json-schema'), $('json-schema-error'), jsonProblem());
}

export function settingsProblem() {
  for (const input of FIELDS()) {
    const p = fieldProblem(input);
    if (p) return `${input.labels[0]?.textContent || input.name} ${p}`;
  }
  const j = jsonProblem();
  return j ? `The JSON output schema ${j}` : null;
}

export function samplingSettings() {
  const s = {};
  for (const input of FIELDS()) s[input.name] = Number(input.value);
  return s;
}

export function restoreSettings() {
  try {
    const saved = JSON.parse(localStorage.getItem('bitweb.settings') || '{}');
    for (const input of FIELDS()) if (saved[input.name] != null) input.value = saved[input.name];
    if (saved.system != null) $('system').value = saved.system;
    if (saved.activations) $('activations').value = saved.activations;
    if (typeof saved.kvCache === 'string' && Object.hasOwn(bitweb.OPTIONS.kv_cache.choices, saved.kvCache)) $('kv-cache').value = saved.kvCache;
    if (saved.maxContext != null) $('max-context').value = saved.maxContext;
    if (saved.cacheFiles != null) $('cache-files').checked = saved.cacheFiles;
    if (saved.kvSaveMb != null) $('kv-save-mb').value = saved.kvSaveMb;
    if (saved.jsonOn != null) $('json-on').checked = !!saved.jsonOn;
    if (typeof saved.jsonSchema === 'string') $('json-schema').value = saved.jsonSchema;
    if ([...$('speculative').options].some((o) => o.value === saved.speculative)) $('speculative').value = saved.speculative;
  } catch { /* a bad saved value: the defaults */ }
}

export function saveSettings() {
  const s = {};
  for (const input of FIELDS()) s[input.name] = input.value;
  Object.assign(s, { system: $('system').value, activations: $('activations').value, kvCache: $('kv-cache').value, maxContext: $('max-context').value,
    cacheFiles: $('cache-files').checked, kvSaveMb: $('kv-save-mb').value, jsonOn: $('json-on').checked, jsonSchema: $('json-schema').value,
    speculative: $('speculative').value });
  localStorage.setItem('bitweb.settings', JSON.stringify(s));
}

// The Thinking switch starts from the model's own default (what its template does without
// enable_thinking); a change the user makes is kept for that model (by file name), not for others.
export function thinkingChoices() {
  try { return JSON.parse(localStorage.getItem('bitweb.thinking') || '{}'); } catch { return {}; }
}

export function saveThinkingChoice() {
  const name = state.engine?.info.name;
  if (!name) return;
  const c = thinkingChoices();
  delete c[name];                       // most recent last; keep the last 32 models
  c[name] = $('thinking').checked;
  localStorage.setItem('bitweb.thinking', JSON.stringify(Object.fromEntries(Object.entries(c).slice(-32))));
}

// The options of a load (bitweb.load) from the form and the address.
export function loadOptions(extra = {}) {
  const ctx = $('max-context').value;
  return { activations: $('activations').value, kvCache: $('kv-cache').value, context: ctx === '' ? null : Number(ctx), capLimits: ADDRESS.capLimits,
    maskFeatures: ADDRESS.maskFeatures,
    gpuMemory: ADDRESS.gpuMemory, cache: $('cache-files').checked, kvSaveBytes: kvSaveBytes(), ...extra };
}

// The bound of the saved KV caches of conversations (MB in the form; empty or not positive: null,
// the library's default).
function kvSaveBytes() {
  const v = Number($('kv-save-mb').value);
  return $('kv-save-mb').value !== '' && Number.isFinite(v) && v > 0 ? v * (1 << 20) : null;
}
