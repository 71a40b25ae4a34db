"""Device's pipelines (stdlib only): compiled once per (shader, entry, constants, defines), WGSL
specialised for the device by bitweb.shaders, many in flight at once (`pipelines`), each checked
against the device's workgroup limits before it compiles (`check_pipelines`). A compile asked for
while the same key is in flight waits for that one; a failed compile is not cached. `warm`: where
the driver compiles at a pipeline's first dispatch (lavapipe), compile pipelines off this device's
queue, so a reply decoding meanwhile does not wait behind them."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass

from bitweb.gpu.errors import GPUError, LimitsError, ShaderError



@dataclass
class Pipeline:
    raw: object
    key: tuple
    n_bindings: int = 0


class Pipelines:
    """The pipeline half of bitweb.gpu.Device (a mixin: it uses check_alive, limits, counters and
    the backend's _pipeline; Device.__post_init__ makes _pipelines and _codes)."""

    # whether compiles run beside the caller (the browser's createComputePipelineAsync, in the GPU
    # process) rather than blocking it (natively): then Engine.load has its prefill kernels in flight
    # right behind the decode kernels
    compiles_in_background = False

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

    @property
    def compiles_at_dispatch(self) -> bool:
        """Whether this adapter compiles a pipeline's code at its first dispatch rather than at
        createComputePipeline (lavapipe: llvmpipe builds the LLVM code when a dispatch first runs it,
        on the queue's thread, seconds a kernel). The backend says (_compiles_at_dispatch)."""
        return self._compiles_at_dispatch()

    async def warm(self, steps) -> int:
        """Have the driver compile `steps`' pipelines (kernels.Step: shader, entry, constants,
        defines, bind) without this device's queue running them, where it compiles at the first
        dispatch (compiles_at_dispatch) and can share the result: natively on lavapipe a second
        device of the same adapter, in a thread, dispatches each pipeline once (one workgroup over
        scratch buffers) and Mesa's shader cache hands the compiled code to this device's first
        dispatch. Returns how many were warmed (0 where there is nothing to do); stops between
        pipelines when cancelled. Pipelines are compiled (pipeline()) here first, so a bad kernel
        fails as it would without warm."""
        if not self.compiles_at_dispatch:
            return 0
        items = []
        for st in steps:
            key = self.pipeline_key(st.shader, st.entry, st.constants, st.defines)
            await self.pipeline(*key[:2], dict(key[2]), dict(key[3]))
            items.append((self._code(key), key[1], dict(key[2]), len(st.bind), f"{key[0]}:{key[1]}"))
        items = list({(i[4], i[0], tuple(sorted(i[2].items()))): i for i in items}.values())
        return await self._warm(items) if items else 0

    def _compiles_at_dispatch(self) -> bool:
        return False

    async def _warm(self, items) -> int:
        """items: (WGSL, entry, constants, number of bindings, label) per distinct pipeline."""
        return 0

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
