"""Browser backend: pyodide.ffi over navigator.gpu (runs only in Pyodide).

The page's worker must have imported web/gpu.mjs as `globalThis.bitwebGPU`
(a few JS helpers: replay a prepared plan with one call, read back a range).
Uploads accept JS ArrayBuffers / TypedArrays as they are, so weight bytes go
from JS memory to queue.writeBuffer without entering the wasm heap.

JS `null` arrives in Python as `pyodide.ffi.jsnull` (not None; only `undefined` becomes
None), and a missing property raises AttributeError: every optional JS value is read through
`_js_value` / `_absent` so a null adapter, limit or info field is "absent", never a traceback.
"""
from __future__ import annotations

from bitweb.gpu import (DOT4_FEATURE, WANTED_FEATURES, WANTED_LIMITS, Caps, Device, DeviceLostError, GPUError,
                        NoAdapterError, capped)

import js  # noqa: E402  (pyodide)
from pyodide.ffi import JsProxy, jsnull, to_js  # noqa: E402

NO_WEBGPU = ("WebGPU is not available in this browser. Use a recent Chrome or Edge (113+), "
             "or Firefox Nightly / Safari Technology Preview with WebGPU enabled; on Linux start Chrome "
             "with --enable-unsafe-webgpu (and --enable-features=Vulkan). The page must be served "
             "from http://localhost / 127.0.0.1 or https.")


def _obj(d):
    return to_js(d, dict_converter=js.Object.fromEntries)


def _absent(v) -> bool:
    """JS null or undefined (jsnull / None in Python)."""
    return v is None or v is jsnull


def _js_value(obj, name: str, default=None):
    """obj[name], or `default` when obj is null / undefined, or the property is missing / null."""
    if _absent(obj):
        return default
    try:
        v = getattr(obj, name)
    except AttributeError:
        return default
    return default if _absent(v) else v


class BrowserDevice(Device):
    compiles_in_background = True

    def __init__(self, adapter, device, features, caps, info, limits):
        super().__init__(backend="browser")
        self.adapter = adapter
        self.device = device
        self.queue = device.queue
        self.features = frozenset(features)
        self.caps = caps
        self.info = info
        self.limits = limits
        self.helper = js.bitwebGPU
        device.lost.then(self._on_lost)

    def _on_lost(self, info):
        self._set_lost(str(_js_value(info, "reason", "unknown reason")), str(_js_value(info, "message", "")))

    def _push_error_scope(self, filter):
        self.device.pushErrorScope(filter)

    async def _pop_error_scope(self):
        err = await self.device.popErrorScope()
        return None if _absent(err) else str(_js_value(err, "message", "") or err)

    def _destroy(self):
        self.device.destroy()             # (device.lost resolves, reason "destroyed": _on_lost)

    def _helper_live(self):
        n, nbytes = self.helper.live(self.device).to_py()       # web/gpu.mjs readback staging
        return int(n), int(nbytes)

    def _create_buffer(self, size, usage, label):
        return self.device.createBuffer(_obj({"size": size, "usage": usage, "label": label}))

    def _write(self, raw, offset, data, data_offset, size):
        if isinstance(data, JsProxy):                      # ArrayBuffer / TypedArray: zero copy
            nbytes = int(data.byteLength)
            if size is None:
                size = nbytes - data_offset
            if data_offset or size != nbytes:
                self.queue.writeBuffer(raw, offset, data, data_offset, size)
            else:
                self.queue.writeBuffer(raw, offset, data)
            return size
        mv = memoryview(data).cast("B")
        if size is None:
            size = len(mv) - data_offset
        arr = to_js(mv[data_offset:data_offset + size])    # small host data (params, tokens)
        self.queue.writeBuffer(raw, offset, arr)
        return size

    async def _upload(self, raw, offset, src, src_offset, size, chunk, on_bytes):
        if isinstance(src, JsProxy):                      # Blob / File: JS streams it
            cb = None
            if on_bytes is not None:
                from pyodide.ffi import create_proxy
                cb = create_proxy(on_bytes)
            try:
                await self.helper.uploadBlob(self.device, raw, offset, src, src_offset, src_offset + size, chunk, cb)
            finally:
                if cb is not None:
                    cb.destroy()
            return (size + chunk - 1) // chunk
        return await super()._upload(raw, offset, src, src_offset, size, chunk, on_bytes)

    async def _upload_many(self, items, src, chunk, on_bytes):
        if not isinstance(src, JsProxy):
            return await super()._upload_many(items, src, chunk, on_bytes)
        cb = None
        if on_bytes is not None:
            from pyodide.ffi import create_proxy
            cb = create_proxy(on_bytes)
        try:                                    # (one call: web/gpu.mjs streams each range in turn)
            await self.helper.uploadMany(self.device, src, to_js([raw for raw, *_ in items]),
                                         to_js([v for _, o, so, n in items for v in (o, so, so + n)]), chunk, cb)
        finally:
            if cb is not None:
                cb.destroy()
        return sum((size + chunk - 1) // chunk for *_, size in items)

    async def _read(self, raw, offset, size):
        out = await self.helper.read(self.device, raw, offset, size)
        return out.to_bytes()

    async def _read_then(self, raw, offset, size, then):
        pending = self.helper.read(self.device, raw, offset, size)   # (copy, submit, mapAsync: issued now)
        self.run(then)
        return (await pending).to_bytes()

    async def _read_ranges(self, items):
        return await self.helper.readRanges(self.device, to_js([raw for raw, *_ in items]),
                                            to_js([v for _, o, n in items for v in (o, n)]))

    async def _pipeline(self, code, entry, constants, label):
        try:                                   # (web/gpu.mjs: a pipeline it prepared, or a new compile)
            return await self.helper.compile(self.device, code, entry, _obj(constants) if constants else None, label)
        except Exception as e:
            raise GPUError(f"{label}: {getattr(e, 'message', None) or e}") from None

    def _bind_group(self, raw_pipeline, entries):
        return self.device.createBindGroup(_obj({
            "layout": raw_pipeline.getBindGroupLayout(0),
            "entries": [{"binding": i, "resource": {"buffer": b, "offset": off, "size": size}}
                        for i, (b, off, size) in enumerate(entries)]}))

    def _prepare(self, items):
        pipes = js.Array.new()
        groups = js.Array.new()
        counts = js.Uint32Array.new(3 * len(items))
        for i, (p, bg, (x, y, z)) in enumerate(items):
            pipes.push(p.raw)
            groups.push(bg)
            counts[3 * i], counts[3 * i + 1], counts[3 * i + 2] = x, y, z
        return self.helper.makePlan(pipes, groups, counts)

    def _run_plan(self, plan):
        self.helper.replay(self.device, plan.raw)

    def _run_list(self, items):
        self.helper.replay(self.device, self._prepare(items))
        return 1

    async def _time_plan(self, plan, repeats):
        """One pass per run with timestampWrites, one submission, resolveQuerySet, one read (ns).
        Chrome quantises timestamps (100 us steps) unless started with
        --enable-webgpu-developer-features; runs on CPU rasterisers take milliseconds."""
        import struct
        from bitweb.gpu import COPY_SRC, QUERY_RESOLVE
        n = 2 * repeats
        qs = self.device.createQuerySet(_obj({"type": "timestamp", "count": n}))
        out = self.create_buffer(8 * n, QUERY_RESOLVE | COPY_SRC, label="timestamps")
        try:
            enc = self.device.createCommandEncoder()
            for r in range(repeats):
                cp = enc.beginComputePass(_obj({"timestampWrites": {
                    "querySet": qs, "beginningOfPassWriteIndex": 2 * r, "endOfPassWriteIndex": 2 * r + 1}}))
                for p, bg, (x, y, z) in plan.items:
                    cp.setPipeline(p.raw)
                    cp.setBindGroup(0, bg)
                    cp.dispatchWorkgroups(x, y, z)
                cp.end()
            enc.resolveQuerySet(qs, 0, n, out.raw, 0)
            self.queue.submit(to_js([enc.finish()]))
            raw = (await self.helper.read(self.device, out.raw, 0, 8 * n)).to_bytes()
        finally:
            out.destroy()
            qs.destroy()
        t = struct.unpack(f"<{n}Q", raw)
        return [(t[2 * r + 1] - t[2 * r]) * 1e-9 for r in range(repeats)]

    async def _sync(self):
        await self.queue.onSubmittedWorkDone()

    def _fence(self):
        return self.queue.onSubmittedWorkDone()       # (a JS promise: awaitable, settles in order)


async def request_device(mask=(), caps=None) -> BrowserDevice:
    """mask / caps: bitweb.gpu.request_device's (checked there)."""
    caps = dict(caps or {})
    features = [f for f in WANTED_FEATURES if f not in mask]
    r = await js.bitwebGPU.requestDevice(to_js(features), to_js(list(WANTED_LIMITS)), _obj(caps) if caps else None)
    kind = _js_value(r, "kind")                  # (web/gpu.mjs makes it, or hands over the one it prepared)
    if kind == "adapter-failed":                 # some browsers reject instead of resolving null
        raise NoAdapterError(f"navigator.gpu exists but requesting a WebGPU adapter failed ({r.message}). "
                             + NO_WEBGPU)
    if kind == "no-adapter":                     # resolves to JS null: WebGPU is off or blocklisted
        raise NoAdapterError("navigator.gpu exists but no WebGPU adapter was found (requestAdapter "
                             "returned null: WebGPU is disabled or this GPU is blocklisted). " + NO_WEBGPU)
    if kind == "no-webgpu":
        raise NoAdapterError(NO_WEBGPU)
    want, limits = r.want.to_py(), {k: int(v) for k, v in r.limits.to_py().items()}
    if kind == "device-failed":
        raise GPUError(f"the adapter refused a device with features {want} and limits {limits}: {r.message}")
    if kind is not None:
        raise GPUError(f"the adapter returned no device for features {want} and limits {limits}")
    adapter, device = r.adapter, r.device
    features = _js_value(adapter, "features")
    have = set(js.Array.from_(features).to_py()) if features is not None else set()
    dlim = _js_value(device, "limits")
    granted = {}
    for name in WANTED_LIMITS + ("minStorageBufferOffsetAlignment", "maxComputeWorkgroupSizeY"):
        v = _js_value(dlim, name)
        if v is not None:
            granted[name] = int(v)
    granted = capped(granted, caps)              # (a cap under WebGPU's default: the device has the default)
    wgsl = _js_value(_js_value(js.navigator, "gpu"), "wgslLanguageFeatures")
    dot4 = bool(wgsl is not None and wgsl.has(DOT4_FEATURE)) and DOT4_FEATURE not in mask
    ai = _js_value(adapter, "info")
    info = {k: str(_js_value(ai, k, "")) for k in ("vendor", "architecture", "device", "description")}
    caps = Caps(subgroups="subgroups" in want, shader_f16="shader-f16" in want, dot4=dot4,
                timestamps="timestamp-query" in want,
                subgroup_matrix="chromium-experimental-subgroup-matrix" in have,
                subgroup_min=int(_js_value(ai, "subgroupMinSize", 0)),
                subgroup_max=int(_js_value(ai, "subgroupMaxSize", 0)))
    dev = BrowserDevice(adapter, device, want, caps, info, granted)
    # GPUAdapterInfo.isFallbackAdapter (Chrome 127+; earlier GPUAdapter.isFallbackAdapter)
    dev.fallback = bool(_js_value(ai, "isFallbackAdapter", False) or _js_value(adapter, "isFallbackAdapter", False))
    return dev


__all__ = ["request_device", "BrowserDevice", "DeviceLostError"]
