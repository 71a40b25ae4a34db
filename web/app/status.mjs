// The page's phase and status line.
import { $ } from './util.mjs';
import { state } from './state.mjs';
import { settingsProblem } from './settings.mjs';

export function busy() { return !!(state.loading || state.gen); }
// body[data-state] (boot | loading | ready | generating | failed), the send / stop buttons and the
// status line, from `state` and the settings.
export function updatePhase() {
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
