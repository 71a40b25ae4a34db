// The conversations: open, start, save (store.mjs: IndexedDB), rename, delete, export and import,
// and their list in the side panel.
import * as store from './store.mjs';
import { $, ask, button } from './util.mjs';
import { state, stopReply } from './state.mjs';
import { showError } from './errors.mjs';
import { countContext, renderChat } from './chatview.mjs';

export async function openConversation(conv) {
  if (state.gen) await stopReply();
  state.conv = conv;
  localStorage.setItem('bitweb.conv', conv.id);
  renderChat();
  renderConversations();
  countContext();
}

export async function newChat() {
  if (state.gen) await stopReply();
  const conv = store.newConversation($('system').value.trim() || null);
  state.convs.unshift(conv);
  await openConversation(conv);
  $('input').focus();
}

export async function persist(conv = state.conv) {
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

export function exportConversation() {
  const data = JSON.stringify(store.exported(state.conv), null, 1);
  const a = document.createElement('a');
  a.href = URL.createObjectURL(new Blob([data], { type: 'application/json' }));
  a.download = `${(state.conv.title || 'chat').replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 60)}.json`;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

export async function importConversation(file) {
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
