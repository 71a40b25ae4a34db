// The library's worker protocol, defined once: web/connection.mjs (the page's side) and web/worker.mjs
// import this table and check the messages they exchange against it; web/bitweb.d.ts spells it as
// types (WorkerRequests, WorkerMessages), which tests/test_protocol.py checks against it, with the
// messages the worker's Python side (pyapp/bitweb/webapp.py) posts.
//
// postMessage, plain objects. Every request carries an `id` chosen by the page; every request ends
// in exactly one {id, type: 'result', value} or {id, type: 'error', error}. A field name ending in
// '?' may be absent.

/** page -> worker: op -> its fields (besides id and op), each with what it holds. */
export const REQUESTS = Object.freeze({
  // a new engine; the engines already loaded stay (webapp.py). source: {url, sha256?, size?}
  // (downloaded into a pending cache copy, or the cached copy when current / offline; a download
  // resumes the part an earlier one left, is verified against sha256 when given, and is one download
  // across tabs: models.mjs) | {file: Blob, name?} (a local file, copied into the cache after) |
  // {cached: name}. options: the load options by the library's names (OPTIONS.load, checked by
  // bitweb.mjs and again by the worker's Python: bitweb.options check_load).
  // -> result {engine, info, adapter, load, name, cacheError?, sharedBy?}; a shared engine (web/shared.mjs)
  // answers {needsCache: true} for a URL it cannot read from the cache (the page then sends cache-add to
  // its download worker, and load again), and attaches a page to an engine of the same source and
  // options that another page loaded (load.attached: true; nothing downloaded or uploaded).
  // files: a shared engine's load, a MessagePort to the page's download worker (file-port), which
  // reads the cached copy for it (a shared worker has no sync access handles: models.mjs open)
  load: { source: 'the model: {url, sha256?, size?} | {file, name?} | {cached}', options: 'load options (OPTIONS.load)',
    'files?': 'a MessagePort to a file-port' },
  // into the cache without loading -> result {name, size, cached, resumedFrom, retries, notes, sha256}
  download: { source: '{url, sha256?, size?, name?}', options: '{download}' },
  // a download committed into the cache without loading it, or a local file the shared engine loaded
  // copied there -> result {name, cached, resumedFrom?, ...}
  'cache-add': { source: '{url, sha256?, size?, name?} | {file, name?}', options: '{download}' },
  // the download worker reads cached model files into the buffers a shared engine sends on `port`
  // (models.mjs serveReads), until it says close -> result null
  'file-port': { port: 'a MessagePort (transferred)' },
  // Python booted (or booting): boot progress while it boots -> result {from, ms, ...} (how it booted)
  boot: {},
  // the first request of a page to a shared engine: the Web Lock it holds while it lives (released when
  // it closes or crashes: its requests are then dropped) -> result {shared, pages, gpu}
  connect: { lock: 'a Web Lock name held by the page' },
  // test hook of a shared engine: hold (true) or resume (false) starting queued generations -> result null
  'debug-hold': { hold: 'true or false' },
  // request: the create() body (messages, settings, stop, response_format, grammar, tools,
  // tool_choice, parallel_tool_calls, enable_thinking, speculative) -> text and tool_call messages,
  // then result {text, tool_calls?, finish_reason, context, usage (usage.speculative {mode, drafted,
  // accepted} when it asked for drafting), timing}
  generate: { engine: 'engine id', request: 'the checked create() body' },
  // engine `draft` (loaded by the same page, on the same device, with the same vocabulary) drafts for
  // `engine` (create()'s speculative {mode: 'draft'}; load(source, {draft})) -> result null
  'set-draft': { engine: 'engine id', draft: 'engine id of its draft model' },
  // request: {text} | {messages, tools?, enable_thinking?} -> result {ids, context}
  tokenize: { engine: 'engine id', request: '{text} or {messages, tools?}' },
  // abort request `target` (a download, a load, a generation); answered at once (result null)
  abort: { target: 'the request id to abort' },
  // free an engine's GPU buffers -> result {unloaded}
  unload: { engine: 'engine id' },
  // -> result {models: [{name, size, source, saved}], downloads: [{name, source, have, size, complete}],
  //    usage, quota, persisted}
  'cache-list': {},
  'cache-delete': { name: 'a cached model' },       // -> result {removed, ...cache-list}
  stats: {},                                         // -> result {wasm_bytes, live_buffers, live_bytes, engines, boot, kvSave, shared?}
  'kv-settled': {},                                  // once the KV cache saves queued after replies are done -> result the last {saved, ms}
  'debug-lose-device': {},                           // test hook: destroy the GPU device -> result null
});

/** worker -> page: type -> its fields (besides type). */
export const MESSAGES = Object.freeze({
  result: { id: 'request id', value: 'the result' },
  // error: {kind, message, field?, advice?, ...}: kinds README "Errors" (bitweb.errors + models.mjs);
  // advice: lines the page adds to its own (format / unsupported: the architectures and weight formats)
  error: { id: 'request id', error: '{kind, message, ...}' },
  progress: { id: 'request id', stage: 'one of STAGES', done: 'count', total: 'count', 'label?': 'words',
    'bytesPerSecond?': 'download speed', 'etaSeconds?': 'time left', 'note?': 'what happened' },
  text: { id: 'request id', text: 'decoded content (never text of a stop string)' },
  // a tool call's start {index, call_id, name}, then pieces of its arguments {index, arguments}
  tool_call: { id: 'request id', index: 'the call', 'call_id?': 'its id', 'name?': 'the function', 'arguments?': 'JSON text' },
  // every engine on the device is gone
  'device-lost': { id: 'null', engines: '[engine ids]', message: 'why' },
  // a shared engine's pages: how many are connected, and how many use each engine (engine.info.sharedBy)
  shared: { id: 'null', pages: 'pages connected', engines: '{engine id: pages using it}' },
  // every HEARTBEAT_MS while a request runs: the worker's thread is not stuck (bitweb.mjs lastHeard)
  alive: {},
});

/** progress stages, in the order a load goes through them. */
export const STAGES = Object.freeze(['boot', 'download', 'cache', 'header', 'upload', 'compile']);

const names = (fields) => Object.keys(fields).map((k) => k.replace(/\?$/, ''));
const required = (fields) => Object.keys(fields).filter((k) => !k.endsWith('?'));

/** Why `msg` is not a request of the table (its op unknown, a field missing or unknown), or null. */
export function requestProblem(msg) {
  const fields = Object.hasOwn(REQUESTS, msg?.op) ? REQUESTS[msg.op] : null;
  if (!fields) return `unknown request ${JSON.stringify(msg?.op)}`;
  const missing = required(fields).filter((k) => !(k in msg));
  const extra = Object.keys(msg).filter((k) => k !== 'id' && k !== 'op' && !names(fields).includes(k));
  if (missing.length || extra.length) {
    return `request ${msg.op}: ` + [missing.length ? `missing ${missing.join(', ')}` : '', extra.length ? `unknown ${extra.join(', ')}` : '']
      .filter(Boolean).join('; ');
  }
  return null;
}

/** Why `msg` is not a worker message of the table, or null. */
export function messageProblem(msg) {
  const fields = Object.hasOwn(MESSAGES, msg?.type) ? MESSAGES[msg.type] : null;
  if (!fields) return `unknown worker message ${JSON.stringify(msg?.type)}`;
  const missing = required(fields).filter((k) => !(k in msg));
  const extra = Object.keys(msg).filter((k) => k !== 'type' && !names(fields).includes(k));
  return missing.length || extra.length ? `worker message ${msg.type}: missing [${missing}], unknown [${extra}]` : null;
}
