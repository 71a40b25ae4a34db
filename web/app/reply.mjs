// Replies: send a message, stream the model's reply into the chat, regenerate or edit, and what
// happens when the conversation no longer fits the context (drop the oldest turns or start anew).
import { $, button, sec, setStats } from './util.mjs';
import { state } from './state.mjs';
import { checkFields, jsonOutput, samplingSettings, settingsProblem, speculativeOption } from './settings.mjs';
import { updatePhase } from './status.mjs';
import { showError } from './errors.mjs';
import { announce, contextMessages, fillMessage, lastMessageEl, renderChat, scrollDown, showMeter } from './chatview.mjs';
import { newChat, persist } from './conversations.mjs';
import { refreshCache } from './models.mjs';

export async function send(text) {
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
    const stream = await eng.chat.completions.create({ messages: msgs, stream: true, ...samplingSettings(), ...thinkingOption(eng),
      ...jsonOutput(), ...speculativeOption(eng.info), signal: ctl.signal });
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
    const cached = usage.prompt_tokens_details?.cached_tokens;
    if (cached) bits.push(`${cached} of ${usage.prompt_tokens} prompt tokens from the cache`);
    if (timing.decode_tok_s) bits.push(`${timing.decode_tok_s.toFixed(1)} tok/s`);
    if (usage?.speculative) bits.push(`${drafts(usage.speculative)} drafted tokens kept`);
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
    'Prompt tokens from the cache': usage?.prompt_tokens_details?.cached_tokens ?? '–',
    Tokens: usage.completion_tokens, Finish: finish,
    'Drafted tokens kept': usage?.speculative ? `${drafts(usage.speculative)} (prompt lookup)` : 'off',
  });
  announce(m);
  updatePhase();
  refreshCache();                                   // (the storage line, once the conversation's cache is saved)
  if (document.activeElement === document.body || !document.activeElement || document.activeElement === $('stop')) $('input').focus();
}

const drafts = (s) => `${s.accepted} of ${s.drafted}`;   // usage.speculative: the acceptance

function thinkingOption(eng) {                      // (JSON output: the engine turns thinking off)
  return eng.info.thinking && !$('json-on').checked ? { enable_thinking: $('thinking').checked } : {};
}

export async function regenerate(i) {
  if (state.gen || !state.engine) return;
  state.conv.messages.splice(i);
  await persist();
  renderChat();
  await reply();
}

export function editMessage(el, i) {
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
