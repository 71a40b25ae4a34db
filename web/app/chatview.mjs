// The chat view: the open conversation's messages (Markdown built as DOM nodes by markdown.mjs:
// model text never becomes HTML), the intro card, the context meter and the reply announcement.
import * as bitweb from '../bitweb.mjs';
import { copyText, render, splitThinking } from './markdown.mjs';
import { $, button, nameOf } from './util.mjs';
import { state } from './state.mjs';

const DEFAULT_NAME = nameOf(bitweb.DEFAULT_MODEL);      // the shipped model gets its own intro card

// What the chat's buttons do (reply.mjs, set by main.mjs): send(text) an example prompt,
// regenerate(i) the reply at message i, edit(el, i) the user's message i in place.
const hooks = { send: null, regenerate: null, edit: null };
export function onChatActions(fns) { Object.assign(hooks, fns); }

export function renderChat() {
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
      const b = button(text, () => hooks.send(text), 'example');
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

export function fillMessage(el, m, streaming = false) {
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
    if (m.role === 'assistant') actions.push(button('Regenerate', () => hooks.regenerate(i), 'act'));
    if (m.role === 'user') actions.push(button('Edit', () => hooks.edit(el, i), 'act'));
    for (const b of actions) b.setAttribute('aria-label', `${b.textContent} ${m.role === 'user' ? 'your message' : 'this reply'}`);
  }
  const text = document.createElement('span');
  text.textContent = bits.join(' · ');
  foot.replaceChildren(text, ...actions);
}

export function lastMessageEl() { const all = $('chat').querySelectorAll('.msg'); return all[all.length - 1]; }

// The messages the model sees: the system message, then those from contextStart on.
export function contextMessages(conv = state.conv) {
  const out = [];
  conv.messages.forEach((m, i) => {
    if (m.role === 'system' ? i === 0 : i >= conv.contextStart) out.push({ role: m.role, content: m.content });
  });
  return out;
}

export async function countContext() {
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

export function showMeter(n, N) {
  const m = $('context-meter');
  m.textContent = `context ${n} / ${N} tokens`;
  m.classList.toggle('full', n >= N - 1);
  m.title = 'Tokens of this conversation that the model reads for its next reply, of its context size';
}

// One announcement per finished reply (the chat itself is not a live region: no per-token chatter).
export function announce(m) {
  const { answer } = splitThinking(m.content);
  $('announce').textContent = '';
  setTimeout(() => { $('announce').textContent = `Reply${m.finish === 'abort' ? ' (stopped)' : ''}: ${answer}`; }, 50);
}

export function scrollDown() { const c = $('chat'); c.scrollTop = c.scrollHeight; }
