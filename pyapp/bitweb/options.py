"""The options and bounds every side of bitweb shares, in one place: the activation modes, the KV
cache types, the LM-head options, the context's lower bound, the sampler's parameters and what a
request may ask of them, and the words that mark a CPU rasteriser among GPU adapters.

This module is their one source. The Python sides import it: the CLI (bitweb.commands: choices
and defaults), the engine and the numpy model (activations, LM heads), the kernels and generation
(KV cache types), the sampler (bitweb.sampling: defaults and the values its maths takes), the
library's worker (bitweb.webapp: the request checks) and bitweb.gpu (CPU rasterisers). The browser
library (web/bitweb.mjs) and the app read DATA as build/web/options.json, which
tools/build_web.py writes. tests/test_options.py checks that each side reads these values and
keeps no copy of its own (web/bitweb.d.ts spells them as types: checked against DATA).

Stdlib only (a browser module). Numbers keep their type: a float bound is a float (JSON 0.0), an
integer one an int, so messages read the same in Python and JS.
"""
from __future__ import annotations

from dataclasses import dataclass

DATA = {
    # activation modes: "a8" W1.58A8 as trained (per-token int8 activations), "f32" float
    "activations": {"default": "a8", "choices": {"a8": "W1.58A8: int8 per token (as trained)",
                                                 "f32": "float32"}},
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

ACTIVATIONS = tuple(DATA["activations"]["choices"])          # ("a8", "f32")
DEFAULT_ACTIVATIONS = DATA["activations"]["default"]
KV_CACHES = tuple(DATA["kv_cache"]["choices"])               # ("f16", "f32")
DEFAULT_KV_CACHE = DATA["kv_cache"]["default"]
LM_HEADS = tuple(DATA["lm_head"]["choices"])                 # ("q8_0",); None: as in the file
MIN_CONTEXT = DATA["context"]["min"]


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
