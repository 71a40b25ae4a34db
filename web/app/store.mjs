// Conversations in IndexedDB (database "bitweb", store "conversations"), saved as they happen.
// A conversation: {id, title, created, updated, messages: [{role, content, model?, finish?}], contextStart}
// messages are the OpenAI shape plus what the page shows (the model that wrote a reply, why it ended);
// contextStart: messages before it (after a system message) are no longer sent to the model.

const DB = 'bitweb', STORE = 'conversations';
let dbp = null;

function db() {
  dbp ??= new Promise((resolve, reject) => {
    const rq = indexedDB.open(DB, 1);
    rq.onupgradeneeded = () => rq.result.createObjectStore(STORE, { keyPath: 'id' });
    rq.onsuccess = () => resolve(rq.result);
    rq.onerror = () => reject(rq.error);
  });
  return dbp;
}

async function tx(mode, fn) {
  const d = await db();
  return new Promise((resolve, reject) => {
    const t = d.transaction(STORE, mode);
    const rq = fn(t.objectStore(STORE));
    t.oncomplete = () => resolve(rq?.result);
    t.onerror = () => reject(t.error);
    t.onabort = () => reject(t.error);
  });
}

export function newConversation(system) {
  const now = Date.now();
  return { id: `c${now.toString(36)}${Math.random().toString(36).slice(2, 7)}`, title: 'New chat', created: now, updated: now,
    messages: system ? [{ role: 'system', content: system }] : [], contextStart: 0 };
}

/** All conversations, newest first (messages included). */
export async function all() {
  const list = (await tx('readonly', (s) => s.getAll())) || [];
  return list.sort((a, b) => b.updated - a.updated);
}

export async function get(id) { return tx('readonly', (s) => s.get(id)); }

export async function save(conv) {
  conv.updated = Date.now();
  await tx('readwrite', (s) => s.put(JSON.parse(JSON.stringify(conv))));
}

export async function remove(id) { await tx('readwrite', (s) => s.delete(id)); }

/** The OpenAI messages of a conversation (what export writes). */
export function exported(conv) {
  return { title: conv.title, messages: conv.messages.map((m) => ({ role: m.role, content: m.content })) };
}

/** A conversation from exported JSON ({messages} or a bare messages array); throws naming what is wrong. */
export function imported(json, fallbackTitle) {
  const v = typeof json === 'string' ? JSON.parse(json) : json;
  const msgs = Array.isArray(v) ? v : v?.messages;
  if (!Array.isArray(msgs)) throw new Error('expected {"messages": [...]} or a list of messages');
  msgs.forEach((m, i) => {
    if (!m || !['system', 'user', 'assistant'].includes(m.role) || typeof m.content !== 'string') {
      throw new Error(`messages[${i}] must be {"role": "system" | "user" | "assistant", "content": "..."}`);
    }
  });
  const conv = newConversation(null);
  conv.messages = msgs.map((m) => ({ role: m.role, content: m.content }));
  conv.title = (typeof v?.title === 'string' && v.title.trim()) || titleOf(conv) || fallbackTitle;
  return conv;
}

export function titleOf(conv) {
  const first = conv.messages.find((m) => m.role === 'user');
  if (!first) return null;
  const t = first.content.replace(/\s+/g, ' ').trim();
  return t.length > 48 ? t.slice(0, 47) + '…' : t;
}
