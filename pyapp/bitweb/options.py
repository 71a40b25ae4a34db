"""The options and bounds every side of bitweb shares, in one place: the activation modes, the KV
cache types, the LM-head options, the context's lower bound, the sampler's parameters and what a
request may ask of them, the speculative modes a request may ask for, the GPU features and limits
a weaker GPU may drop, the library's load options, and the words that mark a CPU rasteriser among
GPU adapters.

This module is their one source. The Python sides import it: the CLI (bitweb.commands: choices
and defaults), the engine and the numpy model (activations, LM heads), the kernels and generation
(KV cache types), the sampler (bitweb.sampling: defaults and the values its maths takes), the
request checks (bitweb.completions), the worker (bitweb.webapp: the load options through
check_load) and bitweb.gpu (features, limits, CPU rasterisers). The browser library
(web/bitweb.mjs, web/worker.mjs) and the app read DATA as build/web/options.json, which
tools/build_web.py writes. tests/test_options.py checks that each side reads these values and
keeps no copy of its own (web/bitweb.d.ts spells them as types: checked against DATA).

Load options (LOAD): the library's camelCase name -> the Python name (the one place a name is
mapped), its type and values; check_load is the Python side's one check, web/bitweb.mjs checks
the same table with the same rules and messages (tests/test_options.py runs both on the same
values). A new load option: a row here, its use in webapp (opts["python_name"]), its type in
web/bitweb.d.ts (LoadOptionName, LoadOptions); the tests name whatever is missing.

Stdlib only (a browser module). Numbers keep their type: a float bound is a float (JSON 0.0), an
integer one an int, so messages read the same in Python and JS.
"""
from __future__ import annotations

from dataclasses import dataclass

DATA = {
    # activation modes: "a8" W1.58A8 as trained (per-token int8 activations), "f32" float, "q8"
    # llama.cpp's integer path on ggml's Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 (int8 blocks of 32)
    "activations": {"default": "a8", "choices": {"a8": "W1.58A8: int8 per token (as trained)",
                                                 "f32": "float32",
                                                 "q8": "as llama.cpp: int8 blocks on ggml's Q4/Q5/Q8_0"}},
    # the KV cache's value type
    "kv_cache": {"default": "f16", "choices": {"f16": "f16: half the memory (attention computes in f32)",
                                               "f32": "f32"}},
    # re-quantize the LM head on load (default null: as in the file); the native engine's option
    "lm_head": {"default": None, "choices": {"q8_0": "the LM head's float rows as Q8_0"}},
    # positions of the KV cache a caller may ask for: at least this many
    "context": {"min": 2},
    # the sampler's parameters (bitweb.sampling.SamplingParams): default and the values its maths
    # takes (min, min_excluded: a lower bound it excludes; max; none given: any value)
    "sampler": {
        "temperature": {"integer": False, "default": 0.0, "min": 0.0},
        "top_k": {"integer": True, "default": 0, "min": 0},
        "top_p": {"integer": False, "default": 1.0, "min": 0.0, "min_excluded": True, "max": 1.0},
        "min_p": {"integer": False, "default": 0.0, "min": 0.0, "max": 1.0},
        "repeat_penalty": {"integer": False, "default": 1.0, "min": 0.0, "min_excluded": True},
        "repeat_last_n": {"integer": True, "default": 64, "min": 0},
        "seed": {"integer": True, "default": 0},
    },
    # what a create() request (and the app's sampling fields) may ask: its range (within the
    # sampler's) and the sampler parameter it sets (null: max_tokens, the reply's length)
    "request": {
        "temperature": {"integer": False, "min": 0.0, "max": 100.0, "sampler": "temperature"},
        "top_k": {"integer": True, "min": 0, "max": 1 << 30, "sampler": "top_k"},
        "top_p": {"integer": False, "min": 0.0, "min_excluded": True, "max": 1.0, "sampler": "top_p"},
        "min_p": {"integer": False, "min": 0.0, "max": 1.0, "sampler": "min_p"},
        "repetition_penalty": {"integer": False, "min": 0.0, "min_excluded": True, "max": 100.0,
                               "sampler": "repeat_penalty"},
        "seed": {"integer": True, "min": 0, "max": (1 << 53) - 1, "sampler": "seed"},
        "max_tokens": {"integer": True, "min": 1, "max": 1 << 30, "sampler": None},
    },
    # speculative decoding a create() request may ask for ({speculative: {mode}}; bitweb.speculative):
    # its modes; default null: plain decoding
    "speculative": {"default": None, "choices": {"lookup": "prompt lookup: drafts where the reply repeats "
                                                           "the conversation",
                                                 "draft": "the draft model loaded with the engine "
                                                          "(load(source, {draft}))"}},
    # the GPU features bitweb uses when the adapter has them, which maskFeatures may turn off (the
    # last is WGSL's language feature for dot4I8Packed), and the limits it raises to the adapter's
    # maximum, which capLimits may lower (bitweb.gpu MASKABLE, WANTED_LIMITS)
    "features": ["shader-f16", "subgroups", "timestamp-query", "packed_4x8_integer_dot_product"],
    "limits": ["maxBufferSize", "maxStorageBufferBindingSize", "maxStorageBuffersPerShaderStage",
               "maxComputeWorkgroupStorageSize", "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX",
               "maxComputeWorkgroupsPerDimension"],
    # a load when the loaded models and the new one do not fit the GPU memory together
    "replace": {"default": "ask", "choices": {"ask": "fail with kind no-room",
                                              "always": "unload the others first"}},
    # the ranges of a download's options (web/download.mjs takes them)
    "download": {"stallMs": {"integer": True, "min": 1, "max": 3_600_000},
                 "retries": {"integer": True, "min": 0, "max": 100},
                 "retryDelayMs": {"integer": True, "min": 0, "max": 600_000}},
    # the library's load() options (web/bitweb.mjs checks them as given, the worker's Python again
    # with check_load): the library's name -> "python": the name the Python side takes (null: the
    # worker's JS alone uses it), "type": what it is (choice: a value of DATA[of]; context: an
    # integer of at least context.min; number: above min; features / limits: names of the lists
    # above; boolean; download: an object of DATA["download"]; source: a model as load() takes one,
    # the draft: the library loads it as an engine of its own), "key": part of the key of the
    # pipeline manifest (it changes the kernels a load compiles). Unset (null): the default.
    "load": {
        "activations": {"python": "activations", "type": "choice", "of": "activations", "key": True},
        "kvCache": {"python": "kv_cache", "type": "choice", "of": "kv_cache", "key": True},
        "context": {"python": "context", "type": "context", "key": True},
        "capLimits": {"python": "cap_limits", "type": "limits", "key": True},
        "maskFeatures": {"python": "mask_features", "type": "features", "key": True},
        "gpuMemory": {"python": "gpu_memory", "type": "number", "min": 0},
        "replace": {"python": "replace", "type": "choice", "of": "replace"},
        "cache": {"python": None, "type": "boolean", "default": True},
        # the bound of the saved KV caches in OPFS (web/kvstore.mjs; cache: false saves none)
        "kvSaveBytes": {"python": None, "type": "number", "min": 0},
        "download": {"python": None, "type": "download"},
        "draft": {"python": None, "type": "source"},
    },
    # words in an adapter's vendor / architecture / device / description that mark a CPU
    # rasteriser -> the name bitweb says (bitweb.gpu.software_reason); tuned: the kernels have
    # default tunes for it (bitweb.kernels.rasteriser), the others get the GPU tunes
    "software_adapters": {
        "swiftshader": "SwiftShader",
        "llvmpipe": "llvmpipe",
        "lavapipe": "lavapipe",
        "softpipe": "softpipe",
        "microsoft basic render": "Microsoft Basic Render Driver",
    },
}

ACTIVATIONS = tuple(DATA["activations"]["choices"])          # ("a8", "f32", "q8")
DEFAULT_ACTIVATIONS = DATA["activations"]["default"]
KV_CACHES = tuple(DATA["kv_cache"]["choices"])               # ("f16", "f32")
DEFAULT_KV_CACHE = DATA["kv_cache"]["default"]
LM_HEADS = tuple(DATA["lm_head"]["choices"])                 # ("q8_0",); None: as in the file
MIN_CONTEXT = DATA["context"]["min"]
SPECULATIVE = tuple(DATA["speculative"]["choices"])          # ("lookup", "draft"); None: no drafting


@dataclass(frozen=True)
class Bound:
    """One parameter's type and range: lo <= value <= hi (lo < value when lo_open); None: no bound."""
    integer: bool
    lo: float | int | None
    hi: float | int | None
    lo_open: bool = False
    default: float | int | None = None
    sampler: str | None = None          # request settings: the SamplingParams field it sets


def _bound(d: dict) -> Bound:
    return Bound(d["integer"], d.get("min"), d.get("max"), d.get("min_excluded", False), d.get("default"),
                 d.get("sampler"))


SAMPLER = {k: _bound(v) for k, v in DATA["sampler"].items()}
REQUEST = {k: _bound(v) for k, v in DATA["request"].items()}
SOFTWARE_ADAPTERS = dict(DATA["software_adapters"])   # word in the adapter info -> name said
FEATURES = tuple(DATA["features"])
LIMITS = tuple(DATA["limits"])
LOAD = dict(DATA["load"])


class OptionError(ValueError):
    """A load option the table does not allow; `field`: the library's name of it ("capLimits.x")."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def _shown(v) -> str:
    import json
    try:
        return json.dumps(v)
    except (TypeError, ValueError):
        return repr(v)


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v) -> bool:
    import math
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check(name: str, spec: dict, v) -> None:
    """OptionError naming `name` when v is not a value of the load option `spec` (as the library's
    checkLoadOptions in web/bitweb.mjs: the same rules, the same messages)."""
    t = spec["type"]
    if t == "choice":
        values = list(DATA[spec["of"]]["choices"])
        if v not in values:
            raise OptionError(name, f"must be {' or '.join(map(_shown, values))} (got {_shown(v)})")
    elif t == "context":
        if not (_integer(v) and v >= MIN_CONTEXT):
            raise OptionError(name, f"must be an integer of at least {MIN_CONTEXT}, the positions the KV cache "
                                    f"holds (got {_shown(v)})")
    elif t == "number":
        if not (_number(v) and v > spec["min"]):
            raise OptionError(name, f"must be a positive number of bytes (got {_shown(v)})")
    elif t == "limits":
        if not isinstance(v, dict):
            raise OptionError(name, "must be an object {limitName: bytes or count}")
        for k, n in v.items():
            if k not in LIMITS:
                raise OptionError(f"{name}.{k}", f"not a limit bitweb uses (one of {', '.join(LIMITS)})")
            if not (_integer(n) and n > 0):
                raise OptionError(f"{name}.{k}", f"must be a positive integer (got {n!r})")
    elif t == "features":
        if not isinstance(v, list):
            raise OptionError(name, f"must be an array of feature names ({', '.join(FEATURES)})")
        for f in v:
            if f not in FEATURES:
                raise OptionError(name, f"{_shown(f)} is not a feature bitweb uses (one of {', '.join(FEATURES)})")
    elif t == "boolean":
        if not isinstance(v, bool):
            raise OptionError(name, f"must be true or false (got {_shown(v)})")
    elif t == "source":
        named = isinstance(v, dict) and (isinstance(v.get("url"), str) or isinstance(v.get("cached"), str))
        if not (isinstance(v, str) and v or named):
            raise OptionError(name, "must be a model as load() takes one: a URL, {url, sha256?, size?}, a File or "
                                    "Blob, or {cached: name}")
    elif t == "download":
        if not isinstance(v, dict):
            raise OptionError(name, f"must be an object {{{', '.join(DATA['download'])}}}")
        for k, n in v.items():
            r = DATA["download"].get(k)
            if r is None:
                raise OptionError(f"{name}.{k}", f"not a download option (one of {', '.join(DATA['download'])})")
            if not (_integer(n) and r["min"] <= n <= r["max"]):
                raise OptionError(f"{name}.{k}", f"must be an integer from {r['min']} to {r['max']} (got {n!r})")
    else:                                                    # (tests/test_options.py: every type is known)
        raise OptionError(name, f"the options table gives it an unknown type {t!r}")


def check_load(given: dict) -> dict:
    """The worker's Python side of a load's options: `given` by the library's names (as load()
    takes them; unset or null: the default), each checked against LOAD (OptionError naming it, an
    unknown name too) -> {Python name: value} of every option the Python side takes."""
    if not isinstance(given, dict):
        raise OptionError("options", "must be an object of load options")
    for name in given:
        if name not in LOAD:
            raise OptionError(name, f"not a load option (one of {', '.join(LOAD)})")
    out = {}
    for name, spec in LOAD.items():
        v = given.get(name)
        if v is None:
            v = DATA[spec["of"]]["default"] if spec["type"] == "choice" else spec.get("default")
        else:
            _check(name, spec, v)
        if spec["python"] is not None:
            out[spec["python"]] = v
    return out
