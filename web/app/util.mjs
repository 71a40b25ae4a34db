// The app's small helpers: DOM shorthands ($, button, kv lists, the stats list), sizes and times
// as text, a source's name, and a question in the page's dialog (ask). Imports nothing.

export const $ = (id) => document.getElementById(id);

// The name a model source goes by: a cached model's name, a file's name, a URL's last segment.
export const nameOf = (source) => {
  if (source && typeof source === 'object' && source.cached) return source.cached;
  if (typeof Blob !== 'undefined' && source instanceof Blob) return source.name || 'file';
  return String(source).split(/[?#]/)[0].split('/').pop() || 'model';
};

export function button(text, onclick, cls) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  if (cls) b.className = cls;
  b.addEventListener('click', onclick);
  return b;
}

export function mb(n) {
  if (n == null) return '–';
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1 << 30) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  return `${(n / (1 << 30)).toFixed(2)} GiB`;
}
export function sec(ms) { return ms == null ? '–' : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`; }

export function kv(el, rows) {
  const dl = document.createElement('dl');
  for (const [k, v] of rows) {
    if (v == null || v === '') continue;
    const dt = document.createElement('dt'); dt.textContent = k;
    const dd = document.createElement('dd'); dd.textContent = String(v);
    dl.append(dt, dd);
  }
  el.replaceChildren(dl);
}

export function setStats(obj) {
  const dl = $('stats');
  dl.replaceChildren();
  for (const [k, v] of Object.entries(obj)) {
    const dt = document.createElement('dt'); dt.textContent = k;
    const dd = document.createElement('dd'); dd.textContent = String(v); dd.dataset.stat = k;
    dl.append(dt, dd);
  }
}

// A question in the page's dialog: true / false, or the text typed (null: cancelled) when `input` is given.
export function ask(text, okLabel, cancelLabel = 'Cancel', input = null) {
  const dlg = $('ask');
  $('ask-text').textContent = text;
  $('ask-ok').textContent = okLabel;
  $('ask-cancel').textContent = cancelLabel;
  $('ask-input').hidden = input === null;
  if (input !== null) $('ask-input').value = input;
  dlg.returnValue = '';
  dlg.showModal();
  if (input !== null) $('ask-input').select();
  return new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      const ok = dlg.returnValue === 'ok';
      resolve(input !== null ? (ok ? $('ask-input').value : null) : ok);
    }, { once: true });
  });
}
