// Types of web/bitweb.mjs (the bitweb browser library).

export declare const DEFAULT_MODEL: string;

// The option values and setting names (tests/test_options.py checks them against OPTIONS).
export type Activations = 'a8' | 'f32' | 'q8';
export type KVCacheType = 'f16' | 'f32';
export type LMHead = 'q8_0';
export type SettingName = 'temperature' | 'top_k' | 'top_p' | 'min_p' | 'repetition_penalty' | 'seed' | 'max_tokens';
export type SamplerParameter = 'temperature' | 'top_k' | 'top_p' | 'min_p' | 'repeat_penalty' | 'repeat_last_n' | 'seed';
export type GPULimit = 'maxBufferSize' | 'maxStorageBufferBindingSize' | 'maxStorageBuffersPerShaderStage'
  | 'maxComputeWorkgroupStorageSize' | 'maxComputeInvocationsPerWorkgroup' | 'maxComputeWorkgroupSizeX'
  | 'maxComputeWorkgroupsPerDimension';
export type GPUFeature = 'shader-f16' | 'subgroups' | 'timestamp-query' | 'packed_4x8_integer_dot_product';
export type Replace = 'ask' | 'always';
/** speculative decoding a create() request may ask for (OPTIONS.speculative): 'lookup', drafts from the conversation;
 *  'draft', drafts by the engine's draft model (load(source, {draft})) */
export type SpeculativeMode = 'lookup' | 'draft';

export type ErrorKind =
  | 'no-webgpu' | 'limits' | 'format' | 'unsupported' | 'download' | 'cors' | 'storage' | 'device-lost'
  | 'out-of-memory' | 'no-room' | 'context' | 'settings' | 'aborted' | 'unloaded' | 'busy' | 'gpu' | 'internal';
export declare const ERROR_KINDS: readonly ErrorKind[];

export declare class BitwebError extends Error {
  kind: ErrorKind;
  /** settings errors: the option or field that is wrong ("temperature", "capLimits.maxBufferSize" ...) */
  field?: string;
  /** context errors: the prompt's tokens and the context size */
  prompt_tokens?: number;
  context?: number;
  /** format / unsupported errors: lines of advice from the engine (the architectures and weight formats bitweb runs) */
  advice?: string[];
  /** download errors: "sign-in" (HTTP 401 / 403), "gone" (404 / 410), "sha256" (not the expected file), "http" (another status); nothing of the URL is cached */
  reason?: 'sign-in' | 'gone' | 'sha256' | 'http';
  constructor(kind: ErrorKind, message: string, extra?: object);
}
/** One subclass per kind: `e instanceof bitweb.errors.context`. */
export declare const errors: { readonly [K in ErrorKind]: new (message: string, extra?: object) => BitwebError };

export type ProgressStage = 'boot' | 'download' | 'cache' | 'header' | 'upload' | 'compile';
export interface Progress {
  stage: ProgressStage;
  done: number;
  total: number;
  label?: string;
  /** download: speed and time left over this session's bytes (a resumed download counts from where it went on) */
  bytesPerSecond?: number;
  etaSeconds?: number;
  /** download: what happened ("resuming NAME at 12.0 MiB of 1133 MiB", a retry and its wait, a restart and why) */
  note?: string;
}

/** How downloads behave: a stall (no byte for stallMs) and a broken connection, HTTP 5xx / 408 / 429 are retried
 *  `retries` times, waiting retryDelayMs, then twice that, and so on (at most 30 s). Defaults 30000, 3, 1000. */
export interface DownloadOptions { stallMs?: number; retries?: number; retryDelayMs?: number }

export interface LoadOptions {
  onProgress?: (p: Progress) => void;
  /** 'a8': W1.58A8 as trained (default); 'f32': float activations */
  activations?: Activations;
  /** the KV cache's values: 'f16' (default: half the memory of 'f32'; attention computes in f32) or 'f32' */
  kvCache?: KVCacheType;
  /** positions of the KV cache (at least OPTIONS.context.min, 2; default: the model's, or the largest that fits the
   *  GPU's limits and a 1 GiB KV cache; info.contextNote says which) */
  context?: number | null;
  signal?: AbortSignal;
  /** 'ask' (default): fail with kind "no-room" when this model and the loaded ones do not fit
   *  together; 'always': unload the others first then */
  replace?: Replace;
  /** bytes of GPU memory the models may use (WebGPU does not tell; default: unknown) */
  gpuMemory?: number | null;
  /** behave like a GPU with at most these limits (testing) */
  capLimits?: Partial<Record<GPULimit, number>> | null;
  /** behave like a GPU without these features: the kernels take their fallbacks (testing; the
   *  app's ?cap=-subgroups, ?cap=mobile) */
  maskFeatures?: GPUFeature[] | null;
  /** keep the model in the browser cache once it has loaded (default true) */
  cache?: boolean;
  /** bytes the saved KV caches of conversations may take in the browser's storage (OPFS, web/kvstore.mjs:
   *  the least recently used go first; default 256 MiB; with cache: false nothing is saved or restored) */
  kvSaveBytes?: number | null;
  download?: DownloadOptions;
  /** run the engine once for every page of this origin, in a SharedWorker (web/shared.mjs): a page that loads
   *  the same source with the same options attaches to it (no download, no upload); where the browser has no
   *  SharedWorker (or no WebGPU in one) the page gets its own worker and info.sharedNote says why.
   *  Unset: the connection bitweb.connect() chose (a dedicated worker by default) */
  share?: boolean;
  /** a draft model for speculative decoding (create()'s speculative {mode: 'draft'}): any source of a model with
   *  the same vocabulary, loaded after this one as an engine of its own (engine.draft) on the same GPU device, with
   *  the same options and this one's context; a vocabulary that differs is a settings error naming `draft` */
  draft?: Source | null;
}

/** A URL (also `hf:owner/repo/file.gguf` and Hugging Face page addresses, see resolveUrl), with the file's SHA-256
 *  (verified as it downloads; default: the catalogue's for its URLs) and size (checked against the storage left
 *  before any byte); a File / Blob; a cached model; a catalogue entry. */
export type Source = string | URL | { url: string; sha256?: string; size?: number } | Blob | { cached: string } | CachedModel
  | CatalogueEntry;

/** A message of the conversation: an assistant's may carry tool calls (content then null), a tool's
 *  result names the call it answers. */
export type Message =
  | { role: 'system' | 'user'; content: string }
  | { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] }
  | { role: 'tool'; content: string; tool_call_id: string };

/** A call the model made: `arguments` is JSON text that parses and validates against the tool's parameters. */
export interface ToolCall { id: string; type: 'function'; function: { name: string; arguments: string } }
/** A function the model may call; `parameters` is a JSON Schema of an object (default: no parameters). */
export interface FunctionTool {
  type: 'function';
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean };
}
/** 'auto' (default with tools): a call or a reply in words; 'none': words; 'required': one call or more;
 *  a named function: one call of it. */
export type ToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };
/** 'json_object': any JSON object; 'json_schema': JSON that validates against `schema` (README, "Structured output"). */
export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: { name: string; schema?: Record<string, unknown> | boolean; strict?: boolean } };
/** A streamed piece of a tool call: the first has id, type and name (arguments ''), the next pieces of arguments. */
export interface ToolCallDelta { index: number; id?: string; type?: 'function'; function: { name?: string; arguments: string } }

export interface CreateRequest {
  messages: Message[];
  stream?: boolean;
  max_tokens?: number | null;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  repetition_penalty?: number;
  seed?: number;
  stop?: string | string[];
  signal?: AbortSignal;
  /** models whose chat template has a thinking switch (engine.info.thinking); a constrained reply
   *  (response_format, grammar, tools) needs it off */
  enable_thinking?: boolean;
  /** the reply is JSON (README, "Structured output and tool calls"); stop strings cannot go with it */
  response_format?: ResponseFormat;
  /** bitweb's own: the reply follows this GBNF grammar (llama.cpp's syntax) */
  grammar?: string;
  tools?: FunctionTool[];
  tool_choice?: ToolChoice;
  /** false: at most one call (default true) */
  parallel_tool_calls?: boolean;
  /** speculative decoding (README, "Using bitweb from your own page"): 'lookup' drafts the next tokens where
   *  the reply repeats the conversation, 'draft' has the engine's draft model draft them; the model checks
   *  several at a time; greedy replies are the same, token for token, sampled ones the same distribution.
   *  Default null: plain decoding */
  speculative?: { mode: SpeculativeMode } | null;
}

/** 'tool_calls': the reply is tool calls; 'length': max_tokens or the context cut it before it was complete */
export type FinishReason = 'stop' | 'length' | 'abort' | 'tool_calls';
export interface Usage {
  prompt_tokens: number; completion_tokens: number; total_tokens: number;
  /** the prompt tokens whose KV came from the engine's cache */
  prompt_tokens_details: { cached_tokens: number };
  /** a speculative request's drafting: tokens drafted and checked by the model, and how many of them it kept */
  speculative?: { mode: SpeculativeMode; drafted: number; accepted: number };
}
export interface Timing {
  total_ms: number; ttft_ms: number | null; prefill_ms: number; prefill_tokens: number; cached_tokens: number;
  prefill_tok_s?: number; decode_tok_s?: number; decode_ms_per_token: number; stop_reason: string;
  tokens_after_stop?: number;
  /** with saved conversations (web/kvstore.mjs): the prompt tokens restored from the browser's storage (counted in
   *  cached_tokens too) and the ms the lookup and the restore took (before ttft_ms starts); the save runs after the
   *  reply (stats().kvSave) */
  restored_tokens?: number; restore_ms?: number;
  /** how the prompt was read: 'prefill' (the multi-row kernels), 'decode' (token by token: one
   *  token, or the prefill kernels still compiling after the load) or 'decode+prefill' (token by
   *  token until the prefill kernels were compiled, the rest by the multi-row kernels) */
  prefill_plan: 'prefill' | 'decode' | 'decode+prefill';
}

export interface ChatCompletion {
  id: string; object: 'chat.completion'; created: number; model: string;
  choices: [{ index: 0; message: { role: 'assistant'; content: string | null; tool_calls?: ToolCall[] }; finish_reason: FinishReason }];
  usage: Usage; timing: Timing;
}

export interface ChatCompletionChunk {
  id: string; object: 'chat.completion.chunk'; created: number; model: string;
  choices: [{ index: 0; delta: { role?: 'assistant'; content?: string; tool_calls?: ToolCallDelta[] }; finish_reason: FinishReason | null }];
  /** on the last chunk */
  usage?: Usage; timing?: Timing;
}

export interface ChatCompletionStream extends AsyncIterableIterator<ChatCompletionChunk> {
  /** stop the reply (the stream then ends with finish_reason "abort") */
  abort(): void;
}

export interface EngineInfo {
  name: string; title: string; architecture: string; fileSize: number; headerBytes: number; tensorTypes: Record<string, number>;
  weights: string; vocabulary: number; context: number; contextMax: number; layers: number; width: number;
  /** why the default context is below contextMax (the KV cache budget or a GPU limit); '' otherwise */
  contextNote: string;
  heads: number; kvHeads: number; ffn: number; tied: boolean; activations: Activations;
  /** how the KV cache is stored: 'f16' (array<f16>, shader-f16), 'f16 pack2x16float' (f16 pairs in u32), 'f32' */
  kvCache: 'f16' | 'f16 pack2x16float' | 'f32';
  /** the chat template has a thinking switch (create()'s enable_thinking); thinkingDefault: on when unset */
  thinking: boolean; thinkingDefault: boolean;
  /** software: why the adapter is a CPU rasteriser ('SwiftShader', 'llvmpipe', 'fallback adapter' ...), null for a GPU;
   *  weaker: what maskFeatures / capLimits took away ('no subgroups, maxBufferSize <= 268435456'), null when nothing */
  adapter: { backend: string; description: string; info: Record<string, string>; features: string[]; caps: string;
    limits: Record<string, number>; software: string | null; weaker: string | null };
  features: string[];
  /** stages: [start, end] in this page's ms (performance.now()) of the load's stages that ran: boot (the wait
   *  for Python), download, cache, header, device, upload, compile (the decode kernels; the prefill kernels
   *  go on compiling after ready), plans, ready (the whole load); pipelines: kernels the model uses;
   *  boot: how the worker's Python started (from its boot snapshot or fresh; ms of its steps);
   *  prepared: kernels of this source's pipeline manifest started before Python was up (offered),
   *  the ones the load used (taken), when the manifest was read and the compiles started (ms from the
   *  load's start); null when there was no manifest. Stage `source`: finding the bytes (a download
   *  started, the cached copy found) */
  load: { ms: number; header_read: number; wasm_before: number; wasm_after: number; n_ctx: number;
    kv_cache: string; kv_cache_bytes: number; gpu_bytes?: number; weight_bytes?: number; estimate_bytes: number;
    pipelines: number; stages: Record<string, [number, number]>; boot: BootInfo;
    /** a fresh download: the bytes it resumed from, its retries, its notes, the SHA-256 it was verified against */
    download?: { resumedFrom: number; retries: number; notes: string[]; sha256: string | null };
    /** a catalogue model: where its header differs from the catalogue (it loaded by its header; logged) */
    catalogueDiff: { fact: string; catalogue: string | number | boolean; header: string | number | boolean }[];
    prepared: { offered: number; taken: number; askedMs: number; startedMs: number | null } | null };
  cacheError: string | null;
  /** the engine runs in the shared worker (share: true); sharedBy: the pages using it now (1 for a page's own);
   *  sharedNote: why a page that asked to share has its own engine ('' otherwise) */
  shared: boolean; readonly sharedBy: number; sharedNote: string;
}

export declare class Engine {
  readonly id: number;
  readonly info: EngineInfo;
  readonly state: 'ready' | 'unloaded' | 'lost';
  /** resolves with a message when the GPU device is lost */
  readonly lost: Promise<string>;
  /** the draft model loaded with it (load(source, {draft})): its own engine, unloaded with this one; else null */
  readonly draft: Engine | null;
  readonly chat: {
    completions: {
      create(request: CreateRequest & { stream: true }): Promise<ChatCompletionStream>;
      create(request: CreateRequest & { stream?: false }): Promise<ChatCompletion>;
    };
  };
  tokenize(input: string | Message[], options?: { enable_thinking?: boolean; tools?: FunctionTool[] }): Promise<number[]>;
  unload(): Promise<void>;
}

export declare function load(source?: Source, options?: LoadOptions): Promise<Engine>;

export interface CachedModel { name: string; size: number; source: string; saved: number }
/** A download not in the cache list yet: stopped, broken off, or complete but not loaded yet (complete). */
export interface PartialDownload { name: string; source: string; have: number; size: number | null; complete: boolean }
export declare const cache: {
  list(): Promise<CachedModel[]>;
  downloads(): Promise<PartialDownload[]>;
  /** download into the cache without loading (resuming a part); it enters list() once it has loaded */
  download(source: string | URL | { url: string; sha256?: string; size?: number },
    options?: { onProgress?: (p: Progress) => void; signal?: AbortSignal; download?: DownloadOptions }):
    Promise<{ name: string; size: number; cached: boolean; resumedFrom?: number; retries?: number; notes?: string[]; sha256?: string | null }>;
  estimate(): Promise<{ usage: number | null; quota: number | null; persisted: boolean | null }>;
  delete(name: string): Promise<boolean>;
  /** the saved KV caches of conversations (OPFS; load option kvSaveBytes bounds them), once the saves after replies are done */
  conversations(): Promise<{ bytes: number; entries: number; bound: number }>;
  clearConversations(): Promise<void>;
  persist(): Promise<boolean>;
};

/** [integer?, lowest, highest, lowest excluded?] per sampling setting (from OPTIONS.request) */
export declare const SETTINGS: Readonly<Record<SettingName, readonly [boolean, number, number, boolean]>>;

/** a parameter's type and range: min <= value <= max (min < value when min_excluded); absent: no bound */
export interface OptionRange { readonly integer: boolean; readonly min?: number; readonly max?: number; readonly min_excluded?: boolean }
/** a choice's values (value -> label, as the app shows it) and its default */
export interface OptionChoices<T extends string, D = T> { readonly default: D; readonly choices: Readonly<Record<T, string>> }
/** the option lists and bounds bitweb shares with its Python side (pyapp/bitweb/options.py) */
export declare const OPTIONS: {
  readonly activations: OptionChoices<Activations>;
  readonly kv_cache: OptionChoices<KVCacheType>;
  /** the native engine's LM-head re-quantization (the CLI's --lm-head) */
  readonly lm_head: OptionChoices<LMHead, null>;
  readonly context: { readonly min: number };
  /** the sampler's defaults and the values its maths takes */
  readonly sampler: Readonly<Record<SamplerParameter, OptionRange & { readonly default: number }>>;
  /** what a create() request may ask, and the sampler parameter each sets (null: max_tokens) */
  readonly request: Readonly<Record<SettingName, OptionRange & { readonly min: number; readonly max: number;
    readonly sampler: SamplerParameter | null }>>;
  /** words in an adapter's names that mark a CPU rasteriser -> the name said (info.adapter.software) */
  readonly software_adapters: Readonly<Record<string, string>>;
  /** the GPU features maskFeatures may turn off, the limits capLimits may lower */
  readonly features: readonly GPUFeature[];
  readonly limits: readonly GPULimit[];
  readonly replace: OptionChoices<Replace>;
  /** the modes of create()'s speculative (default null: plain decoding) */
  readonly speculative: OptionChoices<SpeculativeMode, null>;
  /** the ranges of DownloadOptions */
  readonly download: Readonly<Record<keyof DownloadOptions, { readonly integer: true; readonly min: number; readonly max: number }>>;
  /** the load options that reach the worker: the name its Python side takes (null: the worker's JS alone), what
   *  it is, whether it changes the kernels a load compiles (key) */
  readonly load: Readonly<Record<LoadOptionName, { readonly python: string | null; readonly type: string; readonly of?: string;
    readonly min?: number; readonly default?: unknown; readonly key?: boolean }>>;
};
/** the load options the worker takes (OPTIONS.load; LoadOptions adds onProgress and signal) */
export type LoadOptionName = 'activations' | 'kvCache' | 'context' | 'capLimits' | 'maskFeatures' | 'gpuMemory' | 'replace'
  | 'cache' | 'kvSaveBytes' | 'download' | 'draft';
/** the GPU limits and features bitweb uses (OPTIONS.limits, OPTIONS.features) */
export declare const LIMITS: readonly GPULimit[];
export declare const FEATURES: readonly GPUFeature[];
/** why `value` is not a valid value of setting `name`, or null */
export declare function checkSetting(name: keyof typeof SETTINGS, value: unknown): string | null;

/** how the worker's Python started: from the boot snapshot kept by an earlier visit, or fresh (then
 *  snapshotSaved: bytes of the snapshot it stored after its first load, 0 when none); ms: its steps
 *  (zip, snapshot-read, pyodide, unpack, import); snapshotError: why no snapshot was used or made */
export interface BootInfo { from: 'snapshot' | 'fresh'; ms: Record<string, number>; snapshotSaved?: number; snapshotError?: string }

/** diagnostics of the worker: wasm heap, live GPU buffers (when the GPU layer counts them), engines, boot */
export declare function stats(): Promise<{ wasm_bytes: number; engines: number; live_buffers?: number; live_bytes?: number;
  boot: BootInfo | null;
  /** the last KV cache save after a reply (it runs after the reply went): the file saved (null: none), its time */
  kvSave: { saved: string | null; ms: number } | null;
  /** a shared engine's host (web/shared.mjs): this page's number, the pages connected, the pages using each engine,
   *  the generations queued and running ([page, request id]), the last ones started in order, debug.hold's state */
  shared?: { page: number; pages: number; engines: Record<number, number>; queued: [number, number][];
    running: [number, number] | null; served: [number, number][]; hold: boolean } }>;

/** Which worker this page's calls use: its own (default) or, with share: true, the origin's shared engine (a
 *  SharedWorker) where the browser has one with WebGPU; note: why a page that asked to share has its own;
 *  group: pages share an engine only with pages of the same group (the app: its version) */
export declare function connect(options?: { share?: boolean; group?: string }): Promise<{ shared: boolean; note: string; pages: number }>;

/** performance.now() when the worker last said anything (null: not started); while a request runs it
 *  says something every 5 s at least, so a long silence means its thread is stuck, not busy */
export declare function lastHeard(): number | null;

export declare const debug: { loseDevice(): Promise<void>;
  /** a shared engine: hold (true) or go on starting (false) the queued generations of every page */
  hold(on: boolean): Promise<void> };

/** One model of the catalogue (web/catalogue.json; README "Models to download"). */
export interface CatalogueEntry {
  id: string; name: string; family: string; architecture: string;
  /** GGUF types: block linears, token_embd, an untied output.weight (null: tied) */
  weights: string; table: string; output: string | null;
  context: number; fileSize: number; sizeExact: boolean; sha256: string | null; license: string;
  /** Hugging Face repository, the commit pinned (null: none published; sources.revision says why) and file;
   *  url: its resolve/<revision> address (resolve/main without a revision) */
  repo: string; revision: string | null; file: string; url: string;
  /** true, or why this bitweb does not run it yet */
  runs: true | string;
  shape: { n_layer: number; n_embd: number; n_head: number; n_head_kv: number; head_dim: number; n_ff: number; n_vocab: number;
    pre_tokenizer: string | null };
  /** per fact: how many independent public sources agree on it (0: none published) and where they are */
  sources: Record<'size' | 'sha256' | 'revision' | 'shape', { agree: number; from: string }>; unconfirmed: string | null;
  gpu: { weightBytes: number; largestBuffer: number; largestBufferName: string; tables: { name: string; rows: number; rowBytes: number }[];
    kvBytesPerPosition: number; storageBuffersPerStage: number; defaultContext: number; memoryAtDefaultContext: number };
}
export declare const models: readonly CatalogueEntry[];
/** 'fits' (context: its default), 'smaller' (fits with a smaller context), 'no' (limit: the one that does not let it fit,
 *  short: by how many bytes); text says it in words. */
export interface FitVerdict { verdict: 'fits' | 'smaller' | 'no'; text: string; context?: number; memory?: number; limit?: string; short?: number;
  /** (checkFit) the model is cached whole: load() then leaves the verdict to its header */
  cached?: boolean }
export interface FitEnvironment {
  limits?: Partial<Record<'maxBufferSize' | 'maxStorageBufferBindingSize' | 'maxStorageBuffersPerShaderStage', number>>;
  gpuMemory?: number | null; storage?: { usage: number | null; quota: number | null }; have?: number; cached?: boolean;
}
/** The verdict for given limits (no GPU, no network). */
export declare function fit(entry: CatalogueEntry, env?: FitEnvironment): FitVerdict;
/** The verdict here: this browser's adapter limits (capLimits applied), gpuMemory, the storage left, the cache. */
export declare function checkFit(entry: CatalogueEntry, options?: { capLimits?: LoadOptions['capLimits']; gpuMemory?: number | null }): Promise<FitVerdict>;
/** `hf:owner/repo[@rev]/file.gguf` and huggingface.co/.../blob/REV/... addresses as the file's resolve URL; others as given. */
export declare function resolveUrl(text: string, base?: string): string;

// ---------------------------------------------------------------- the worker protocol (web/protocol.mjs)
// What web/bitweb.mjs and web/worker.mjs exchange (tests/test_protocol.py checks these against the table).

/** page -> worker: each request's fields, besides id and op */
export interface WorkerRequests {
  load: { source: { url: string; sha256?: string; size?: number } | { file: Blob; name?: string } | { cached: string };
    options: { [K in LoadOptionName]: LoadOptions[K] | null }; files?: MessagePort };
  download: { source: { url: string; sha256?: string; size?: number; name?: string }; options: { download: DownloadOptions | null } };
  'cache-add': { source: { url: string; sha256?: string; size?: number; name?: string } | { file: Blob; name?: string }; options: { download: DownloadOptions | null } };
  'file-port': { port: MessagePort };
  boot: {};
  connect: { lock: string };
  'debug-hold': { hold: boolean };
  generate: { engine: number; request: CreateRequest };
  'set-draft': { engine: number; draft: number };
  tokenize: { engine: number; request: { text: string } | { messages: Message[]; tools?: FunctionTool[]; enable_thinking?: boolean } };
  abort: { target: number };
  unload: { engine: number };
  'cache-list': {};
  'cache-delete': { name: string };
  stats: {};
  'kv-settled': {};
  'debug-lose-device': {};
}
export type WorkerRequest = { [Op in keyof WorkerRequests]: { id: number; op: Op } & WorkerRequests[Op] }[keyof WorkerRequests];

/** worker -> page: each message's fields, besides type */
export interface WorkerMessages {
  result: { id: number; value: unknown };
  error: { id: number; error: { kind: ErrorKind; message: string; field?: string; advice?: string[] } };
  progress: { id: number; stage: ProgressStage; done: number; total: number; label?: string; bytesPerSecond?: number;
    etaSeconds?: number; note?: string };
  text: { id: number; text: string };
  tool_call: { id: number; index: number; call_id?: string; name?: string; arguments?: string };
  'device-lost': { id: null; engines: number[]; message: string };
  shared: { id: null; pages: number; engines: { [engine: number]: number } };
  alive: {};
}
export type WorkerMessage = { [T in keyof WorkerMessages]: { type: T } & WorkerMessages[T] }[keyof WorkerMessages];
