// Static server for the app: http://127.0.0.1:PORT (default 8080; PORT or --port to change).
// Serves only files from the repo (web/, node_modules/pyodide/, markdown-it's browser build, hash-wasm, wllama's
// esm/ build for the ready-time benchmark when installed, build/web/, shaders/), no network.
// The boot snapshot (build/web/boot-snapshot.bin, 31 MB) goes gzip-compressed (6 MB) where it can.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argPort = process.argv.indexOf('--port');
const PORT = Number(argPort > 0 ? process.argv[argPort + 1] : (process.env.PORT || 8080));
const HOST = process.env.HOST || '127.0.0.1';

// URL prefix -> directory under ROOT. Anything else is 404.
const MOUNTS = [
  ['/node_modules/pyodide/', 'node_modules/pyodide/'],
  ['/node_modules/markdown-it/dist/browser/', 'node_modules/markdown-it/dist/browser/'],
  ['/node_modules/hash-wasm/dist/', 'node_modules/hash-wasm/dist/'],
  ['/node_modules/@wllama/wllama/esm/', 'node_modules/@wllama/wllama/esm/'],
  ['/build/web/', 'build/web/'],
  ['/shaders/', 'shaders/'],
  ['/', 'web/'],
];
// Files that may have a gzip-compressed copy beside them (made at set-up time).
const PRECOMPRESSED = new Set(['boot-snapshot.bin']);
const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.css': 'text/css', '.json': 'application/json', '.wasm': 'application/wasm',
  '.zip': 'application/zip', '.wgsl': 'text/plain; charset=utf-8', '.png': 'image/png',
  '.svg': 'image/svg+xml', '.gguf': 'application/octet-stream', '.map': 'application/json',
  '.txt': 'text/plain; charset=utf-8', '.whl': 'application/zip',
};

// The file a request path names, or null (404). Throws URIError for a malformed %-escape.
export function resolve(urlPath) {
  let p = decodeURIComponent(urlPath.split('?')[0]);
  if (p.includes('\0')) return null;
  if (p.endsWith('/')) p += 'index.html';
  for (const [prefix, dir] of MOUNTS) {
    if (!p.startsWith(prefix)) continue;
    const base = path.join(ROOT, dir);
    const file = path.normalize(path.join(base, p.slice(prefix.length)));
    if (!file.startsWith(base)) return null;
    return file;
  }
  return null;
}

function plain(res, status, text, extra = {}) {
  if (res.headersSent) { res.destroy(); return; }
  res.writeHead(status, { 'content-type': 'text/plain; charset=utf-8', 'content-length': Buffer.byteLength(text), ...extra });
  res.end(text);
}

// The path of a request target: origin-form "/p?q", or absolute-form "http://host/p?q"
// (which HTTP/1.1 servers must accept). Anything else ("*", "host:port", "p") is null.
function targetPath(url) {
  if (url.startsWith('/')) return url;
  if (/^https?:\/\//i.test(url)) {
    try { const u = new URL(url); return u.pathname + u.search; } catch { return null; }
  }
  return null;
}

function serve(req, res) {
  if (req.method !== 'GET' && req.method !== 'HEAD') {
    plain(res, 405, 'method not allowed (GET and HEAD only)\n', { allow: 'GET, HEAD' });
    return;
  }
  const target = targetPath(req.url);
  if (target === null) { plain(res, 400, 'bad request target\n'); return; }
  let file;
  try {
    file = resolve(target);
  } catch (e) {
    if (!(e instanceof URIError)) throw e;
    plain(res, 400, 'malformed %-escape in the path\n');
    return;
  }
  let st = null;
  try { st = file && fs.statSync(file); } catch { st = null; }
  if (!st || !st.isFile()) { plain(res, 404, 'not found\n'); return; }
  const type = TYPES[path.extname(file)] || 'application/octet-stream';
  // A precompressed sibling (FILE.gz, e.g. build/web/boot-snapshot.bin.gz) is sent instead, whole,
  // to a client that accepts gzip and asks for no range.
  const pre = PRECOMPRESSED.has(path.basename(file));
  let gzSt = null;
  if (pre && !req.headers.range && /\bgzip\b/.test(req.headers['accept-encoding'] || '')) {
    try { gzSt = fs.statSync(file + '.gz'); } catch { gzSt = null; }
    if (gzSt?.isFile()) { file += '.gz'; st = gzSt; } else gzSt = null;
  }
  const headers = {
    'content-type': type,
    ...(gzSt ? { 'content-encoding': 'gzip' } : {}),
    ...(pre ? { vary: 'accept-encoding' } : {}),
    'cache-control': 'no-cache',
    'last-modified': st.mtime.toUTCString(),
    'accept-ranges': 'bytes',
    'cross-origin-opener-policy': 'same-origin',
    'cross-origin-embedder-policy': 'credentialless',   // isolated, yet a no-cors probe of another origin works (CORS errors)
  };
  let start = 0, end = st.size - 1, status = 200;
  const range = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range || '');
  if (range && (range[1] !== '' || range[2] !== '')) {
    start = range[1] === '' ? Math.max(0, st.size - Number(range[2])) : Number(range[1]);
    end = range[1] === '' || range[2] === '' ? st.size - 1 : Math.min(Number(range[2]), st.size - 1);
    if (start > end || start >= st.size) { plain(res, 416, 'range not satisfiable\n', { 'content-range': `bytes */${st.size}` }); return; }
    status = 206;
    headers['content-range'] = `bytes ${start}-${end}/${st.size}`;
  }
  res.writeHead(status, { ...headers, 'content-length': st.size ? end - start + 1 : 0 });
  if (req.method === 'HEAD' || !st.size) { res.end(); return; }
  // a file removed or unreadable after the stat ends this response only
  fs.createReadStream(file, { start, end }).on('error', () => res.destroy()).pipe(res);
}

const server = http.createServer((req, res) => {
  try {
    serve(req, res);
  } catch (e) {                    // never let one request take the server down
    console.error(`bitweb: ${req.method} ${JSON.stringify(req.url)}: ${e?.stack || e}`);
    plain(res, 500, 'internal server error\n');
  }
});
// Requests Node's parser rejects (bad request line or headers, NUL bytes, headers over the
// size limit): answer and close that connection only.
server.on('clientError', (err, socket) => {
  if (!socket.writable || err.code === 'ECONNRESET') { socket.destroy(); return; }
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : '400 Bad Request';
  socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
});
// CONNECT (a proxy request) and Upgrade requests bypass the handler above: refuse them too.
const refuse = (req, socket) => socket.end('HTTP/1.1 405 Method Not Allowed\r\nallow: GET, HEAD\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
server.on('connect', refuse);
server.on('upgrade', refuse);
server.listen(PORT, HOST, () => {
  console.log(`bitweb: serving on http://${HOST}:${server.address().port}/  (Ctrl+C to stop)`);
});
