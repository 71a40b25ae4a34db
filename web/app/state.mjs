// What the app holds now (one `state` object every module reads and writes) and what its address
// asks for (ADDRESS: ?model=, ?cap=).
import * as bitweb from '../bitweb.mjs';
import { parseCap } from '../cap.mjs';

export const state = {
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

// Stop the reply being generated (state.gen), if any; resolves once it has ended.
export async function stopReply() {
  const g = state.gen;
  if (!g) return;
  g.ctl.abort();
  await g.done;
}

export const params = new URLSearchParams(location.search);

// The page address: ?model= (the default model's source; hf: and page addresses too) and ?cap=
// (act as a smaller GPU: limits, memory, masked features; ../cap.mjs).
function fromAddress() {
  const out = { defaultSource: bitweb.DEFAULT_MODEL, ...parseCap(params.get('cap')) };
  if (params.get('model')) out.defaultSource = bitweb.resolveUrl(params.get('model'), location.href);
  return out;
}
export const ADDRESS = fromAddress();
