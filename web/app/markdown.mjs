// Replies as Markdown, built as DOM nodes from markdown-it's tokens: model text only ever becomes
// Text nodes (never HTML). markdown-it runs with html: false, so raw HTML in a reply is plain
// text; links are markdown-it's validated ones (no javascript: / data: URLs); images become links.
import markdownit from '../../node_modules/markdown-it/dist/browser/markdown-it.esm.min.mjs';

const md = markdownit({ html: false, linkify: false, breaks: true, typographer: false });

// Elements a token may create; any other tag becomes a <span>. Headings become bold paragraphs
// (a reply has no place in the page's heading outline).
const TAGS = new Set(['p', 'ul', 'ol', 'li', 'blockquote', 'em', 'strong', 's', 'a', 'code', 'hr', 'br',
  'table', 'thead', 'tbody', 'tr', 'th', 'td']);

function element(tok) {
  if (/^h[1-6]$/.test(tok.tag)) { const p = document.createElement('p'); p.className = 'md-h'; return p; }
  const el = document.createElement(TAGS.has(tok.tag) ? tok.tag : 'span');
  if (tok.tag === 'a') {
    const href = tok.attrGet('href');
    if (href && md.validateLink(href)) { el.href = href; el.target = '_blank'; el.rel = 'noopener noreferrer'; }
  }
  if (tok.tag === 'ol' && tok.attrGet('start')) el.start = Number(tok.attrGet('start')) || 1;
  return el;
}

function codeBlock(text, lang) {
  const wrap = document.createElement('div');
  wrap.className = 'code';
  const pre = document.createElement('pre');
  const code = document.createElement('code');
  code.textContent = text;
  if (lang) code.dataset.lang = lang;
  pre.append(code);
  const copy = document.createElement('button');
  copy.type = 'button';
  copy.className = 'copy-code';
  copy.textContent = 'Copy';
  copy.setAttribute('aria-label', 'Copy code');
  copy.addEventListener('click', () => copyText(text, copy));
  wrap.append(copy, pre);
  return wrap;
}

export async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    if (button) { const t = button.textContent; button.textContent = 'Copied'; setTimeout(() => { button.textContent = t; }, 1200); }
  } catch {
    if (button) button.textContent = 'Copy failed';
  }
}

function inline(parent, tokens) {
  const stack = [parent];
  for (const t of tokens) {
    const top = stack[stack.length - 1];
    if (t.nesting === 1) { const el = element(t); top.append(el); stack.push(el); }
    else if (t.nesting === -1) { if (stack.length > 1) stack.pop(); }
    else if (t.type === 'code_inline') { const c = document.createElement('code'); c.textContent = t.content; top.append(c); }
    else if (t.type === 'softbreak' || t.type === 'hardbreak') top.append(document.createElement('br'));
    else if (t.type === 'image') {
      const src = t.attrGet('src') || '';
      const a = document.createElement('a');
      if (md.validateLink(src)) { a.href = src; a.target = '_blank'; a.rel = 'noopener noreferrer'; }
      a.textContent = `[image: ${t.content || src}]`;
      top.append(a);
    } else top.append(document.createTextNode(t.content));      // text, html_inline (as text) ...
  }
}

/** A DocumentFragment of `text` rendered as Markdown. */
export function render(text) {
  const frag = document.createDocumentFragment();
  const stack = [frag];
  for (const t of md.parse(text, {})) {
    const top = stack[stack.length - 1];
    if (t.type === 'inline') inline(top, t.children || []);
    else if (t.type === 'fence' || t.type === 'code_block') top.append(codeBlock(t.content.replace(/\n$/, ''), (t.info || '').trim().split(/\s+/)[0]));
    else if (t.nesting === 1) { const el = element(t); top.append(el); stack.push(el); }
    else if (t.nesting === -1) { if (stack.length > 1) stack.pop(); }
    else if (t.type === 'hr') top.append(document.createElement('hr'));
    else if (t.content) { const p = document.createElement('p'); p.textContent = t.content; top.append(p); }  // html_block: text
  }
  return frag;
}

/** Split a reply into its thinking (inside a leading <think>…</think>) and its answer. */
export function splitThinking(text) {
  const m = /^\s*<think>([\s\S]*?)(<\/think>|$)([\s\S]*)$/.exec(text);
  if (!m) return { thinking: null, answer: text, open: false };
  return { thinking: m[1].trim(), answer: m[3].replace(/^\s+/, ''), open: !m[2] };
}
