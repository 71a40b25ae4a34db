"""Native backend: wgpu-py (wgpu-native; Mesa lavapipe here, Vulkan/Metal/D3D12 GPUs elsewhere)."""
from __future__ import annotations

import os

from bitweb.gpu import (DOT4_FEATURE, WANTED_FEATURES, WANTED_LIMITS, Caps, Device, GPUError, NoAdapterError,
                        capped)

# wgpu-native's feature names where they differ from WebGPU's.
_NATIVE_FEATURE = {"subgroups": "subgroup"}


def _camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(w.capitalize() for w in rest)


def _hyphen(name: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in name)


class NativeDevice(Device):
    def __init__(self, adapter, device, features, caps):
        super().__init__(backend="native")
        self.adapter = adapter
        self.device = device
        self.queue = device.queue
        info = adapter.info
        self.info = {k: info.get(k, "") for k in ("vendor", "architecture", "device", "description", "adapter_type", "backend_type")}
        self.features = frozenset(features)
        self.limits = {_camel(k): v for k, v in device.limits.items()}
        self.caps = caps

    def _push_error_scope(self, filter):
        pass                            # (wgpu-py raises each error at its call: nothing to capture)

    async def _pop_error_scope(self):
        return None

    def _destroy(self):
        self.device.destroy()
        self._set_lost("destroyed", "the device was destroyed")

    def _compiles_at_dispatch(self):
        """lavapipe (llvmpipe) with Mesa's shader cache on: what one device compiles, another reads."""
        cache_off = os.environ.get("MESA_SHADER_CACHE_DISABLE", "").lower() in ("1", "true", "yes")
        return "llvmpipe" in " ".join(str(v) for v in self.info.values()) and not cache_off and \
            getattr(self, "requested", None) is not None

    async def _warm(self, items):
        import asyncio
        import threading
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        stop = threading.Event()

        def settle(fn, value):
            try:
                loop.call_soon_threadsafe(lambda: done.done() or fn(value))
            except RuntimeError:           # the loop has closed: nobody waits
                pass

        def work():
            try:            # niced (Linux: per thread, inherited by the driver's threads made here):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # the reply goes first
            except (AttributeError, OSError):
                pass
            try:
                settle(done.set_result, self._warm_sync(items, stop))
            except BaseException as e:     # (reported to the awaiting task)
                settle(done.set_exception, e)
        threading.Thread(target=work, name="bitweb-warm", daemon=True).start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            stop.set()
            raise

    def _warm_sync(self, items, stop):
        """In a thread: a second device of this adapter (same features and limits: the same WGSL
        compiles to the same code) dispatches each pipeline once, one workgroup, over scratch
        buffers (zeros; WebGPU's bounds checks keep every access inside them)."""
        import wgpu
        features, limits = self.requested
        dev = self.adapter.request_device_sync(required_features=features, required_limits=limits,
                                               label="bitweb warm")
        size = 1 << 16
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_SRC
        bufs = [dev.create_buffer(size=size, usage=usage) for _ in range(max(1, *(i[3] for i in items)))]
        n = 0
        try:
            for code, entry, consts, n_bind, label in items:
                if stop.is_set():
                    break
                compute = {"module": dev.create_shader_module(code=code, label=label), "entry_point": entry}
                if consts:
                    compute["constants"] = {k: float(v) if isinstance(v, float) else int(v) for k, v in consts.items()}
                p = dev.create_compute_pipeline(layout="auto", compute=compute, label=label)
                bg = dev.create_bind_group(layout=p.get_bind_group_layout(0), entries=[
                    {"binding": i, "resource": {"buffer": bufs[i], "offset": 0, "size": size}} for i in range(n_bind)])
                enc = dev.create_command_encoder()
                cp = enc.begin_compute_pass()
                cp.set_pipeline(p)
                cp.set_bind_group(0, bg)
                cp.dispatch_workgroups(1, 1, 1)
                cp.end()
                dev.queue.submit([enc.finish()])
                dev.queue.read_buffer(bufs[0], 0, 4)      # waits: compiled (one at a time: the cache is written)
                n += 1
        finally:
            dev.destroy()
        return n

    def _create_buffer(self, size, usage, label):
        return self.device.create_buffer(size=size, usage=usage, label=label)

    def _write(self, raw, offset, data, data_offset, size):
        mv = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else memoryview(data)
        if size is None:
            size = len(mv) - data_offset
        self.queue.write_buffer(raw, offset, mv[data_offset:data_offset + size])
        return size

    async def _read(self, raw, offset, size):
        return bytes(self.queue.read_buffer(raw, offset, size))

    async def _pipeline(self, code, entry, constants, label):
        module = self.device.create_shader_module(code=code, label=label)
        compute = {"module": module, "entry_point": entry}
        if constants:
            compute["constants"] = {k: float(v) if isinstance(v, float) else int(v) for k, v in constants.items()}
        return self.device.create_compute_pipeline(layout="auto", compute=compute, label=label)

    def _bind_group(self, raw_pipeline, entries):
        layout = raw_pipeline.get_bind_group_layout(0)
        return self.device.create_bind_group(layout=layout, entries=[
            {"binding": i, "resource": {"buffer": b, "offset": off, "size": size}}
            for i, (b, off, size) in enumerate(entries)])

    def _commands(self, items):
        enc = self.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        for p, bg, (x, y, z) in items:
            cp.set_pipeline(p.raw)
            cp.set_bind_group(0, bg)
            cp.dispatch_workgroups(x, y, z)
        cp.end()
        return enc.finish()

    def _run_list(self, items):
        self.queue.submit([self._commands(items)])
        return 1

    def _encode(self, plan):
        return self._commands(plan.items)

    def _submit(self, raw):
        self.queue.submit([raw])

    async def _time_plan(self, plan, repeats):
        """One pass per run, timestampWrites around each, one submission; ns -> s.
        (wgpu-native resolves timestamps in nanoseconds: wgpu's timestamp normalisation.)"""
        import struct
        from bitweb.gpu import COPY_SRC, QUERY_RESOLVE
        n = 2 * repeats
        qs = self.device.create_query_set(type="timestamp", count=n)
        out = self.create_buffer(8 * n, QUERY_RESOLVE | COPY_SRC, label="timestamps")
        try:
            enc = self.device.create_command_encoder()
            for r in range(repeats):
                cp = enc.begin_compute_pass(timestamp_writes={
                    "query_set": qs, "beginning_of_pass_write_index": 2 * r, "end_of_pass_write_index": 2 * r + 1})
                for p, bg, (x, y, z) in plan.items:
                    cp.set_pipeline(p.raw)
                    cp.set_bind_group(0, bg)
                    cp.dispatch_workgroups(x, y, z)
                cp.end()
            enc.resolve_query_set(qs, 0, n, out.raw, 0)
            self.queue.submit([enc.finish()])
            t = struct.unpack(f"<{n}Q", bytes(self.queue.read_buffer(out.raw, 0, 8 * n)))
        finally:
            out.destroy()
            qs.destroy()
        return [(t[2 * r + 1] - t[2 * r]) * 1e-9 for r in range(repeats)]

    async def _sync(self):
        # queue.on_submitted_work_done_sync() fails in wgpu-py 0.32 (a cffi callback type
        # mismatch); a 4-byte read waits for every earlier submission the same way.
        if getattr(self, "_sync_buf", None) is None:
            from bitweb.gpu import COPY_DST, COPY_SRC
            self._sync_buf = self.create_buffer(4, COPY_SRC | COPY_DST, label="sync")   # kept: counted live
        self.queue.read_buffer(self._sync_buf.raw, 0, 4)


def _probe_caps(device, features) -> Caps:
    caps = Caps(subgroups="subgroups" in features, shader_f16="shader-f16" in features,
                timestamps="timestamp-query" in features, subgroup_matrix=False)
    # dot4I8Packed: compile a one-line probe (naga supports it; say so only if it compiles).
    try:
        device.create_shader_module(code="@group(0) @binding(0) var<storage, read_write> o: array<i32>;\n"
                                    "@compute @workgroup_size(1) fn main() { o[0] = dot4I8Packed(0x01020304u, 0x01010101u); }")
        caps.dot4 = True
    except Exception:
        caps.dot4 = False
    return caps


async def request_device(mask=(), caps=None) -> NativeDevice:
    """mask / caps: bitweb.gpu.request_device's (checked there): a capped limit is requested at
    most at its cap (wgpu-native 0.32 on lavapipe grants it but does not check workgroup memory
    against it; bitweb's own checks read dev.limits)."""
    try:
        import wgpu
    except ImportError as e:  # pragma: no cover - the venv always has it
        raise NoAdapterError(f"wgpu-py is not installed ({e}); pip install wgpu") from e
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as e:
        raise NoAdapterError(f"no WebGPU adapter found by wgpu-py ({e}). On Debian install "
                             f"mesa-vulkan-drivers for the CPU (lavapipe) adapter.") from e
    if adapter is None:
        raise NoAdapterError("no WebGPU adapter found by wgpu-py. On Debian install mesa-vulkan-drivers.")
    have = set(adapter.features)
    want = [f for f in WANTED_FEATURES if _NATIVE_FEATURE.get(f, f) in have and f not in mask]
    alim = adapter.limits
    limits = {}
    for name in WANTED_LIMITS:
        k = _hyphen(name)
        if k in alim:
            limits[k] = min(alim[k], caps[name]) if caps and name in caps else alim[k]
    try:
        device = adapter.request_device_sync(required_features=[_NATIVE_FEATURE.get(f, f) for f in want],
                                             required_limits=limits, label="bitweb")
    except Exception as e:
        raise GPUError(f"the adapter refused a device with features {want} and limits {limits}: {e}") from e
    caps_ = _probe_caps(device, set(want))
    caps_.dot4 = caps_.dot4 and DOT4_FEATURE not in mask
    info = adapter.info
    caps_.subgroup_min = int(info.get("subgroup_min_size", 0) or 0)
    caps_.subgroup_max = int(info.get("subgroup_max_size", 0) or 0)
    dev = NativeDevice(adapter, device, want, caps_)
    dev.requested = ([_NATIVE_FEATURE.get(f, f) for f in want], limits)     # (for _warm's second device)
    dev.limits = capped(dev.limits, dict(caps or {}))
    return dev
