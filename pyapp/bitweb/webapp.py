"""The Python side of the library's worker (web/worker.mjs): engines driven by bitweb.engine in Pyodide.

Stdlib (+ Pyodide's `js`) only. The worker calls the coroutines of `WebApp` with
JS objects (a Blob/File for the model) and JSON strings; each returns a JSON string, either the
result or {"error": {"kind", "message", ...}} (bitweb.errors); progress and streamed text go
out through `post(json)` tagged with the request id. The protocol is defined once in
web/protocol.mjs (the messages posted here are checked against it: tests/test_protocol.py). What a
chat completion means (the request's fields, the streamed reply) is bitweb.completions'.

Several engines can live on the one GPU device at a time. A load never touches the engines that
are already there: the new model's header is parsed, checked against the device limits and
uploaded into new buffers while the others keep answering; the caller (web/bitweb.mjs, the app)
drops the old engine once the new one is ready. When the GPU memory would not hold both (the
estimate against a `gpu_memory` budget the caller gives, or an out-of-memory error while
uploading), the load fails with kind "no-room" and frees what it made, unless `replace` is
"always": then the other engines are unloaded first and the load is tried once more.

Loading a model: its header and small host reads from the Blob (bitweb.blob: where the bytes
go), the device (bitweb.gpu.request_device, one per mask / caps), the engine (bitweb.engine.Engine.load).
"""
from __future__ import annotations

import asyncio
import json
import time

from bitweb import options, structured
from bitweb.blob import HEADER_FIRST, BlobSource, parse_header  # noqa: F401 (the worker's names)
from bitweb.completions import (Completion, Request, chat_format, checked_messages, prompt_ids,  # noqa: F401
                                structured_call)
from bitweb.errors import AppError, Aborted, OutOfMemory, advice, classify, error_json  # noqa: F401
from bitweb.slot import Slot, model_info  # noqa: F401 (tests make Slots through this module)

try:                                    # Pyodide; the module still imports in CPython (tests)
    import js
except ImportError:                     # CPython (tests of the plain parts)
    js = None


class WebApp:
    """One per worker. post(json) sends a message to the page."""

    def __init__(self, post):
        self.post = post
        self.dev = None
        self.engines: dict[int, Slot] = {}
        self.next_id = 1
        self.stops: set = set()          # request ids of generations asked to stop
        self.aborted: set = set()        # request ids of loads asked to abort
        self.running: dict = {}          # request id of a generation -> its completions.Completion
        self.stop_at: dict = {}          # request id -> tokens generated when the stop arrived
        self.loading: dict = {}          # asyncio task -> buffers it created (freed if the load fails)
        self.load_lock = asyncio.Lock()
        self._progress_at = {}
        self.device_ready = None         # clock() when the current device was made
        self.grammars = structured.Grammars()     # compiled grammars by their text (their mask caches)
        self.kv_store = None             # saved KV caches: web/kvstore.mjs's find / save / drop (set_kv_store)

    def set_kv_store(self, store):
        """The worker's store of saved KV caches (web/kvstore.mjs), or None: before a reply the longest
        saved prefix of its prompt is restored (when longer than what the engine holds), after it the
        conversation's cache is saved."""
        self.kv_store = store

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
        dev.on_lost(lambda reason, message: self._on_lost(dev, reason, message))
        self._track(dev)
        self.dev = dev
        if old is not None:
            self._drop_if_unused(old)
        return dev

    def _drop_if_unused(self, dev):
        """Destroy a device that is no longer the current one once no engine uses it."""
        if dev is not self.dev and dev.lost is None and not any(s.eng.dev is dev for s in self.engines.values()):
            dev.destroy()

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

    def _on_lost(self, dev, reason: str, message: str):
        lost = [eid for eid, s in self.engines.items() if s.eng.dev is dev]
        if dev is not self.dev and not lost:
            return                              # (a replaced device with no engine left: destroyed here)
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
        """Load the model in `blob` as a new engine (the others stay). Result: {"engine", "info"}.
        options_json: the library's load options by its names (bitweb.options LOAD, check_load)."""
        try:
            try:
                opts = options.check_load(json.loads(options_json))
            except options.OptionError as e:
                raise AppError("settings", str(e), field=e.field) from None
            async with self.load_lock:
                try:
                    return json.dumps(await self._load(rid, blob, name, opts))
                except OutOfMemory as e:
                    if not self.engines or opts["replace"] != "always":
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
        mask, caps = gpu.check_weaker(opts["mask_features"], opts["cap_limits"])   # (checked: check_load)
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
        max_context, kv, budget = opts["context"], opts["kv_cache"], opts["gpu_memory"]
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
                if opts["replace"] != "always":
                    raise self._no_room(f"{name} needs about {mib(need)} of GPU memory and "
                                        f"{mib(budget - held)} of {mib(budget)} is free")
                self.unload_all()
        wasm0 = wasm_bytes()
        task = asyncio.current_task()
        made = []
        if task is not None:                  # (always in Pyodide: a call from JS runs as a Task)
            self.loading[task] = made
        dev.push_error_scope("out-of-memory")
        scoped = True
        try:
            e0 = clock()
            eng = await engine.Engine.load(
                dev, gf, blob, activations=opts["activations"], fit=fit,
                progress=lambda stage, done, total: self.progress(rid, stage, done, total),
                wait_prefill=False)        # ready with the decode kernels; the prefill ones go on compiling
            stages.update({k: [e0 + a, e0 + b] for k, (a, b) in eng.stage_ms.items()})
            scoped = False
            err = await dev.pop_error_scope()
            if err is not None:
                eng.close()
                raise OutOfMemory(f"the GPU ran out of memory while allocating {name}'s buffers "
                                  f"(about {mib(need)}): {err}")
            await dev.sync()
        except BaseException:
            for b in made:
                b.destroy()
            raise
        finally:
            self.loading.pop(task, None)
            if scoped:
                try:
                    await dev.pop_error_scope()
                except Exception:
                    pass
        eid = self.next_id
        self.next_id += 1
        load = {"ms": round((time.perf_counter() - t0) * 1000, 1), "header_ms": info["header_ms"],
                "header_read": info["header_read"], "wasm_before": wasm0, "wasm_after": wasm_bytes(),
                "activations": opts["activations"], "n_ctx": eng.n_ctx, "context_note": fit.note,
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
            self.stop_at[rid] = self.running[rid].tokens

    def forget(self, rid):
        self.aborted.discard(rid)
        self.stops.discard(rid)
        self.stop_at.pop(rid, None)

    def unload(self, eid) -> str:
        s = self.engines.pop(int(eid), None)
        if s is not None:
            for other in self.engines.values():      # (an engine it drafted for drafts no more)
                if other.draft is s:
                    other.draft = None
            s.eng.close()
            self._drop_if_unused(s.eng.dev)
        return json.dumps({"unloaded": s is not None})

    def set_draft(self, eid, draft_eid) -> str:
        """Engine draft_eid drafts for engine eid (speculative "draft"; the library loads and unloads
        it with its target): same device and vocabulary, not itself, else a settings error. -> null"""
        try:
            s, d = self.slot(eid), self.slot(draft_eid)
            from bitweb import speculative, blocks
            try:
                speculative.DraftModel(s.eng, d.eng)
            except blocks.EngineError as e:
                raise AppError("settings", f"draft: {e}", field="draft") from None
            s.draft = d
            return json.dumps(None)
        except Exception as e:
            return self.error_json(e)

    def tokenize(self, eid, request_json: str) -> str:
        """{"text"} -> the text's ids (no BOS); {"messages", "tools"?} -> the prompt ids of that chat."""
        try:
            s = self.slot(eid)
            req = json.loads(request_json)
            if "messages" in req:
                spec = structured.Spec(tools=structured_call(structured.check_tools, req.get("tools")))
                ids = prompt_ids(s.fmt, checked_messages(req["messages"]), req.get("enable_thinking"), spec)
            else:
                if not isinstance(req.get("text"), str):
                    raise AppError("settings", "tokenize: text must be a string", field="text")
                ids = s.eng.tokenizer.encode(req["text"], add_bos=False, parse_special=False)
            return json.dumps({"ids": ids, "context": s.eng.n_ctx})
        except Exception as e:
            return error_json(e)

    async def generate(self, rid, eid, request_json: str) -> str:
        """One chat completion (bitweb.completions: the request's fields and what the reply is).
        Posts {"type": "text", "id", "text"} as content is decoded (never text of a stop string)
        and {"type": "tool_call", "id", "index", "call_id"?, "name"?, "arguments"?} as a tool call
        streams (its start, then pieces of its arguments); returns {"text", "tool_calls"?,
        "finish_reason", "context", "usage", "timing"}. A speculative request (bitweb.speculative:
        prompt lookup, or the draft model of set_draft) first waits for the prefill kernels a load
        left compiling: they verify the drafts; its usage says what was drafted and accepted."""
        try:
            s = self.slot(eid)
            req = Request.parse(json.loads(request_json), s.fmt)
            ids = req.prompt(s.fmt)
            max_tokens = req.budget(ids, s.eng.n_ctx)
            if s.busy:
                raise AppError("busy", "this engine is generating another reply")
            d = s.draft if req.speculative == "draft" else None
            if req.speculative == "draft" and d is None:
                raise AppError("settings", 'speculative.mode: "draft" needs an engine loaded with a draft model '
                                           "(load(source, {draft}))", field="speculative.mode")
            if d is not None and d.busy:
                raise AppError("busy", "this engine's draft model is generating another reply")
            constraint = structured_call(self.grammars.constraint, req.spec, s.fmt, s.vocabulary)
            reply = structured.Reply(req.spec, structured.dialect(s.fmt)) if req.spec.calls else None
            s.busy = True
            if d is not None:
                d.busy = True
            try:
                return json.dumps(await self._generate(rid, eid, s, ids, req, max_tokens, constraint, reply))
            finally:
                s.busy = False
                if d is not None:
                    d.busy = False
        except Exception as e:
            return self.error_json(e)
        finally:
            self.stops.discard(rid)

    async def _generate(self, rid, eid, s: Slot, ids, req: Request, max_tokens: int, constraint, reply) -> dict:
        from bitweb.generation import common_prefix
        eng = s.eng
        t0, restored = time.perf_counter(), 0
        if self.kv_store is not None:
            restored = await s.restore(self.kv_store, int(eid), ids)
        restore_ms = (time.perf_counter() - t0) * 1000
        cached = list(eng.cached_ids)
        c = self.running[rid] = Completion(
            req.stops, on_text=lambda text: self.send("text", rid, text=text),
            on_tool_call=lambda event: self.send("tool_call", rid, **event), reply=reply, constraint=constraint,
            opens_thinking=s.fmt.prompt_opens_thinking(req.thinking))
        try:
            kw = {"constraint": constraint} if constraint is not None else {}
            if req.speculative is not None:          # "lookup", or the draft model's Engine
                kw["speculative"] = s.draft.eng if req.speculative == "draft" else req.speculative
                if not eng.prefill_ready:         # drafts are verified by the multi-row plan: its kernels
                    await asyncio.shield(eng.prefill_compiled)   # (still compiling after the load) first
            res = await eng.generate(ids, req.params, max_tokens, on_token=c.on_token, stop_ids=s.fmt.stop_ids,
                                     should_stop=lambda: c.stopped() or rid in self.stops, **kw)
        finally:
            self.running.pop(rid, None)
        out = c.result(res, len(ids), context=eng.n_ctx)
        keep = min(common_prefix(cached, ids), len(ids) - 1)
        after = len(res.ids) - self.stop_at[rid] if rid in self.stop_at else None
        out["timing"] = c.timing(res, len(ids), keep, eng.prefill_path, tokens_after_stop=after)
        if self.kv_store is not None:
            s.unsaved = len(ids) if eng.cached_ids else None        # (saved by save_kv, after the reply)
            out["timing"].update(restored_tokens=restored, restore_ms=round(restore_ms, 1))
        return out

    async def save_kv(self, eid) -> str:
        """Save the KV cache of engine eid's last reply, once (Slot.save_kv): the worker calls this
        after the reply has gone, before the engine's next request."""
        s = self.engines.get(int(eid))
        return json.dumps(await s.save_kv(self.kv_store, int(eid)) if s is not None else {"saved": None, "ms": 0.0})

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
            self.dev.destroy()


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
