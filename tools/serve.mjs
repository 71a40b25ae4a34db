// Static server for the app: http://127.0.0.1:PORT (default 8080; PORT or --port to change).
// Serves only files from the repo (web/, node_modules/pyodide/ and markdown-it's browser build, build/web/,
// shaders/), no network.
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
  ['/build/web/', 'build/web/'],
  ['/shaders/', 'shaders/'],
  ['/', 'web/'],
];
const TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.mjs': 'text/javascript',
  '.css': 'text/css', '.json': 'application/json', '.wasm': 'application/wasm',
  '.zip': 'application/zip', '.wgsl': 'text/plain; charset=utf-8', '.png': 'image/png',
  '.svg': 'image/svg+xml', '.gguf': 'application/octet-stream', '.map': 'application/json',
  '.txt': 'text/plain; charset=utf-8', '.whl': 'application/zip',
};

export function resolve(urlPath) {
  let p = decodeURIComponent(urlPath.split('?')[0]);
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

function serve(req, res) {
  const file = resolve(req.url);
  let st = null;
  try { st = file && fs.statSync(file); } catch { st = null; }
  if (!st || !st.isFile()) { res.writeHead(404, { 'content-type': 'text/plain' }); res.end('not found'); return; }
  const headers = {
    'content-type': TYPES[path.extname(file)] || 'application/octet-stream',
    'cache-control': 'no-cache',
    'last-modified': st.mtime.toUTCString(),
    'accept-ranges': 'bytes',
    'cross-origin-opener-policy': 'same-origin',
    'cross-origin-embedder-policy': 'credentialless',   // isolated, yet a no-cors probe of another origin works (CORS errors)
  };
  const range = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range || '');
  if (range) {
    const start = range[1] === '' ? Math.max(0, st.size - Number(range[2])) : Number(range[1]);
    const end = range[1] === '' || range[2] === '' ? st.size - 1 : Math.min(Number(range[2]), st.size - 1);
    if (start > end || start >= st.size) { res.writeHead(416, { 'content-range': `bytes */${st.size}` }); res.end(); return; }
    res.writeHead(206, { ...headers, 'content-length': end - start + 1, 'content-range': `bytes ${start}-${end}/${st.size}` });
    if (req.method === 'HEAD') { res.end(); return; }
    fs.createReadStream(file, { start, end }).pipe(res);
    return;
  }
  res.writeHead(200, { ...headers, 'content-length': st.size });
  if (req.method === 'HEAD') { res.end(); return; }
  fs.createReadStream(file).pipe(res);
}

const server = http.createServer(serve);
server.listen(PORT, HOST, () => {
  console.log(`bitweb: serving on http://${HOST}:${server.address().port}/  (Ctrl+C to stop)`);
});
