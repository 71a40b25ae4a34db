"""The Python side of the library's worker (web/worker.mjs): engines driven by bitweb.engine in Pyodide.

Stdlib (+ Pyodide's `js` / `pyodide.ffi`) only. The worker calls the coroutines of `WebApp` with
JS objects (a Blob/File for the model) and JSON strings; each returns a JSON string, either the
result or {"error": {"kind", "message", ...}} (see `classify`); progress and streamed text go
out through `post(json)` tagged with the request id. The protocol is written at the top of
web/worker.mjs.

Several engines can live on the one GPU device at a time. A load never touches the engines that
are already there: the new model's header is parsed, checked against the device limits and
uploaded into new buffers while the others keep answering; the caller (web/bitweb.mjs, the app)
drops the old engine once the new one is ready. When the GPU memory would not hold both (the
estimate against a `gpu_memory` budget the caller gives, or an out-of-memory error while
uploading), the load fails with kind "no-room" and frees what it made, unless `replace` is
"always": then the other engines are unloaded first and the load is tried once more.

Loading a model, and where its bytes go:

    blob (File / OPFS File)                       JS memory        wasm heap
      header:  blob.slice(0, n) -> PrefixSource    n bytes          n bytes (n ~ header, doubled
               -> gguf.read_gguf; NeedMoreBytes(m)                    until the header parses;
               -> retry with max(m, 2n)                               at most gguf.MAX_HEADER_BYTES)
      weights: engine -> dev.upload(buf, off, blob, ...)             0: web/gpu.mjs uploadBlob reads
               -> uploadBlob: blob.slice(chunk) -> BYOB reader        one chunk at a time from the
               -> queue.writeBuffer                                   Blob and hands it to WebGPU
      small host reads (norms, scales) the engine may ask gguf_file.source for go through
      BlobSource: FileReaderSync over blob.slice (only the bytes asked for).
"""
from __future__ import annotations

import asyncio
import json
import math
import time

from bitweb import formats, gguf
from bitweb.gpu import DeviceLostError, GPUError, LimitsError, NoAdapterError
from bitweb.options import MIN_CONTEXT, REQUEST, SAMPLER

try:                                    # Pyodide; the module still imports in CPython (tests)
    import js
    from pyodide.ffi import create_once_callable, jsnull
except ImportError:                     # CPython (tests of the plain parts)
    js = jsnull = None

HEADER_FIRST = 256 << 10                # first header read; doubled until the header parses

# Sampling settings a request may carry: name -> (integer?, lowest, highest, lowest excluded?, default)
# (bitweb.options REQUEST; the default is the sampler's, max_tokens none: what the context holds)
SETTINGS = {name: (b.integer, b.lo, b.hi, b.lo_open, SAMPLER[b.sampler].default if b.sampler else None)
            for name, b in REQUEST.items()}
MAX_STOPS = 4                           # stop strings per request (as OpenAI's API)
THINK_OPEN = "<think>\n"


class OutOfMemory(GPUError):
    """A GPU allocation failed (WebGPU out-of-memory error scope), or the model cannot fit."""


class AppError(Exception):
    """An error with a kind chosen here; `extra` (plain values) goes to the page with it."""

    def __init__(self, kind: str, message: str, **extra):
        super().__init__(message)
        self.kind = kind
        self.extra = extra


class Aborted(Exception):
    """The caller aborted this request (its AbortSignal)."""


def classify(e: BaseException) -> tuple[str, str]:
    """(kind, message) for the page. Kinds: no-webgpu, limits, format, unsupported, context,
    device-lost, out-of-memory, no-room, settings, aborted, unloaded, gpu, internal."""
    name = type(e).__name__
    msg = str(e) or name
    if isinstance(e, AppError):
        return e.kind, msg
    if isinstance(e, Aborted):
        return "aborted", msg or "aborted"
    if isinstance(e, NoAdapterError):
        return "no-webgpu", msg
    if isinstance(e, LimitsError):
        return "limits", msg
    if isinstance(e, DeviceLostError):
        return "device-lost", msg
    if isinstance(e, OutOfMemory):
        return "out-of-memory", msg
    if isinstance(e, gguf.GGUFError):
        return "format", msg
    if name in ("ModelError", "TokenizerError", "EngineError", "TemplateError"):
        return "unsupported", msg
    if name == "ContextError":
        return "context", msg
    if name in ("SamplingError", "ChatError"):
        return "settings", msg
    if isinstance(e, MemoryError):
        return "out-of-memory", "out of memory in the Python heap: " + msg
    if isinstance(e, GPUError):
        return "gpu", msg
    return "internal", f"{name}: {msg}"


def error_json(e: BaseException) -> str:
    kind, msg = classify(e)
    if kind == "internal":
        import traceback
        print(traceback.format_exc())
    err = {"kind": kind, "message": msg}
    if advice(kind):
        err["advice"] = advice(kind)
    err.update(getattr(e, "extra", None) or {})
    return json.dumps({"error": err})


def advice(kind: str) -> list:
    """Lines the page adds to its own advice for an error kind: the architectures (bitweb.model.ARCHS)
    and the weight formats (bitweb.formats) for a file it cannot read or run."""
    if kind not in ("format", "unsupported"):
        return []
    from bitweb.model import ARCHS
    return [f"Architectures bitweb runs (general.architecture): {', '.join(ARCHS)}.",
            f"Weight formats bitweb runs: block linears {', '.join(f.name for f in formats.select('linear'))}; "
            f"token embedding and LM head {', '.join(f.name for f in formats.select('table'))}."]


def checked_setting(name: str, value):
    """`value` as the setting's type, or AppError("settings") naming the field and the range."""
    integer, lo, hi, lo_open, _ = SETTINGS[name]
    want = (f"an integer from {lo} to {hi}" if integer else
            f"a number {'above' if lo_open else 'from'} {lo}{' and at most' if lo_open else ' to'} {hi}")
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and (value > lo if lo_open else value >= lo) and value <= hi
          and (not integer or value == int(value)))
    if not ok:
        raise AppError("settings", f"{name} = {value!r}: must be {want}", field=name)
    return int(value) if integer else float(value)


def params_from(req: dict):
    """SamplingParams, max_tokens (None: as many as the context holds) and the stop strings of a
    create() request. Every value is checked (type and range); an unknown name is an error too."""
    from bitweb.sampling import SamplingParams
    vals = {}
    for name in SETTINGS:
        if req.get(name) is not None:
            vals[name] = checked_setting(name, req[name])
    stop = req.get("stop")
    if stop is None:
        stops = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise AppError("settings", f"stop = {stop!r}: must be a string or a list of strings", field="stop")
    if len(stops) > MAX_STOPS or any(not s for s in stops):
        raise AppError("settings", f"stop: at most {MAX_STOPS} non-empty strings", field="stop")
    kw = {REQUEST[k].sampler: v for k, v in vals.items() if REQUEST[k].sampler}
    return SamplingParams(**kw), vals.get("max_tokens"), stops


def checked_messages(messages) -> list:
    """The OpenAI messages list, checked: [{"role": system|user|assistant, "content": str}, ...]."""
    if not isinstance(messages, list) or not messages:
        raise AppError("settings", "messages must be a non-empty list of {role, content}", field="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") \
                or not isinstance(m.get("content"), str):
            raise AppError("settings", f"messages[{i}] must be {{role: 'system' | 'user' | 'assistant', "
                                       f"content: string}}", field="messages")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def model_info(gf, cfg, name: str) -> dict:
    """What the page shows about a model (all plain values)."""
    types = {}
    for t in gf.tensors.values():
        types[t.format.name] = types.get(t.format.name, 0) + 1
    info = {"name": name, "file_size": gf.file_size, "header_bytes": gf.data_offset,
            "tensors": len(gf.tensors), "tensor_types": types,
            "title": gf.metadata.get("general.name") or name}
    if cfg is not None:
        for k in ("arch", "n_vocab", "n_ctx", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff",
                  "linear_type", "tied"):
            info[k] = getattr(cfg, k, None)
        if info["linear_type"] is not None:
            info["linear_type"] = info["linear_type"].name
    return info


def chat_format(eng):
    """The file's chat format (bitweb.chat.ChatFormat: its own template, run with jinja2 from
    the archive, with its thinking switch; or the built-in BitNet format). A template that
    cannot be run makes the model unsupported."""
    from bitweb.chat import ChatFormat
    try:
        return ChatFormat.from_tokenizer(eng.tokenizer)
    except Exception as e:
        raise AppError("unsupported", f"the file's chat template cannot be used: {e}") from None


class BlobSource:
    """gguf byte source over a JS Blob: synchronous ranged reads with FileReaderSync (workers only).

    Only for the few small reads the engine may make on the host; weights go through dev.upload.
    """

    def __init__(self, blob):
        self.blob = blob
        self.size = int(blob.size)

    def read(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0 or offset + n > self.size:
            raise gguf.GGUFError(f"read of {n} bytes at byte {offset} outside the file (size {self.size})")
        if getattr(self.blob, "readSync", None) is not None:       # web/models.mjs GrowingFile
            return self.blob.readSync(offset, n).to_bytes()
        ab = js.FileReaderSync.new().readAsArrayBuffer(self.blob.slice(offset, offset + n))
        return ab.to_bytes()


async def blob_bytes(blob, start: int, end: int) -> bytes:
    ab = await blob.slice(start, end).arrayBuffer()
    return ab.to_bytes()


async def parse_header(blob) -> gguf.GGUFFile:
    """Parse only the header: read a prefix, grow it while the parser says NeedMoreBytes.
    One prefix at a time (the last is dropped before the next is read), never past
    gguf.MAX_HEADER_BYTES: the parser refuses a header that would go further before asking."""
    size = int(blob.size)
    n = min(size, HEADER_FIRST)
    while True:
        prefix = await blob_bytes(blob, 0, n)
        try:
            gf = gguf.read_gguf(gguf.PrefixSource(prefix, size))
        except gguf.NeedMoreBytes as e:
            prefix = None      # drop this copy before reading the next one (the heap never shrinks)
            if n >= size or e.needed > gguf.MAX_HEADER_BYTES:    # cannot happen: the parser checks first
                raise gguf.GGUFError(f"header parse needs {e.needed} bytes of a {size}-byte file") from None
            n = min(size, gguf.MAX_HEADER_BYTES, max(e.needed, 2 * n))
            continue
        gf.header_read = n
        return gf


class Slot:
    """One loaded engine and what the page knows about it."""

    def __init__(self, eng, info: dict, fmt):
        self.eng, self.info, self.fmt = eng, info, fmt
        self.busy = False


class WebApp:
    """One per worker. post(json) sends a message to the page."""

    def __init__(self, post):
        self.post = post
        self.dev = None
        self.engines: dict[int, Slot] = {}
        self.next_id = 1
        self.stops: set = set()          # request ids of generations asked to stop
        self.aborted: set = set()        # request ids of loads asked to abort
        self.running: dict = {}          # request id of a generation -> [tokens so far]
        self.stop_at: dict = {}          # request id -> tokens generated when the stop arrived
        self.loading: dict = {}          # asyncio task -> buffers it created (freed if the load fails)
        self.load_lock = asyncio.Lock()
        self._progress_at = {}
        self.device_ready = None         # clock() when the current device was made

    # ------------------------------------------------------------------ helpers
    def send(self, type_: str, rid, **kw):
        kw["type"] = type_
        kw["id"] = rid
        self.post(json.dumps(kw))

    def progress(self, rid, stage: str, done: int, total: int):
        """Forward progress, at most every 50 ms per stage (always the first and the last);
        raises Aborted once the request was aborted (the engine's load stops there)."""
        if rid in self.aborted:
            raise Aborted("the load was aborted")
        now = time.perf_counter()
        last = self._progress_at.get((rid, stage), 0.0)
        if done not in (0, total) and now - last < 0.05:
            return
        self._progress_at[(rid, stage)] = now
        self.send("progress", rid, stage=stage, done=int(done), total=int(total))

    def error_json(self, e: BaseException) -> str:
        """error_json, with GPU / internal failures on a lost device reported as the loss."""
        if self.dev is not None and self.dev.lost is not None and classify(e)[0] in ("gpu", "internal"):
            e = AppError("device-lost", f"the GPU device was lost ({self.dev.lost}); load the model again")
        return error_json(e)

    # ------------------------------------------------------------------ device
    async def device(self, mask=(), caps=None):
        """The device for a load: the current one when it is alive and was made with the same
        mask_features / cap_limits (bitweb.gpu.request_device: a weaker GPU on request), else a new
        one. The one it replaces stays while engines use it (_drop_if_unused)."""
        from bitweb import gpu
        old = self.dev
        if old is not None and old.lost is None and (old.masked, old.capped) == (tuple(mask), dict(caps or {})):
            return old
        self.dev = None
        dev = await gpu.request_device("browser", mask_features=mask, cap_limits=caps)
        self.device_ready = clock()
        dev.device.lost.then(create_once_callable(lambda info: self._on_lost(dev, info)))
        self._track(dev)
        self.dev = dev
        if old is not None:
            self._drop_if_unused(old)
        return dev

    def _drop_if_unused(self, dev):
        """Destroy a device that is no longer the current one once no engine uses it."""
        if dev is not self.dev and dev.lost is None and not any(s.eng.dev is dev for s in self.engines.values()):
            dev.device.destroy()

    def _track(self, dev):
        """Buffers created by a load's task are remembered, so a load that fails frees exactly
        what it made (engines answering on the same device at the same time are not touched)."""
        make = dev.create_buffer

        def create_buffer(*a, **kw):
            b = make(*a, **kw)
            made = self.loading.get(asyncio.current_task())
            if made is not None:
                made.append(b)
            return b
        dev.create_buffer = create_buffer

    def _on_lost(self, dev, info):
        lost = [eid for eid, s in self.engines.items() if s.eng.dev is dev]
        if dev is not self.dev and not lost:
            return                              # (a replaced device with no engine left: destroyed here)
        reason = str(getattr(info, "reason", "") or "unknown")
        message = str(getattr(info, "message", "") or "")
        for eid in lost:
            del self.engines[eid]
        self.send("device-lost", None, engines=lost,
                  message=f"the GPU device was lost ({reason}{': ' + message if message else ''}). "
                          "Reload the model to continue.")

    def adapter_info(self) -> dict:
        d = self.dev
        return {"backend": d.backend, "info": dict(d.info), "description": d.describe(), "software": d.software,
                "features": sorted(d.features), "caps": d.caps.summary(),
                "limits": dict(d.limits), "weaker": d.weaker or None}

    def slot(self, eid) -> Slot:
        s = self.engines.get(int(eid))
        if s is None:
            if self.dev is not None and self.dev.lost is not None:
                raise AppError("device-lost", f"the GPU device was lost ({self.dev.lost}); load the model again")
            raise AppError("unloaded", "this engine was unloaded; load a model again")
        return s

    # ------------------------------------------------------------------ requests
    async def load(self, rid, blob, name: str, options_json: str = "{}") -> str:
        """Load the model in `blob` as a new engine (the others stay). Result: {"engine", "info"}."""
        try:
            opts = json.loads(options_json)
            async with self.load_lock:
                try:
                    return json.dumps(await self._load(rid, blob, name, opts))
                except OutOfMemory as e:
                    if not self.engines or opts.get("replace") != "always":
                        if self.engines:
                            raise self._no_room(str(e)) from None
                        raise
                    self.unload_all()                 # replace: "always": make room, try once more
                    return json.dumps(await self._load(rid, blob, name, opts))
        except Exception as e:
            if rid in self.aborted:
                e = Aborted("the load was aborted")
            return self.error_json(e)
        finally:
            self.aborted.discard(rid)

    def _no_room(self, why: str) -> AppError:
        names = [s.info["name"] for s in self.engines.values()]
        return AppError("no-room", f"{why}. The GPU memory is held by {', '.join(names)}: unload it to "
                                   "load this model (the library's replace: \"always\" does that)",
                        engines=list(self.engines))

    def unload_all(self):
        for eid in list(self.engines):
            self.unload(eid)

    async def _load(self, rid, blob, name: str, opts: dict) -> dict:
        from bitweb import engine, generation, gpu, model, upload
        t0 = time.perf_counter()
        stages = {}                                     # stage -> [start, end], epoch ms (clock())
        self.progress(rid, "header", 0, 1)
        d0 = clock()
        try:                                            # a weaker GPU on request (the app's ?cap=)
            mask, caps = gpu.check_weaker(opts.get("mask_features"), opts.get("cap_limits"))
        except gpu.GPUError as e:
            raise AppError("settings", str(e), field="maskFeatures" if "mask" in str(e) else "capLimits") from None
        getting = asyncio.ensure_future(self.device(mask, caps))  # the adapter and device while the header is read
        try:
            gf = await parse_header(blob)
        except BaseException:
            await asyncio.gather(getting, return_exceptions=True)
            raise
        stages["header"] = [d0, clock()]
        header_ms = (time.perf_counter() - t0) * 1000
        m = model.Model.from_gguf(gf)                   # parsed once: Engine.load takes it in `fit`
        info = model_info(gf, m.cfg, name)
        info.update(header_ms=round(header_ms, 1), header_read=gf.header_read)
        self.progress(rid, "header", 1, 1)
        gf.source = BlobSource(blob)
        dev = await getting
        stages["device"] = [d0, max(d0, self.device_ready or d0)]
        max_context = opts.get("context")
        if max_context is not None and (isinstance(max_context, bool) or not isinstance(max_context, int)
                                        or max_context < MIN_CONTEXT):
            raise AppError("settings", f"context = {max_context!r}: must be an integer of at least {MIN_CONTEXT} "
                                       "(positions in the KV cache)", field="context")
        kv = opts.get("kv_cache") or generation.KV_CACHE
        if kv not in generation.KV_TYPES:
            raise AppError("settings", f"kvCache = {kv!r}: must be one of {', '.join(generation.KV_TYPES)}",
                           field="kvCache")
        budget = opts.get("gpu_memory")
        try:                                            # the default context also fits gpu_memory
            fit = upload.fit_model(dev, m, max_context, kv, budget)
        except generation.ContextError as e:
            raise AppError("out-of-memory" if budget else "limits", f"{name}: {e}") from None
        need = fit.gpu_bytes
        if budget:
            held = sum(s.eng.gpu_bytes for s in self.engines.values())
            if need > budget:
                raise AppError("out-of-memory", f"{name} needs about {mib(need)} of GPU memory; this GPU "
                                                f"has {mib(budget)} for models")
            if need + held > budget:
                if opts.get("replace") != "always":
                    raise self._no_room(f"{name} needs about {mib(need)} of GPU memory and "
                                        f"{mib(budget - held)} of {mib(budget)} is free")
                self.unload_all()
        wasm0 = wasm_bytes()
        task = asyncio.current_task()
        made = []
        if task is not None:                  # (always in Pyodide: a call from JS runs as a Task)
            self.loading[task] = made
        dev.device.pushErrorScope("out-of-memory")
        scoped = True
        try:
            e0 = clock()
            eng = await engine.Engine.load(
                dev, gf, blob, activations=opts.get("activations", "a8"), fit=fit,
                progress=lambda stage, done, total: self.progress(rid, stage, done, total),
                wait_prefill=False)        # ready with the decode kernels; the prefill ones go on compiling
            stages.update({k: [e0 + a, e0 + b] for k, (a, b) in eng.stage_ms.items()})
            scoped = False
            err = await dev.device.popErrorScope()
            if err is not None and err is not jsnull:
                eng.close()
                raise OutOfMemory(f"the GPU ran out of memory while allocating {name}'s buffers "
                                  f"(about {mib(need)}): {err.message}")
            await dev.sync()
        except BaseException:
            for b in made:
                b.destroy()
            raise
        finally:
            self.loading.pop(task, None)
            if scoped:
                try:
                    await dev.device.popErrorScope()
                except Exception:
                    pass
        eid = self.next_id
        self.next_id += 1
        load = {"ms": round((time.perf_counter() - t0) * 1000, 1), "header_ms": info["header_ms"],
                "header_read": info["header_read"], "wasm_before": wasm0, "wasm_after": wasm_bytes(),
                "activations": opts.get("activations", "a8"), "n_ctx": eng.n_ctx, "context_note": fit.note,
                "kv_cache": eng.kv_variant, "kv_cache_bytes": eng.kv_bytes,
                "estimate_bytes": need, "stages": stages, "pipelines": eng.n_pipelines}
        for k in ("weight_bytes", "gpu_bytes"):
            v = getattr(eng, k, None)
            if isinstance(v, int):
                load[k] = v
        try:
            fmt = chat_format(eng)
        except Exception:
            eng.close()
            raise
        info["thinking"] = bool(fmt.has_thinking)
        info["thinking_default"] = bool(fmt.thinking_default)
        self.engines[eid] = Slot(eng, info, fmt)
        return {"engine": eid, "info": info, "adapter": self.adapter_info(), "load": load}

    def abort(self, rid):
        """Abort a load (at its next progress step) or stop a generation (before its next token)."""
        self.aborted.add(rid)
        self.stops.add(rid)
        if rid in self.running:
            self.stop_at[rid] = self.running[rid][0]

    def forget(self, rid):
        self.aborted.discard(rid)
        self.stops.discard(rid)
        self.stop_at.pop(rid, None)

    def unload(self, eid) -> str:
        s = self.engines.pop(int(eid), None)
        if s is not None:
            s.eng.close()
            self._drop_if_unused(s.eng.dev)
        return json.dumps({"unloaded": s is not None})

    def prompt_ids(self, s: Slot, messages, enable_thinking=None) -> list:
        return s.fmt.ids(messages, enable_thinking=enable_thinking)

    def tokenize(self, eid, request_json: str) -> str:
        """{"text"} -> the text's ids (no BOS); {"messages"} -> the prompt ids of that chat."""
        try:
            s = self.slot(eid)
            req = json.loads(request_json)
            if "messages" in req:
                ids = self.prompt_ids(s, checked_messages(req["messages"]), req.get("enable_thinking"))
            else:
                if not isinstance(req.get("text"), str):
                    raise AppError("settings", "tokenize: text must be a string", field="text")
                ids = s.eng.tokenizer.encode(req["text"], add_bos=False, parse_special=False)
            return json.dumps({"ids": ids, "context": s.eng.n_ctx})
        except Exception as e:
            return error_json(e)

    async def generate(self, rid, eid, request_json: str) -> str:
        """One chat completion: {"messages", sampling settings, "max_tokens", "stop"}.
        Posts {"type": "text", "id", "text"} as text is decoded (never text of a stop string);
        returns {"text", "finish_reason", "usage", "timing"}."""
        try:
            s = self.slot(eid)
            eng = s.eng
            req = json.loads(request_json)
            messages = checked_messages(req.get("messages"))
            params, max_tokens, stops = params_from(req)
            ids = self.prompt_ids(s, messages, req.get("enable_thinking"))
            if len(ids) > eng.n_ctx - 1:
                raise AppError("context", f"the conversation has {len(ids)} tokens but the context holds "
                                          f"{eng.n_ctx} (room for a reply needs at most {eng.n_ctx - 1}): "
                                          "drop old turns or start a new chat",
                               prompt_tokens=len(ids), context=eng.n_ctx)
            room = eng.n_ctx - len(ids)
            max_tokens = room if max_tokens is None else min(max_tokens, room)
            if s.busy:
                raise AppError("busy", "this engine is generating another reply")
            s.busy = True
            try:
                return json.dumps(await self._generate(rid, s, ids, params, max_tokens, stops,
                                                       req.get("enable_thinking")))
            finally:
                s.busy = False
        except Exception as e:
            return self.error_json(e)
        finally:
            self.stops.discard(rid)

    async def _generate(self, rid, s: Slot, ids, params, max_tokens: int, stops: list, enable_thinking=None) -> dict:
        from bitweb.generation import common_prefix
        eng = s.eng
        cached = list(eng.cached_ids)
        t0 = time.perf_counter()
        first = []
        text = []                       # all decoded text
        sent = [0]                      # characters of it sent to the page
        hit = [None]                    # where a stop string starts
        count = self.running[rid] = [0]

        def flush(upto: int):
            if upto > sent[0]:
                self.send("text", rid, text="".join(text)[sent[0]:upto])
                sent[0] = upto

        def on_token(tok_id, piece):     # tok_id None: the decoder's final flush, not a token
            if tok_id is not None:
                count[0] += 1
            if not first:
                first.append(time.perf_counter())
            if not piece or hit[0] is not None:
                return
            text.append(piece)
            if not stops:
                flush(sent[0] + len(piece))
                return
            full = "".join(text)
            found = [i for i in (full.find(st, sent[0]) for st in stops) if i >= 0]
            if found:
                hit[0] = min(found)
                flush(hit[0])
                return
            hold = max(_overlap(full, st) for st in stops)   # a stop string may be starting
            flush(len(full) - hold)

        if s.fmt.prompt_opens_thinking(enable_thinking):
            text.append(THINK_OPEN)        # the template opened the think block in the prompt:
            flush(len(THINK_OPEN))         # the reply carries it, as a reply that opens it would
        try:
            res = await eng.generate(ids, params, max_tokens, on_token=on_token, stop_ids=s.fmt.stop_ids,
                                     should_stop=lambda: hit[0] is not None or rid in self.stops)
        finally:
            self.running.pop(rid, None)
        t1 = time.perf_counter()
        full = "".join(text)
        if hit[0] is not None:
            full = full[:hit[0]]
            finish = "stop"
        else:
            flush(len(full))
            finish = {"eos": "stop", "eot": "stop", "max_tokens": "length", "context": "length",
                      "stopped": "abort"}[res.stop_reason]
        n = len(res.ids)
        keep = min(common_prefix(cached, ids), len(ids) - 1)
        timing = {"total_ms": round((t1 - t0) * 1000, 1),
                  "ttft_ms": round((first[0] - t0) * 1000, 1) if first else None,
                  "prefill_ms": res.prefill_ms, "prefill_tokens": len(ids) - keep, "cached_tokens": keep,
                  "decode_ms_per_token": res.decode_ms_per_token,
                  "dispatches_per_token": res.dispatches_per_token,
                  "host_calls_per_token": res.host_calls_per_token, "stop_reason": res.stop_reason,
                  "prefill_plan": eng.prefill_path}
        if rid in self.stop_at:
            timing["tokens_after_stop"] = n - self.stop_at[rid]
        if res.prefill_ms:
            timing["prefill_tok_s"] = round((len(ids) - keep) / (res.prefill_ms / 1000), 2)
        if first and n > 1 and t1 > first[0]:
            timing["decode_tok_s"] = round((n - 1) / (t1 - first[0]), 2)
        elif res.decode_ms_per_token:
            timing["decode_tok_s"] = round(1000 / res.decode_ms_per_token, 2)
        return {"text": full, "finish_reason": finish, "context": eng.n_ctx,
                "usage": {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n},
                "timing": timing}

    def stats(self) -> str:
        """Diagnostics for tests and the stats panel: wasm heap, live GPU buffers, engines."""
        out = {"wasm_bytes": wasm_bytes(), "engines": len(self.engines)}
        live = getattr(self.dev, "live", None) if self.dev is not None else None
        if callable(live):
            out.update(live())
        return json.dumps(out)

    async def lose_device(self):
        """Test hook: destroy the device as if the GPU went away (the page must offer a reload)."""
        if self.dev is not None:
            self.dev.device.destroy()


def _overlap(text: str, stop: str) -> int:
    """Length of the longest end of `text` that is a beginning of `stop` (held back: it may
    become the stop string)."""
    for k in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:k]):
            return k
    return 0


def clock() -> float:
    """Now, in ms since the epoch as the worker's JS sees it (performance.timeOrigin + now()): the
    load's stage times go to the page on that clock (web/worker.mjs, web/bitweb.mjs)."""
    try:
        return float(js.performance.timeOrigin + js.performance.now())
    except Exception:                   # CPython (tests of the plain parts)
        return time.time() * 1000


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def wasm_bytes() -> int:
    """Size of the wasm linear memory (Pyodide's heap); it never shrinks, so it shows the peak."""
    try:
        return int(js.bitwebWasmBytes())
    except Exception:
        return 0
