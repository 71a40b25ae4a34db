"""The Python side of the app's worker (web/worker.mjs): drives bitweb.engine in Pyodide.

Stdlib (+ Pyodide's `js` / `pyodide.ffi`) only. The worker calls these coroutines
with JS objects (a Blob/File for the model, JSON strings for options) and this
module reports back through `post(dict)` -> `postMessage` (see worker.mjs for the
protocol). Every call catches its own errors and posts one `error` message with a
`kind` the page turns into advice (see `classify`).

Loading a model, and where its bytes go:

    blob (File / OPFS File)                       JS memory        wasm heap
      header:  blob.slice(0, n) -> PrefixSource    n bytes          n bytes (n ~ header, doubled
               -> gguf.read_gguf; NeedMoreBytes(m)                    until the header parses)
               -> retry with max(m, 2n)
      weights: engine -> dev.upload(buf, off, blob, ...)             0: web/gpu.mjs uploadBlob reads
               -> uploadBlob: blob.slice(chunk).arrayBuffer()         one chunk at a time from the
               -> queue.writeBuffer                                   Blob and hands it to WebGPU
      small host reads (norms, scales) the engine may ask gguf_file.source for go through
      BlobSource: FileReaderSync over blob.slice (only the bytes asked for).

A new model reuses the device (the old model's buffers are destroyed first, compiled pipelines
are kept); after a device loss the next load requests a new device.
"""
from __future__ import annotations

import json
import time

from bitweb import gguf
from bitweb.gpu import DeviceLostError, GPUError, LimitsError, NoAdapterError

try:                                    # Pyodide; the module still imports in CPython (tests)
    import js
    from pyodide.ffi import create_once_callable, jsnull
except ImportError:                     # CPython (tests of the plain parts)
    js = jsnull = None

HEADER_FIRST = 256 << 10                # first header read; doubled until the header parses


class OutOfMemory(GPUError):
    """A GPU allocation failed (WebGPU out-of-memory error scope)."""


class AppError(Exception):
    """An error with a kind chosen here (e.g. no model loaded yet)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def classify(e: BaseException) -> tuple[str, str]:
    """(kind, message) for the page. Kinds: no-webgpu, limits, format, unsupported, context,
    device-lost, oom, settings, no-model, gpu, internal."""
    name = type(e).__name__
    msg = str(e) or name
    if isinstance(e, AppError):
        return e.kind, msg
    if isinstance(e, NoAdapterError):
        return "no-webgpu", msg
    if isinstance(e, LimitsError):
        return "limits", msg
    if isinstance(e, DeviceLostError):
        return "device-lost", msg
    if isinstance(e, OutOfMemory):
        return "oom", msg
    if isinstance(e, gguf.GGUFError):
        return "format", msg
    if name in ("ModelError", "TokenizerError", "EngineError"):
        return "unsupported", msg
    if name == "ContextError":
        return "context", msg
    if name == "SamplingError":
        return "settings", msg
    if isinstance(e, MemoryError):
        return "oom", "out of memory in the Python heap: " + msg
    if isinstance(e, GPUError):
        return "gpu", msg
    return "internal", f"{name}: {msg}"


def params_from(settings: dict):
    """SamplingParams and max_tokens from the page's settings (names as in the CLI)."""
    from bitweb.sampling import SamplingParams
    s = dict(settings)
    max_tokens = int(s.pop("max_tokens", 128))
    if max_tokens < 1:
        raise AppError("settings", f"max tokens = {max_tokens} must be at least 1")
    known = ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "seed")
    kw = {}
    for k in known:
        if k in s and s[k] is not None and s[k] != "":
            v = s[k]
            kw[k] = int(v) if k in ("top_k", "seed") else float(v)
    return SamplingParams(**kw), max_tokens


def model_info(gf, cfg, name: str) -> dict:
    """What the page shows about a model (all plain values)."""
    types = {}
    for t in gf.tensors.values():
        types[t.type_name] = types.get(t.type_name, 0) + 1
    info = {"name": name, "file_size": gf.file_size, "header_bytes": gf.data_offset,
            "tensors": len(gf.tensors), "tensor_types": types,
            "title": gf.metadata.get("general.name") or name}
    if cfg is not None:
        for k in ("arch", "n_vocab", "n_ctx", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff",
                  "linear_type", "tied"):
            info[k] = getattr(cfg, k, None)
    return info


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
        ab = js.FileReaderSync.new().readAsArrayBuffer(self.blob.slice(offset, offset + n))
        return ab.to_bytes()


async def blob_bytes(blob, start: int, end: int) -> bytes:
    ab = await blob.slice(start, end).arrayBuffer()
    return ab.to_bytes()


async def parse_header(blob) -> gguf.GGUFFile:
    """Parse only the header: read a prefix, grow it while the parser says NeedMoreBytes."""
    size = int(blob.size)
    n = min(size, HEADER_FIRST)
    while True:
        prefix = await blob_bytes(blob, 0, n)
        try:
            gf = gguf.read_gguf(gguf.PrefixSource(prefix, size))
        except gguf.NeedMoreBytes as e:
            if n >= size:      # cannot happen: a full prefix never needs more
                raise gguf.GGUFError(f"header parse needs {e.needed} bytes of a {size}-byte file") from None
            n = min(size, max(e.needed, 2 * n))
            continue
        gf.header_read = n
        return gf


class WebApp:
    """One per worker. post(dict) sends a message to the page."""

    def __init__(self, post):
        self.post = post
        self.dev = None
        self.eng = None
        self.chat = None
        self.gf = None
        self.name = None
        self.stop_requested = False
        self.n_tokens = 0                # tokens of the running generation
        self.tokens_at_stop = None       # n_tokens when the stop request arrived
        self.info = {}
        self._progress_at = {}

    # ------------------------------------------------------------------ helpers
    def send(self, type_: str, **kw):
        kw["type"] = type_
        self.post(json.dumps(kw))

    def fail(self, e: BaseException, during: str | None = None) -> bool:
        kind, msg = classify(e)
        if kind == "internal":
            import traceback
            print(traceback.format_exc())
        if self.dev is not None and self.dev.lost is not None and kind in ("gpu", "internal"):
            kind, msg = "device-lost", f"the GPU device was lost ({self.dev.lost}); reload the model to continue"
        self.send("error", kind=kind, message=msg, loaded=self.eng is not None, during=during)
        return False

    def progress(self, stage: str, done: int, total: int, **extra):
        """Forward progress, at most every 50 ms per stage (always the first and the last)."""
        now = time.perf_counter()
        last = self._progress_at.get(stage, 0.0)
        if done not in (0, total) and now - last < 0.05:
            return
        self._progress_at[stage] = now
        self.send("progress", stage=stage, done=int(done), total=int(total), **extra)

    # ------------------------------------------------------------------ device
    async def device(self):
        """The device for the next model: the current one with the old model's buffers freed
        (compiled pipelines are kept), or a new one when there is none or it was lost."""
        from bitweb import gpu
        if self.eng is not None:
            self.eng.close()
        self.eng = self.chat = None
        if self.dev is not None and self.dev.lost is None:
            return self.dev
        self.dev = None
        dev = await gpu.request_device("browser")
        dev.device.lost.then(create_once_callable(lambda info: self._on_lost(dev, info)))
        dev.granted = dict(dev.limits)
        self.dev = dev
        return dev

    def drop_device(self):
        """After a failed load: destroy the device (and whatever the load allocated on it)."""
        dev, self.dev = self.dev, None        # set first: _on_lost ignores a device we dropped
        if dev is not None:
            try:
                dev.device.destroy()
            except Exception:
                pass

    def _on_lost(self, dev, info):
        if dev is not self.dev:
            return
        reason = str(getattr(info, "reason", "") or "unknown")
        message = str(getattr(info, "message", "") or "")
        self.eng = self.chat = None
        self.send("error", kind="device-lost",
                  message=f"the GPU device was lost ({reason}{': ' + message if message else ''}). "
                          "Reload the model to continue.")

    def adapter_info(self) -> dict:
        d = self.dev
        return {"backend": d.backend, "info": dict(d.info), "description": d.describe(),
                "features": sorted(d.features), "caps": d.caps.summary(),
                "limits": dict(d.limits)}

    # ------------------------------------------------------------------ protocol
    async def inspect(self, blob, name: str) -> bool:
        """Parse the header of `blob` (validate before caching). Posts `error` on failure."""
        try:
            t0 = time.perf_counter()
            gf = await parse_header(blob)
            cfg = None
            try:
                from bitweb import model
                cfg = model.Config.from_gguf(gf)
            except ImportError:
                pass
            self.gf, self.name = gf, name
            self.info = model_info(gf, cfg, name)
            self.info["header_ms"] = round((time.perf_counter() - t0) * 1000, 1)
            self.info["header_read"] = gf.header_read
            return True
        except Exception as e:
            self.gf = None
            return self.fail(e, "load")

    async def load(self, blob, name: str, options_json: str = "{}") -> bool:
        """Load the model in `blob` (replacing the current one). `inspect` has normally parsed
        its header already (else it is parsed now). Posts progress, then `ready` or `error`."""
        try:
            opts = json.loads(options_json)
            t0 = time.perf_counter()
            if self.gf is None or self.gf.file_size != int(blob.size) or self.name != name:
                if not await self.inspect(blob, name):
                    return False
            gf = self.gf
            gf.source = BlobSource(blob)
            from bitweb import engine
            dev = await self.device()
            dev.limits = dict(dev.granted)
            for k, v in (opts.get("cap_limits") or {}).items():   # act as a smaller GPU would
                dev.limits[k] = min(int(v), int(dev.limits.get(k, v)))
            wasm0 = wasm_bytes()
            dev.device.pushErrorScope("out-of-memory")
            try:
                eng = await engine.Engine.load(
                    dev, gf, blob, activations=opts.get("activations", "a8"),
                    max_context=opts.get("max_context"),
                    progress=lambda stage, done, total: self.progress(stage, done, total))
            finally:
                err = await dev.device.popErrorScope()
            if err is not None and err is not jsnull:
                raise OutOfMemory(f"the GPU ran out of memory while allocating the model's buffers: {err.message}")
            await dev.sync()
            self.eng = eng
            self.chat = None
            load_ms = (time.perf_counter() - t0) * 1000
            stats = {"ms": round(load_ms, 1), "header_ms": self.info.get("header_ms"),
                     "header_read": self.info.get("header_read"),
                     "wasm_before": wasm0, "wasm_after": wasm_bytes(),
                     "activations": opts.get("activations", "a8"), "n_ctx": eng.n_ctx,
                     "counters": dict(dev.counters)}
            for k in ("weight_bytes", "gpu_bytes"):
                v = getattr(eng, k, None)
                if isinstance(v, int):
                    stats[k] = v
            self.send("ready", model=self.info, adapter=self.adapter_info(), load=stats)
            return True
        except Exception as e:
            self.eng = self.chat = None
            ok = self.fail(e, "load")
            if self.dev is not None and self.dev.lost is None and self.gf is not None:
                self.drop_device()            # buffers of a half-loaded model go with it
            return ok

    def has_model(self) -> bool:
        return self.eng is not None

    def request_stop(self):
        if not self.stop_requested:
            self.stop_requested = True
            self.tokens_at_stop = self.n_tokens

    def reset(self):
        self.chat = None

    async def generate(self, request_json: str) -> bool:
        """One user turn: {"text", "system", "settings"}. Posts token... then done (or error)."""
        try:
            req = json.loads(request_json)
            if self.eng is None:
                if self.dev is not None and self.dev.lost is not None:
                    raise AppError("device-lost", f"the GPU device was lost ({self.dev.lost}); reload the model")
                raise AppError("no-model", "no model is loaded yet")
            params, max_tokens = params_from(req.get("settings") or {})
            from bitweb.generation import ChatSession, common_prefix
            if self.chat is None:
                self.chat = ChatSession(self.eng, system=(req.get("system") or None))
            cached = list(getattr(self.eng, "cached_ids", []))
            self.stop_requested = False
            self.n_tokens, self.tokens_at_stop = 0, None
            t0 = time.perf_counter()
            first = []
            pieces = []

            def on_token(tok_id, piece):     # tok_id None: the decoder's final flush, not a token
                if tok_id is not None:
                    self.n_tokens += 1
                if not first:
                    first.append(time.perf_counter())
                if piece:
                    pieces.append(piece)
                    self.send("token", text=piece)

            res = await self.chat.send(req.get("text", ""), params, max_tokens, on_token=on_token,
                                       should_stop=lambda: self.stop_requested)
            t1 = time.perf_counter()
            n = len(res.ids)
            stats = {"tokens": n, "prompt_tokens": len(res.prompt_ids),
                     "total_ms": round((t1 - t0) * 1000, 1),
                     "ttft_ms": round((first[0] - t0) * 1000, 1) if first else None,
                     "prefill_ms": res.prefill_ms,
                     "decode_ms_per_token": res.decode_ms_per_token,
                     "dispatches_per_token": res.dispatches_per_token,
                     "host_calls_per_token": res.host_calls_per_token}
            if self.tokens_at_stop is not None:
                stats["tokens_after_stop"] = self.n_tokens - self.tokens_at_stop
            # tokens actually prefilled: the engine keeps the KV cache of the common prefix
            new_prompt = len(res.prompt_ids) - min(common_prefix(cached, res.prompt_ids), len(res.prompt_ids) - 1)
            stats["prefill_tokens"] = new_prompt
            if res.prefill_ms:
                stats["prefill_tok_s"] = round(new_prompt / (res.prefill_ms / 1000), 2)
            if first and n > 1 and t1 > first[0]:
                stats["decode_tok_s"] = round((n - 1) / (t1 - first[0]), 2)
            elif res.decode_ms_per_token:
                stats["decode_tok_s"] = round(1000 / res.decode_ms_per_token, 2)
            self.send("done", text=res.text, stop_reason=res.stop_reason, stats=stats)
            return True
        except Exception as e:
            return self.fail(e, "generate")

    async def lose_device(self):
        """Test hook: destroy the device as if the GPU went away (the page must offer a reload)."""
        if self.dev is not None:
            self.dev.device.destroy()


def wasm_bytes() -> int:
    """Size of the wasm linear memory (Pyodide's heap); it never shrinks, so it shows the peak."""
    try:
        return int(js.bitwebWasmBytes())
    except Exception:
        return 0
