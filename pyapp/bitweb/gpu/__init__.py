"""One small WebGPU interface, two backends (stdlib only).

    dev = await request_device()                 # "native" (wgpu-py) or "browser" (pyodide)
    buf = dev.create_buffer(nbytes, label="x")   # STORAGE | COPY_DST | COPY_SRC by default
    dev.write_buffer(buf, 0, data)               # bytes / memoryview / numpy / JS ArrayBuffer
    pipe = await dev.pipeline("bitlinear", "gemv_i2s", constants={"WG": 64}, defines={"A8": True})
    pipes = await dev.pipelines([(shader, entry, constants, defines), ...])   # many, all in flight at once
    bg = dev.bind_group(pipe, [wbuf, xbuf, (ybuf, 0, 4096)])   # binding i = entry i
    dev.run([(pipe, bg, (rows, 1, 1))])          # one encoder, one pass, one submit
    plan = dev.plan([...]); dev.run(plan)        # prepared once, replayed with O(1) host calls
    cmd = dev.encode(plan); ...; dev.run(cmd)    # encoded ahead (while the GPU is busy), submitted once
    data = await dev.read(buf, 0, 4)             # bytes
    dev.push_error_scope("out-of-memory"); ...; msg = await dev.pop_error_scope()   # None: no error
    dev.on_lost(lambda reason, message: ...); dev.destroy()    # device loss (dev.lost: why, or None)
    secs = await dev.time_plan(plan, repeats=10) # GPU seconds per run (median), for benchmarks

Names follow WebGPU (limits are camelCase as in JS: maxStorageBufferBindingSize). The limits the
engine sizes things by are read in one place each, with WebGPU's defaults: dev.max_binding
(maxStorageBufferBindingSize), dev.max_buffer (maxBufferSize), dev.max_storage_buffers
(maxStorageBuffersPerShaderStage).
Features are WebGPU names; wgpu-native's "subgroup" is reported as "subgroups".
Pipelines are cached by (shader, entry, constants, defines). Shader sources are
specialised per device by bitweb.shaders (subgroups, f16, ...). `pipelines(keys)` compiles many
at once: in the browser every createComputePipelineAsync is in flight together (the GPU process
compiles them while the page goes on: the engine uploads weights meanwhile); wgpu-native has no
asynchronous pipeline creation (wgpu-py 0.32 creates them synchronously), so natively it is the
same as one after another. A compile asked for while the same key is in flight waits for that one;
a failed compile is not cached.

`dev.software`: why the adapter is taken to be a CPU rasteriser ("SwiftShader", "llvmpipe",
"fallback adapter" ...), or None for a hardware GPU (software_reason).

Counters (dev.counters): dispatches, runs (submits), plan_runs, plan_dispatches
(replayed: the fast path), direct_dispatches (encoded from a list: the slow
path), host_calls (calls from Python into the backend), writes, write_bytes, reads, read_bytes,
pipelines (compiled).

Live buffers (dev.live_buffers, dev.live_bytes; dev.live() as a dict): GPU buffers created and
not yet destroyed, through create_buffer and the backends' own helpers (the native sync buffer,
timestamp buffers, the browser's readback staging buffers in web/gpu.mjs). Loading a model and
closing it returns both to where they were; tests and the app's soak check use them to find leaks.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bitweb.gpu.caps import (DOT4_FEATURE, MASKABLE, SOFTWARE_NAMES, WANTED_FEATURES, WANTED_LIMITS,  # noqa: F401
                             WEBGPU_MINIMUM, Caps, capped, check_fits, check_weaker, software_reason)
from bitweb.gpu.errors import DeviceLostError, GPUError, LimitsError, NoAdapterError, ShaderError  # noqa: F401
from bitweb.gpu.pipelines import Pipeline, Pipelines

# GPUBufferUsage flags
MAP_READ = 0x0001
MAP_WRITE = 0x0002
COPY_SRC = 0x0004
COPY_DST = 0x0008
UNIFORM = 0x0040
STORAGE = 0x0080
QUERY_RESOLVE = 0x0200

DEFAULT_USAGE = STORAGE | COPY_DST | COPY_SRC
ERROR_FILTERS = ("out-of-memory", "validation", "internal")     # GPUErrorFilter


@dataclass
class Buffer:
    """A GPU buffer: the backend object plus its size, usage and label.

    destroy() frees it once (a second call does nothing) and leaves the device's live count."""
    raw: object
    size: int
    usage: int
    label: str = ""
    dev: object = field(default=None, repr=False, compare=False)

    def destroy(self):
        if self.raw is None:
            return
        raw, self.raw = self.raw, None
        try:
            raw.destroy()
        except Exception:
            pass
        if self.dev is not None:
            self.dev._live_n -= 1
            self.dev._live_bytes -= self.size


@dataclass
class Plan:
    """A prepared list of dispatches. `raw` is the backend's form (JS arrays in the browser)."""
    items: list
    raw: object = None
    n_dispatches: int = 0


@dataclass
class Encoded:
    """One run of a plan encoded ahead (Device.encode), for one dev.run(encoded)."""
    plan: Plan
    raw: object = None               # the backend's command buffer (None: encoded at submit)
    used: bool = False


class _SyncWhenAwaited:
    """Device.fence's default: dev.sync() run when awaited (nothing runs when it never is)."""

    def __init__(self, dev):
        self.dev = dev

    def __await__(self):
        return self.dev._sync().__await__()


@dataclass
class Device(Pipelines):
    """Backend-independent part; subclasses implement the `_` primitives."""
    backend: str = ""
    info: dict = field(default_factory=dict)          # vendor, architecture, device, description
    features: frozenset = frozenset()
    limits: dict = field(default_factory=dict)        # camelCase -> int, as granted
    caps: Caps = field(default_factory=Caps)
    counters: dict = field(default_factory=lambda: dict.fromkeys(
        ("dispatches", "runs", "plan_runs", "plan_dispatches", "direct_dispatches",
         "host_calls", "writes", "write_bytes", "reads", "read_bytes", "pipelines"), 0))
    lost: str | None = None
    log: object = None
    fallback: bool = False                            # the adapter says it is a fallback (software) one
    masked: tuple = ()                                # features turned off on request (request_device)
    capped: dict = field(default_factory=dict)        # limits lowered on request: {name: at most}

    def __post_init__(self):
        self._pipelines: dict = {}
        self._codes: dict = {}          # (shader, defines) -> WGSL specialised for this device
        self._live_n = 0                # buffers made by create_buffer and not destroyed
        self._live_bytes = 0
        self._scopes: list = []         # error scope filters pushed and not popped
        self._lost_fns: list = []       # on_lost callbacks still to call
        self._lost_info = None          # (reason, message) once lost

    # ---- errors and loss (WebGPU's pushErrorScope / popErrorScope, lost, destroy) ----
    def push_error_scope(self, filter: str) -> None:
        """Capture the errors of `filter` ("out-of-memory", "validation" or "internal") of the calls
        from here to pop_error_scope (WebGPU pushErrorScope). Natively wgpu-py raises each error at
        its call, so a scope there captures nothing."""
        if filter not in ERROR_FILTERS:
            raise GPUError(f"push_error_scope: {filter!r} is not an error filter (one of {', '.join(ERROR_FILTERS)})")
        self._scopes.append(filter)
        self._push_error_scope(filter)

    async def pop_error_scope(self) -> str | None:
        """The message of the first error the innermost scope captured, or None (WebGPU popErrorScope)."""
        if not self._scopes:
            raise GPUError("pop_error_scope: no error scope is open")
        self._scopes.pop()
        return await self._pop_error_scope()

    def on_lost(self, fn) -> None:
        """Call fn(reason, message) once, when the device is lost (WebGPU device.lost; reason
        "destroyed" after destroy()); at once when it is lost already."""
        if self._lost_info is not None:
            fn(*self._lost_info)
        else:
            self._lost_fns.append(fn)

    def destroy(self) -> None:
        """Destroy the device (WebGPU destroy()): its buffers are freed and it is lost, reason
        "destroyed" (natively at once; in the browser when device.lost resolves)."""
        if self._lost_info is None:
            self._destroy()

    def _set_lost(self, reason: str, message: str = "") -> None:
        """The backend's news that the device is lost: dev.lost says why, the on_lost callbacks run."""
        if self._lost_info is not None:
            return
        self._lost_info = (reason, message)
        self.lost = f"{reason}: {message}" if message else reason
        fns, self._lost_fns = self._lost_fns, []
        for fn in fns:
            fn(reason, message)

    # ---- checks -----------------------------------------------------------
    def check_alive(self):
        if self.lost is not None:
            raise DeviceLostError(f"GPU device lost: {self.lost}. Reload the model to continue.")

    @property
    def software(self) -> str | None:
        """Why this adapter is a CPU rasteriser (software_reason), or None for a hardware GPU."""
        return software_reason(self.info, self.fallback)

    @property
    def max_binding(self) -> int:
        return int(self.limits.get("maxStorageBufferBindingSize", 128 << 20))

    @property
    def max_buffer(self) -> int:
        return int(self.limits.get("maxBufferSize", 256 << 20))

    @property
    def max_storage_buffers(self) -> int:
        return int(self.limits.get("maxStorageBuffersPerShaderStage", 8))

    # ---- buffers ------------------------------------------------------------
    def create_buffer(self, size: int, usage: int = DEFAULT_USAGE, label: str = "") -> Buffer:
        self.check_alive()
        size = max(4, (int(size) + 3) // 4 * 4)
        if size > self.max_buffer:
            raise LimitsError(f"buffer '{label}' needs {size} bytes but the device allows "
                              f"maxBufferSize = {self.max_buffer} (short by {size - self.max_buffer})")
        buf = Buffer(self._create_buffer(size, usage, label), size, usage, label, self)
        self._live_n += 1
        self._live_bytes += size
        return buf

    def live(self) -> dict:
        """{"live_buffers", "live_bytes"}: GPU buffers alive now (created, not destroyed),
        the backend's own helper buffers included."""
        n, b = self._helper_live()
        return {"live_buffers": self._live_n + n, "live_bytes": self._live_bytes + b}

    @property
    def live_buffers(self) -> int:
        return self.live()["live_buffers"]

    @property
    def live_bytes(self) -> int:
        return self.live()["live_bytes"]

    def write_buffer(self, buf: Buffer, offset: int, data, data_offset: int = 0, size: int | None = None):
        """Copy `data` (bytes-like, numpy, or a JS ArrayBuffer/TypedArray in the browser) into buf."""
        self.check_alive()
        n = self._write(buf.raw, int(offset), data, int(data_offset), size)
        self.counters["writes"] += 1
        self.counters["write_bytes"] += n or 0
        self.counters["host_calls"] += 1

    async def upload(self, buf: Buffer, offset: int, src, src_offset: int, size: int,
                     chunk: int = 16 << 20, on_bytes=None) -> None:
        """Stream `size` bytes of a source into buf at offset, one chunk at a time.

        src: anything with `read(offset, n) -> bytes` (gguf.FileSource, BytesSource) natively;
        in the browser also a JS Blob/File, streamed by JS straight to writeBuffer
        (the bytes never enter the wasm heap). A final partial word is zero-padded.
        """
        self.check_alive()
        n_calls = await self._upload(buf.raw, int(offset), src, int(src_offset), int(size), int(chunk), on_bytes)
        self.counters["writes"] += n_calls
        self.counters["write_bytes"] += size
        self.counters["host_calls"] += 1

    async def upload_many(self, items, src, chunk: int = 16 << 20, on_bytes=None) -> None:
        """upload() of several ranges of one source, in order: items = [(buf, offset, src_offset,
        size)]. In the browser one call into JS for them all (a load's tensors one at a time cost a
        Python <-> JS round trip each: tens of ms of the worker's CPU on a small model)."""
        self.check_alive()
        items = [(b.raw, int(o), int(so), int(n)) for b, o, so, n in items]
        n_calls = await self._upload_many(items, src, int(chunk), on_bytes)
        self.counters["writes"] += n_calls
        self.counters["write_bytes"] += sum(n for *_, n in items)
        self.counters["host_calls"] += 1

    async def _upload_many(self, items, src, chunk, on_bytes) -> int:
        calls = 0
        for raw, offset, src_offset, size in items:
            calls += await self._upload(raw, offset, src, src_offset, size, chunk, on_bytes)
        return calls

    async def _upload(self, raw, offset, src, src_offset, size, chunk, on_bytes) -> int:
        calls = 0
        for pos in range(0, size, chunk):
            n = min(chunk, size - pos)
            data = src.read(src_offset + pos, n)
            if len(data) % 4:
                data = bytes(data) + bytes(4 - len(data) % 4)
            self._write(raw, offset + pos, data, 0, None)
            calls += 1
            if on_bytes:
                on_bytes(n)
        return calls

    async def read(self, buf: Buffer, offset: int = 0, size: int | None = None, then=None) -> bytes:
        """The bytes [offset, offset + size) of buf once the work submitted so far has written them.
        then: work (a Plan, as dev.run takes) submitted right after the read is queued, so it runs
        while the bytes come back (browser: the map waits only for the copy's submission);
        natively after the read has returned (wgpu-py reads synchronously)."""
        self.check_alive()
        size = buf.size - offset if size is None else size
        self.counters["reads"] += 1
        self.counters["read_bytes"] += size
        self.counters["host_calls"] += 1
        if then is None:
            return await self._read(buf.raw, int(offset), int(size))
        return await self._read_then(buf.raw, int(offset), int(size), then)

    async def _read_then(self, raw, offset, size, then):
        out = await self._read(raw, offset, size)
        self.run(then)
        return out

    async def read_ranges(self, ranges):
        """The bytes of several ranges [(buf, offset, size)] (each a multiple of 4 bytes), one after
        another, once the work submitted so far has written them: natively bytes; in the browser a
        JS Uint8Array (web/gpu.mjs readRanges: one copy pass, one map; the bytes stay out of the
        wasm heap). For saving the KV cache (Engine.export_kv)."""
        self.check_alive()
        items = [(b.raw, int(o), int(n)) for b, o, n in ranges]
        for _, o, n in items:
            if o % 4 or n % 4:
                raise ValueError(f"read_ranges: offset {o} / size {n} are not multiples of 4")
        self.counters["reads"] += 1
        self.counters["read_bytes"] += sum(n for *_, n in items)
        self.counters["host_calls"] += 1
        return await self._read_ranges(items)

    async def _read_ranges(self, items):
        return b"".join([await self._read(raw, o, n) for raw, o, n in items])

    def bind_group(self, pipeline: Pipeline, entries: list):
        """entries[i] is binding i: a Buffer or (Buffer, offset, size)."""
        self.check_alive()
        norm = []
        for i, e in enumerate(entries):
            buf, off, size = (e, 0, e.size) if isinstance(e, Buffer) else e
            if size > self.max_binding:
                raise LimitsError(f"binding {i} of {pipeline.key[0]}:{pipeline.key[1]} is {size} bytes, over "
                                  f"maxStorageBufferBindingSize = {self.max_binding}")
            norm.append((buf.raw, int(off), int(size)))
        return self._bind_group(pipeline.raw, norm)

    # ---- running ------------------------------------------------------------
    def plan(self, items: list) -> Plan:
        """Prepare a list of (pipeline, bind_group, (x, y, z)) for replay."""
        items = [(p, bg, tuple(w) + (1,) * (3 - len(w))) for p, bg, w in items]
        return Plan(items, self._prepare(items), len(items))

    def encode(self, plan: Plan) -> Encoded:
        """Encode one run of `plan` now, for dev.run(encoded) later (once): the host's share of a
        step done while the GPU is still busy with the previous one. Native: a finished command
        buffer (wgpu-py encodes each dispatch through an FFI call, ~10 us each: 1.6 ms for 2B4T's
        157); counted as a host call. Browser: nothing to do ahead (JS `replay` encodes and submits
        in one call), no host call."""
        self.check_alive()
        raw = self._encode(plan)
        if raw is not None:
            self.counters["host_calls"] += 1
        return Encoded(plan, raw)

    def run(self, work) -> None:
        """Encode and submit: a Plan (fast path, one host call), an Encoded plan (submit only) or a
        list (slow path)."""
        self.check_alive()
        if isinstance(work, Encoded):
            if work.used:
                raise GPUError("an encoded plan run is submitted once (encode the plan again)")
            work.used = True
            if work.raw is None:
                self._run_plan(work.plan)
            else:
                self._submit(work.raw)
            work = work.plan
        elif isinstance(work, Plan):
            self._run_plan(work)
        if isinstance(work, Plan):
            self.counters["plan_runs"] += 1
            self.counters["plan_dispatches"] += work.n_dispatches
            n = work.n_dispatches
            self.counters["host_calls"] += 1
        else:
            items = [(p, bg, tuple(w) + (1,) * (3 - len(w))) for p, bg, w in work]
            calls = self._run_list(items)
            n = len(items)
            self.counters["direct_dispatches"] += n
            self.counters["host_calls"] += calls
        self.counters["dispatches"] += n
        self.counters["runs"] += 1

    async def time_plan(self, plan: Plan, repeats: int = 10, wall: bool = False) -> float:
        """Seconds one run of `plan` takes on the device: the median over `repeats` runs.

        With timestamp-query (caps.timestamps, and wall=False) the runs are `repeats` compute
        passes in one submission, each with timestampWrites (beginningOfPassWriteIndex 2r,
        endOfPassWriteIndex 2r + 1) into one query set, resolved (resolveQuerySet) into a buffer
        read once: GPU time only. Else (wall=True, or no timestamps) wall clock: 3 batches of
        ceil(repeats / 3) runs, each batch encoded in one pass, one submission, then a sync;
        per-run time = batch time / runs, median of the batches (includes submit + sync latency,
        amortised over the batch). One warm-up run comes first in both cases.
        """
        import time
        self.check_alive()
        if not isinstance(plan, Plan):
            plan = self.plan(plan)
        repeats = max(1, min(int(repeats), 2048))
        self._run_plan(plan)
        await self._sync()
        if self.caps.timestamps and not wall:
            ts = await self._time_plan(plan, repeats)
        else:
            ts = []
            per = -(-repeats // 3)
            batch = Plan(plan.items * per, None, plan.n_dispatches * per)
            batch.raw = self._prepare(batch.items)
            for _ in range(3):
                t0 = time.perf_counter()
                self._run_plan(batch)
                await self._sync()
                ts.append((time.perf_counter() - t0) / per)
        ts.sort()
        n = len(ts)
        return ts[n // 2] if n % 2 else (ts[n // 2 - 1] + ts[n // 2]) / 2

    async def sync(self) -> None:
        """Wait until the queue is idle."""
        self.check_alive()
        await self._sync()

    def fence(self):
        """An awaitable that is done once the work submitted before this call has finished (the
        engine's bound on prefill chunks in flight). Browser: queue.onSubmittedWorkDone() asked now,
        so later submissions keep the GPU busy meanwhile; native: a sync when it is awaited (it
        also waits for work submitted after the fence). Never awaiting it is fine."""
        self.check_alive()
        self.counters["host_calls"] += 1
        return self._fence()

    def _fence(self):
        return _SyncWhenAwaited(self)

    def describe(self) -> str:
        i = self.info
        name = i.get("description") or i.get("device") or i.get("architecture") or "?"
        soft = f" (software: {self.software})" if self.software else ""
        weaker = f"; acting as a weaker GPU: {self.weaker}" if self.weaker else ""
        return (f"{self.backend}: {i.get('vendor', '?')} {name}{soft}; features: {self.caps.summary()}; "
                f"maxStorageBufferBindingSize {self.max_binding >> 20} MiB, maxBufferSize {self.max_buffer >> 20} MiB{weaker}")

    @property
    def weaker(self) -> str:
        """What request_device was asked to take away ("no subgroups, maxBufferSize <= 268435456"), or ""."""
        return ", ".join([f"no {f}" for f in self.masked] + [f"{k} <= {v}" for k, v in self.capped.items()])

    # ---- backend primitives (implemented by native.py / browser.py) ----------
    def _push_error_scope(self, filter): raise NotImplementedError
    async def _pop_error_scope(self): raise NotImplementedError
    def _destroy(self): raise NotImplementedError
    def _helper_live(self) -> tuple: return 0, 0   # (buffers, bytes) the backend holds itself
    def _create_buffer(self, size, usage, label): raise NotImplementedError
    def _write(self, raw, offset, data, data_offset, size): raise NotImplementedError
    async def _read(self, raw, offset, size): raise NotImplementedError
    async def _pipeline(self, code, entry, constants, label): raise NotImplementedError
    def _bind_group(self, raw_pipeline, entries): raise NotImplementedError
    def _prepare(self, items): return None
    def _run_plan(self, plan): self._run_list(plan.items)
    def _encode(self, plan): return None          # None: encoded at submit (_run_plan)
    def _submit(self, raw): raise NotImplementedError
    def _run_list(self, items) -> int: raise NotImplementedError
    async def _time_plan(self, plan, repeats) -> list: raise NotImplementedError   # seconds per run
    async def _sync(self): raise NotImplementedError


def in_browser() -> bool:
    import sys
    return sys.platform == "emscripten"


async def request_device(backend: str = "auto", log=None, mask_features=(), cap_limits=None) -> Device:
    """The best adapter's device with the adapter's limits and the wanted features.

    A weaker GPU on request (tests, `?cap=` in the app): `mask_features` (MASKABLE names) are not
    asked for, so the device has them not and the kernels take their fallbacks, and each limit of
    `cap_limits` ({name: n}) is asked for at most at n and reported at most n (a browser enforces
    the lowered limits down to WebGPU's defaults; below those, bitweb's own checks do)."""
    mask, caps = check_weaker(mask_features, cap_limits)
    if backend == "auto":
        backend = "browser" if in_browser() else "native"
    if backend == "native":
        from bitweb.gpu import native
        dev = await native.request_device(mask, caps)
    elif backend == "browser":
        from bitweb.gpu import browser
        dev = await browser.request_device(mask, caps)
    else:
        raise GPUError(f"unknown GPU backend '{backend}' (native or browser)")
    dev.masked, dev.capped = mask, caps
    dev.log = log
    if log:
        log(f"gpu: {dev.describe()}")
    return dev
