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
path), host_calls (calls from Python into the backend), writes, reads,
pipelines (compiled).

Live buffers (dev.live_buffers, dev.live_bytes; dev.live() as a dict): GPU buffers created and
not yet destroyed, through create_buffer and the backends' own helpers (the native sync buffer,
timestamp buffers, the browser's readback staging buffers in web/gpu.mjs). Loading a model and
closing it returns both to where they were; tests and the app's soak check use them to find leaks.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bitweb.options import SOFTWARE_ADAPTERS

# GPUBufferUsage flags
MAP_READ = 0x0001
MAP_WRITE = 0x0002
COPY_SRC = 0x0004
COPY_DST = 0x0008
UNIFORM = 0x0040
STORAGE = 0x0080
QUERY_RESOLVE = 0x0200

DEFAULT_USAGE = STORAGE | COPY_DST | COPY_SRC

# Features we ask for when the adapter has them (WebGPU names).
WANTED_FEATURES = ("shader-f16", "subgroups", "timestamp-query")
# Limits we raise to the adapter's maximum (defaults are small: 128 MiB bindings).
WANTED_LIMITS = ("maxBufferSize", "maxStorageBufferBindingSize", "maxStorageBuffersPerShaderStage",
                 "maxComputeWorkgroupStorageSize", "maxComputeInvocationsPerWorkgroup",
                 "maxComputeWorkgroupSizeX", "maxComputeWorkgroupsPerDimension")
# WebGPU's guaranteed minimum of each of them: what every adapter has, and about what a phone's GPU
# offers (the app's ?cap=mobile asks for these; web/cap.mjs has the same table).
WEBGPU_MINIMUM = {"maxBufferSize": 268435456, "maxStorageBufferBindingSize": 134217728,
                  "maxStorageBuffersPerShaderStage": 8, "maxComputeWorkgroupStorageSize": 16384,
                  "maxComputeInvocationsPerWorkgroup": 256, "maxComputeWorkgroupSizeX": 256,
                  "maxComputeWorkgroupsPerDimension": 65535}
# What request_device(mask_features=...) may turn off, to act as a GPU without it: the features above
# and WGSL's language feature for dot4I8Packed (Caps.dot4).
DOT4_FEATURE = "packed_4x8_integer_dot_product"
MASKABLE = WANTED_FEATURES + (DOT4_FEATURE,)


class GPUError(RuntimeError):
    """Any GPU failure with a message a person can act on."""


class NoAdapterError(GPUError):
    pass


class LimitsError(GPUError):
    pass


class DeviceLostError(GPUError):
    pass


class ShaderError(GPUError):
    pass


@dataclass
class Caps:
    """What the device can do, decided once at start-up and logged."""
    subgroups: bool = False
    shader_f16: bool = False
    dot4: bool = False              # WGSL dot4I8Packed (packed_4x8_integer_dot_product)
    timestamps: bool = False
    subgroup_matrix: bool = False   # reported only: no kernel uses it yet (none could be checked)
    subgroup_min: int = 0           # as reported (may be wrong on wgpu-native 0.32)
    subgroup_max: int = 0

    def summary(self) -> str:
        on = [k for k in ("subgroups", "shader_f16", "dot4", "timestamps", "subgroup_matrix") if getattr(self, k)]
        return ", ".join(on) or "none"


# Adapter names of CPU rasterisers (WebGPU / Vulkan / D3D software implementations) -> the name said.
# The one list (bitweb.options): the kernels' default tunes ask the same test (bitweb.kernels.rasteriser).
SOFTWARE_NAMES = SOFTWARE_ADAPTERS


def software_reason(info: dict, fallback: bool = False) -> str | None:
    """Why an adapter is a software one: a CPU rasteriser's name in its vendor / architecture /
    device / description, the browser's isFallbackAdapter (`fallback`), or wgpu's adapter_type
    "CPU". None: a hardware GPU as far as the adapter tells."""
    text = " ".join(str(info.get(k, "")) for k in ("vendor", "architecture", "device", "description")).lower()
    for key, name in SOFTWARE_NAMES.items():
        if key in text:
            return name
    if fallback:
        return "fallback adapter"
    if str(info.get("adapter_type", "")).lower() == "cpu":
        return "CPU adapter"
    return None


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
class Pipeline:
    raw: object
    key: tuple
    n_bindings: int = 0


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
class Device:
    """Backend-independent part; subclasses implement the `_` primitives."""
    backend: str = ""
    info: dict = field(default_factory=dict)          # vendor, architecture, device, description
    features: frozenset = frozenset()
    limits: dict = field(default_factory=dict)        # camelCase -> int, as granted
    caps: Caps = field(default_factory=Caps)
    counters: dict = field(default_factory=lambda: dict.fromkeys(
        ("dispatches", "runs", "plan_runs", "plan_dispatches", "direct_dispatches",
         "host_calls", "writes", "write_bytes", "reads", "pipelines"), 0))
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

    async def read(self, buf: Buffer, offset: int = 0, size: int | None = None) -> bytes:
        self.check_alive()
        size = buf.size - offset if size is None else size
        self.counters["reads"] += 1
        self.counters["host_calls"] += 1
        return await self._read(buf.raw, int(offset), int(size))

    # ---- pipelines ----------------------------------------------------------
    @staticmethod
    def pipeline_key(shader: str, entry: str = "main", constants: dict | None = None,
                     defines: dict | None = None) -> tuple:
        """The cache key of a pipeline: (shader, entry, sorted constants, sorted defines)."""
        return (shader, entry, tuple(sorted((constants or {}).items())), tuple(sorted((defines or {}).items())))

    async def pipeline(self, shader: str, entry: str = "main", constants: dict | None = None,
                       defines: dict | None = None) -> Pipeline:
        """Compile (once) `shaders/<shader>.wgsl` specialised for this device."""
        self.check_alive()
        key = self.pipeline_key(shader, entry, constants, defines)
        while True:
            p = self._pipelines.get(key)
            if isinstance(p, Pipeline):
                return p
            if p is None:
                break
            try:                               # in flight (pipelines() or another caller): wait for it
                return await asyncio.shield(p)
            except asyncio.CancelledError:
                if not p.cancelled():          # this caller was cancelled
                    raise
                                               # that compile was cancelled: compile it here
        fut = self._pipelines[key] = asyncio.get_running_loop().create_future()
        try:
            p = await self._compile(key)
        except BaseException as e:
            del self._pipelines[key]           # not cached: asked again, it compiles again
            if isinstance(e, asyncio.CancelledError):
                fut.cancel()
            else:
                fut.set_exception(e)
                fut.exception()                # retrieved: no "never retrieved" warning when no one waits
            raise
        self._pipelines[key] = p
        fut.set_result(p)
        return p

    async def pipelines(self, keys, on_done=None) -> list:
        """Compile every (shader, entry, constants, defines) of keys not compiled yet, all at once
        (in the browser every createComputePipelineAsync is in flight together). on_done(done,
        total) after each distinct pipeline settles (once, with done = total, when all are cached). Returns the Pipelines in keys' order; the
        first failure is raised once every compile has settled (none is left running)."""
        keys = [self.pipeline_key(*k) for k in keys]
        distinct = list(dict.fromkeys(keys))
        todo = [k for k in distinct if not isinstance(self._pipelines.get(k), Pipeline)]
        count = [len(distinct) - len(todo)]

        async def one(k):
            try:
                return await self.pipeline(k[0], k[1], dict(k[2]), dict(k[3]))
            finally:
                count[0] += 1
                if on_done:
                    on_done(count[0], len(distinct))
        if not todo and distinct and on_done:     # all cached: say so once
            on_done(len(distinct), len(distinct))
        res = await asyncio.gather(*[one(k) for k in todo], return_exceptions=True)
        for r in res:
            if isinstance(r, BaseException):
                raise r
        return [self._pipelines[k] for k in keys]

    def _code(self, key) -> str:
        """The WGSL of a pipeline key, specialised for this device (cached per shader and defines)."""
        from bitweb import shaders
        shader, _, _, defs = key
        if (shader, defs) not in self._codes:
            self._codes[(shader, defs)] = shaders.specialise(shaders.source(shader), self, dict(defs), shader)
        return self._codes[(shader, defs)]

    def check_pipelines(self, keys) -> None:
        """Raise LimitsError naming the kernel and the limit when a pipeline of `keys` ((shader, entry,
        constants, defines) as for pipelines()) needs more workgroup memory, or more invocations per
        workgroup, than this device allows (shaders.workgroup_use; WebGPU would refuse to compile
        it). Called by the engine before it uploads anything, and before every compile."""
        for key in dict.fromkeys(self.pipeline_key(*k) for k in keys):
            self._check_key(key)

    def _check_key(self, key) -> None:
        """check_pipelines for one pipeline_key."""
        from bitweb import shaders
        shader, entry, consts, _ = key
        try:
            use = shaders.workgroup_use(self._code(key), entry, dict(consts))
        except shaders.WGSLValueError:
            return                             # (not evaluable here: the compile says what is wrong)
        what = f"kernel {shader}:{entry} (constants {dict(consts)})"
        storage = int(self.limits.get("maxComputeWorkgroupStorageSize", 16384))
        if use["storage"] > storage:
            raise LimitsError(f"{what} needs {use['storage']} bytes of workgroup memory; this GPU allows "
                              f"maxComputeWorkgroupStorageSize = {storage} (short by {use['storage'] - storage} bytes)")
        x, y, z = use["size"]
        invocations = int(self.limits.get("maxComputeInvocationsPerWorkgroup", 256))
        if x * y * z > invocations:
            raise LimitsError(f"{what} runs {x * y * z} invocations per workgroup; this GPU allows "
                              f"maxComputeInvocationsPerWorkgroup = {invocations}")
        size_x = int(self.limits.get("maxComputeWorkgroupSizeX", 256))
        if x > size_x:
            raise LimitsError(f"{what} has workgroup size x = {x}; this GPU allows maxComputeWorkgroupSizeX = {size_x}")

    async def _compile(self, key) -> Pipeline:
        shader, entry, consts, defs = key
        self._check_key(key)
        code = self._code(key)
        try:
            raw = await self._pipeline(code, entry, dict(consts), f"{shader}:{entry}")
        except GPUError:
            raise
        except Exception as e:
            raise ShaderError(f"shader '{shader}' entry '{entry}' (constants {dict(consts)}, "
                              f"defines {dict(defs)}) failed to compile: {e}") from e
        self.counters["pipelines"] += 1
        return Pipeline(raw, key)

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


def check_weaker(mask_features=(), cap_limits=None) -> tuple[tuple, dict]:
    """(mask, caps) checked: mask a tuple of MASKABLE names, caps {WANTED_LIMITS name: positive int}.
    GPUError naming the bad entry."""
    mask = tuple(sorted(set(mask_features or ())))
    for f in mask:
        if f not in MASKABLE:
            raise GPUError(f"mask_features: {f!r} is not a feature bitweb uses (one of {', '.join(MASKABLE)})")
    caps = dict(cap_limits or {})
    for k, v in caps.items():
        if k not in WANTED_LIMITS:
            raise GPUError(f"cap_limits: {k!r} is not a limit bitweb uses (one of {', '.join(WANTED_LIMITS)})")
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise GPUError(f"cap_limits: {k} must be a positive integer (got {v!r})")
    return mask, caps


def capped(limits: dict, caps: dict) -> dict:
    """limits with each capped one at most its cap (a limit the device does not report is the cap)."""
    out = dict(limits)
    for k, v in caps.items():
        out[k] = min(int(v), int(out.get(k, v)))
    return out


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


def check_fits(dev: Device, need_binding: int, need_buffer: int | None = None, what: str = "model") -> None:
    """Raise LimitsError naming the limit and the shortfall when a model cannot run on dev."""
    if need_binding > dev.max_binding:
        raise LimitsError(f"{what} needs a storage binding of {need_binding} bytes; this GPU allows "
                          f"maxStorageBufferBindingSize = {dev.max_binding} (short by {need_binding - dev.max_binding} bytes)")
    if need_buffer is not None and need_buffer > dev.max_buffer:
        raise LimitsError(f"{what} needs a buffer of {need_buffer} bytes; this GPU allows "
                          f"maxBufferSize = {dev.max_buffer} (short by {need_buffer - dev.max_buffer} bytes)")
