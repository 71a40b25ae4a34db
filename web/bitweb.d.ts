// Types of web/bitweb.mjs (the bitweb browser library).

export declare const DEFAULT_MODEL: string;

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
  /** format / unsupported errors: lines of advice from the engine (the weight formats bitweb runs) */
  advice?: string[];
  constructor(kind: ErrorKind, message: string, extra?: object);
}
/** One subclass per kind: `e instanceof bitweb.errors.context`. */
export declare const errors: { readonly [K in ErrorKind]: new (message: string, extra?: object) => BitwebError };

export interface Progress {
  stage: 'boot' | 'download' | 'cache' | 'header' | 'upload' | 'compile';
  done: number;
  total: number;
  label?: string;
  bytesPerSecond?: number;
  etaSeconds?: number;
}

export interface LoadOptions {
  onProgress?: (p: Progress) => void;
  /** 'a8': W1.58A8 as trained (default); 'f32': float activations */
  activations?: 'a8' | 'f32';
  /** the KV cache's values: 'f16' (default: half the memory of 'f32'; attention computes in f32) or 'f32' */
  kvCache?: 'f16' | 'f32';
  /** positions of the KV cache (at least 2; default: the model's, or the largest that fits the
   *  GPU's limits and a 1 GiB KV cache; info.contextNote says which) */
  context?: number | null;
  signal?: AbortSignal;
  /** 'ask' (default): fail with kind "no-room" when this model and the loaded ones do not fit
   *  together; 'always': unload the others first then */
  replace?: 'ask' | 'always';
  /** bytes of GPU memory the models may use (WebGPU does not tell; default: unknown) */
  gpuMemory?: number | null;
  /** behave like a GPU with at most these limits (testing) */
  capLimits?: Partial<Record<'maxBufferSize' | 'maxStorageBufferBindingSize' | 'maxStorageBuffersPerShaderStage'
    | 'maxComputeWorkgroupStorageSize' | 'maxComputeInvocationsPerWorkgroup' | 'maxComputeWorkgroupSizeX'
    | 'maxComputeWorkgroupsPerDimension', number>> | null;
  /** behave like a GPU without these features: the kernels take their fallbacks (testing; the
   *  app's ?cap=-subgroups, ?cap=mobile) */
  maskFeatures?: Array<'shader-f16' | 'subgroups' | 'timestamp-query' | 'packed_4x8_integer_dot_product'> | null;
  /** keep the model in the browser cache once it has loaded (default true) */
  cache?: boolean;
}

export type Source = string | URL | Blob | { cached: string } | CachedModel;

export interface Message { role: 'system' | 'user' | 'assistant'; content: string }

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
  /** models whose chat template has a thinking switch (engine.info.thinking) */
  enable_thinking?: boolean;
}

export type FinishReason = 'stop' | 'length' | 'abort';
export interface Usage { prompt_tokens: number; completion_tokens: number; total_tokens: number }
export interface Timing {
  total_ms: number; ttft_ms: number | null; prefill_ms: number; prefill_tokens: number; cached_tokens: number;
  prefill_tok_s?: number; decode_tok_s?: number; decode_ms_per_token: number; stop_reason: string;
  tokens_after_stop?: number;
  /** how the prompt was read: 'prefill' (the multi-row kernels) or 'decode' (token by token: one
   *  token, or the prefill kernels still compiling after the load) */
  prefill_plan: 'prefill' | 'decode';
}

export interface ChatCompletion {
  id: string; object: 'chat.completion'; created: number; model: string;
  choices: [{ index: 0; message: { role: 'assistant'; content: string }; finish_reason: FinishReason }];
  usage: Usage; timing: Timing;
}

export interface ChatCompletionChunk {
  id: string; object: 'chat.completion.chunk'; created: number; model: string;
  choices: [{ index: 0; delta: { role?: 'assistant'; content?: string }; finish_reason: FinishReason | null }];
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
  heads: number; kvHeads: number; ffn: number; tied: boolean; activations: 'a8' | 'f32';
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
    prepared: { offered: number; taken: number; askedMs: number; startedMs: number | null } | null };
  cacheError: string | null;
}

export declare class Engine {
  readonly id: number;
  readonly info: EngineInfo;
  readonly state: 'ready' | 'unloaded' | 'lost';
  /** resolves with a message when the GPU device is lost */
  readonly lost: Promise<string>;
  readonly chat: {
    completions: {
      create(request: CreateRequest & { stream: true }): Promise<ChatCompletionStream>;
      create(request: CreateRequest & { stream?: false }): Promise<ChatCompletion>;
    };
  };
  tokenize(input: string | Message[], options?: { enable_thinking?: boolean }): Promise<number[]>;
  unload(): Promise<void>;
}

export declare function load(source?: Source, options?: LoadOptions): Promise<Engine>;

export interface CachedModel { name: string; size: number; source: string; saved: number }
export declare const cache: {
  list(): Promise<CachedModel[]>;
  estimate(): Promise<{ usage: number | null; quota: number | null; persisted: boolean | null }>;
  delete(name: string): Promise<boolean>;
  persist(): Promise<boolean>;
};

/** [integer?, lowest, highest, lowest excluded?] per sampling setting */
export declare const SETTINGS: Readonly<Record<'temperature' | 'top_k' | 'top_p' | 'min_p' | 'repetition_penalty' | 'seed' | 'max_tokens',
  readonly [boolean, number, number, boolean]>>;
/** why `value` is not a valid value of setting `name`, or null */
export declare function checkSetting(name: keyof typeof SETTINGS, value: unknown): string | null;

/** how the worker's Python started: from the boot snapshot kept by an earlier visit, or fresh (then
 *  snapshotSaved: bytes of the snapshot it stored after its first load, 0 when none); ms: its steps
 *  (zip, snapshot-read, pyodide, unpack, import); snapshotError: why no snapshot was used or made */
export interface BootInfo { from: 'snapshot' | 'fresh'; ms: Record<string, number>; snapshotSaved?: number; snapshotError?: string }

/** diagnostics of the worker: wasm heap, live GPU buffers (when the GPU layer counts them), engines, boot */
export declare function stats(): Promise<{ wasm_bytes: number; engines: number; live_buffers?: number; live_bytes?: number;
  boot: BootInfo | null }>;

export declare const debug: { loseDevice(): Promise<void> };
