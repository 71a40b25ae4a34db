"""Load `shaders/<name>.wgsl` and specialise it for one device (stdlib only).

WGSL has no preprocessor; ours is four line directives, removed from the output:

    #if NAME        (or #if !NAME)   keep the lines that follow when NAME is true
    #elif NAME
    #else
    #endif

NAME comes from `defines` (passed to Device.pipeline) or from the device:
  SUBGROUPS   the device has subgroups (subgroupAdd & co. are allowed)
  F16         shader-f16: `enable f16;` is added and `f16` may be used;
              without it, f16 data is read as u32 and decoded with unpack2x16float
  DOT4        dot4I8Packed is available
  BROWSER / NATIVE   the backend
Chrome needs `enable subgroups;` before subgroup builtins; naga (wgpu-py)
rejects that line, so it is added only for the browser backend.
Workgroup and tile sizes are `override` constants, set per pipeline.
"""
from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.abspath(__file__))
# Packaged copy (the browser archive) first, then the repo's shaders/ (editable install).
SEARCH = [os.path.join(_HERE, "shaders"), os.path.join(_HERE, "..", "..", "shaders")]

_cache: dict = {}


class ShaderSourceError(ValueError):
    pass


def source(name: str) -> str:
    if name in _cache:
        return _cache[name]
    for d in SEARCH:
        p = os.path.join(d, name + ".wgsl")
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                _cache[name] = f.read()
            return _cache[name]
    raise ShaderSourceError(f"shader '{name}.wgsl' not found in {SEARCH}")


def device_defines(dev) -> dict:
    c = dev.caps
    return {"SUBGROUPS": c.subgroups, "F16": c.shader_f16, "DOT4": c.dot4,
            "BROWSER": dev.backend == "browser", "NATIVE": dev.backend != "browser"}


def preprocess(src: str, defines: dict, name: str = "?") -> str:
    out, stack = [], []          # stack of [active_now, any_branch_taken, parent_active]
    active = True
    for lineno, line in enumerate(src.splitlines(), 1):
        s = line.strip()
        if s.startswith("#if ") or s.startswith("#elif ") or s in ("#else", "#endif"):
            word = s.split()[0]
            arg = s[len(word):].strip()
            if word == "#if":
                val = _eval(arg, defines, name, lineno)
                stack.append([active and val, val, active])
            elif not stack:
                raise ShaderSourceError(f"{name}.wgsl line {lineno}: {word} without #if")
            elif word == "#elif":
                top = stack[-1]
                val = _eval(arg, defines, name, lineno) and not top[1]
                top[0], top[1] = top[2] and val, top[1] or val
            elif word == "#else":
                top = stack[-1]
                top[0], top[1] = top[2] and not top[1], True
            else:
                stack.pop()
            active = stack[-1][0] if stack else True
            out.append("")       # keep line numbers stable for compiler messages
            continue
        out.append(line if active else "")
    if stack:
        raise ShaderSourceError(f"{name}.wgsl: unterminated #if")
    return "\n".join(out) + "\n"


def _eval(arg: str, defines: dict, name: str, lineno: int) -> bool:
    neg = arg.startswith("!")
    key = arg[1:].strip() if neg else arg
    if not key.isidentifier():
        raise ShaderSourceError(f"{name}.wgsl line {lineno}: bad #if condition '{arg}'")
    val = bool(defines.get(key, False))
    return not val if neg else val


def specialise(src: str, dev, defines: dict | None = None, name: str = "?") -> str:
    d = device_defines(dev)
    d.update(defines or {})
    body = preprocess(src, d, name)
    head = []
    if d.get("F16"):
        head.append("enable f16;")
    if d.get("SUBGROUPS") and d.get("BROWSER"):
        head.append("enable subgroups;")
    return "\n".join(head) + ("\n" if head else "") + body
