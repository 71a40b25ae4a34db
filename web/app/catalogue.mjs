// The Models list of the app: the catalogue (bitweb.models) with each model's facts, what could not
// be confirmed, and its fit verdict here (bitweb.checkFit: this GPU's limits with ?cap= applied,
// the GPU memory ?cap=memory: says, the storage the site has left) before any byte is downloaded;
// a model that cannot fit has no download button. Beside the button: what of the entry rests on one
// public source or none (web/catalogue.mjs sourceNote). Unfinished downloads (any URL) are listed
// with Resume (the load asks for the rest) and Delete. All text is set as text (no HTML).
import { sourceNote } from '../catalogue.mjs';

const mb = (n) => (n == null ? '?' : n < 1e9 ? `${(n / 1e6).toFixed(0)} MB` : `${(n / 1e9).toFixed(2)} GB`);   // (as the hub says them)
const el = (tag, props = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v; else if (k.startsWith('data-')) e.setAttribute(k, v); else e[k] = v;
  }
  e.append(...kids.filter((k) => k != null));
  return e;
};

/**
 * Show the catalogue in `root` (and unfinished downloads in `downloads`).
 * hooks: {bitweb, load(source) (the app's loadModel), address: {capLimits, gpuMemory}}
 * Returns {refresh(), load(source)}: call refresh() when the cache changes; load is the app's loadModel.
 */
export function mountCatalogue(root, downloads, { bitweb, load, address }) {
  let pass = 0;
  async function refresh() {
    const mine = ++pass;
    let verdicts, cached = [], parts = [];
    try {
      [cached, parts] = await Promise.all([bitweb.cache.list(), bitweb.cache.downloads()]);
      verdicts = await Promise.all(bitweb.models.map((m) => bitweb.checkFit(m, address).catch((e) => ({ verdict: 'unknown', text: e.message }))));
    } catch (e) {
      if (mine === pass) root.replaceChildren(el('li', { class: 'hint', textContent: `The catalogue cannot be checked here: ${e.message}` }));
      return;
    }
    if (mine !== pass) return;                    // a newer refresh is under way
    root.replaceChildren(...bitweb.models.map((m, i) => row(m, verdicts[i], cached, parts)));
    const others = parts.filter((d) => !bitweb.models.some((m) => m.url === d.source));
    downloads.replaceChildren(...others.map(partRow));
    downloads.hidden = !others.length;
  }

  function row(m, fit, cached, parts) {
    const isCached = cached.some((c) => c.source === m.url || (m.sha256 && c.sha256 === m.sha256));
    const part = parts.find((d) => d.source === m.url);
    const facts = [m.family, `${m.architecture}, ${m.weights}`, `${mb(m.fileSize)}${m.sizeExact ? '' : ' (about)'}`,
      `context ${m.context}`, m.license].join(' · ');
    const li = el('li', { 'data-id': m.id, 'data-verdict': fit.verdict },
      el('strong', { textContent: m.name }),
      el('small', { class: 'facts', textContent: facts }),
      el('span', { class: `fit fit-${fit.verdict}`, textContent: isCached ? `cached; ${fit.text}` : fit.text }));
    if (m.runs !== true) li.append(el('small', { class: 'note', textContent: `Not run by this bitweb yet: ${m.runs}.` }));
    if (m.unconfirmed) li.append(el('small', { class: 'note', textContent: `Note: ${m.unconfirmed}.` }));
    if (!m.sha256) li.append(el('small', { class: 'note', textContent: 'No published SHA-256 found: the download is not verified.' }));
    const weak = sourceNote(m);
    if (weak) li.append(el('small', { class: 'note sources', textContent: `Few sources: ${weak}.` }));
    const row = el('div', { class: 'row' });
    const repo = el('a', { href: `https://huggingface.co/${m.repo}`, textContent: m.repo, target: '_blank', rel: 'noopener noreferrer' });
    if (fit.verdict !== 'no' && m.runs === true) {
      const label = isCached ? 'Load' : part ? `Resume download (${mb(part.have)} of ${mb(part.size ?? m.fileSize)}) and load`
        : `Download (${mb(m.fileSize)}) and load`;
      const b = el('button', { type: 'button', textContent: label });
      b.setAttribute('aria-label', `${label}: ${m.name}`);
      b.addEventListener('click', () => load(m.url));
      row.append(b);
    }
    if (part) row.append(deleteButton(part));
    row.append(repo);
    li.append(row);
    return li;
  }

  function partRow(d) {
    const li = el('li', {}, el('span', { class: 'name', textContent: d.name, title: d.source }),
      el('small', { textContent: `${mb(d.have)} of ${mb(d.size)}` }));
    const b = el('button', { type: 'button', textContent: 'Resume' });
    b.setAttribute('aria-label', `Resume the download of ${d.name}`);
    b.addEventListener('click', () => load(d.source));
    li.append(b, deleteButton(d));
    return li;
  }

  function deleteButton(d) {
    const b = el('button', { type: 'button', class: 'danger', textContent: 'Delete download' });
    b.setAttribute('aria-label', `Delete the unfinished download of ${d.name}`);
    b.addEventListener('click', async () => { await bitweb.cache.delete(d.name); refresh(); });
    return b;
  }

  return { refresh, load };
}
