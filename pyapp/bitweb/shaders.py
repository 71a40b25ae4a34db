"""Load `shaders/<name>.wgsl` and specialise it for one device (stdlib only).

WGSL has no preprocessor; ours is five line directives (a line whose first non-blank character
is `#`; anything else starting with `#` is an error), removed from the output:

    #include NAME   add shaders/NAME.wgsl to the module, once
    #include format   the include of the weight format in define FORMAT (a bitweb.formats Format,
                    or its type id: the Format object a launch spec got travels here and is asked
                    for its `include`, e.g. fmt_i2_s), with the constants the object declares
                    (Format.wgsl_constants: BLK, BBYTES, NP) appended to it
    #if NAME        (or #if !NAME)   keep the lines that follow when NAME is true
    #elif NAME      (or !NAME)
    #else
    #endif

#include is resolved in the same pass as #if: an #include in a branch that is not taken is
skipped, and the included file's own #if lines see the same defines. WGSL module-scope
declarations may come in any order, so an included file is appended after the end of the module
rather than spliced in: every line of shaders/<name>.wgsl keeps its line number in the compiled
code (the directive lines become blank or a comment; `enable` lines go on line 1). Each appended
file is framed by marker comments that say where its line 1 lands, e.g.
    // ---- common_sincos.wgsl (#include at rope.wgsl:35) starts: its line 1 is line 87 here ----
so a compiler message's line number is found in one step. A file is added once however often it
is included; an include cycle, an unknown name or a malformed directive is a ShaderSourceError
naming the file and line, and so is `#include format` without a FORMAT define.
Include files (shaders/common_*.wgsl, shaders/fmt_*.wgsl) hold only functions, constants and type
aliases (and the shared Params struct); their header comment says what the including shader must
declare (a float format's section for one kernel uses that kernel's bindings: fmt_f32.wgsl).

NAME in #if comes from `defines` (passed to Device.pipeline), from the shader being compiled:
  SHADER_<NAME>   true while compiling shaders/<name>.wgsl (name upper-cased), so an include can
              have a section for one kernel (a float format's dense / lmhead reads: `#if SHADER_DENSE`)
or from the device:
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

from bitweb import formats

_HERE = os.path.dirname(os.path.abspath(__file__))
# Packaged copy (the browser archive) first, then the repo's shaders/ (editable install).
SEARCH = [os.path.join(_HERE, "shaders"), os.path.join(_HERE, "..", "..", "shaders")]

_cache: dict = {}


class ShaderSourceError(ValueError):
    pass


def source(name: str) -> str:
    """The text of shaders/<name>.wgsl as written (includes not resolved)."""
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


def _directive(s: str, where: str) -> tuple:
    """'#word arg' -> (word, arg); ShaderSourceError for an unknown directive."""
    word, _, arg = s.partition(" ")
    arg = arg.strip()
    if word not in ("#include", "#if", "#elif", "#else", "#endif"):
        raise ShaderSourceError(f"{where}: unknown directive '{s}' (known: #include, #if, #elif, #else, #endif)")
    if word in ("#else", "#endif") and arg:
        raise ShaderSourceError(f"{where}: '{word}' takes no argument, got '{arg}'")
    return word, arg


def preprocess(src: str, defines: dict, name: str = "?", loader=None) -> str:
    """Keep the lines whose #if conditions hold (directive lines -> ""), append the active
    #include files after the end (loader(name) -> text; default: source)."""
    blocks: list = []
    if name.isidentifier():
        defines = dict(defines, **{f"SHADER_{name.upper()}": True})
    out = _process(src, name, defines, loader or source, (name,), set(), blocks)
    for inc, at, lines in blocks:
        out.append(f"// ---- {inc}.wgsl (#include at {at}) starts: its line 1 is line {len(out) + 2} here ----")
        out.extend(lines)
        out.append(f"// ---- {inc}.wgsl ends ----")
    return "\n".join(out) + "\n"


def _process(src: str, name: str, defines: dict, loader, chain: tuple, done: set, blocks: list) -> list:
    """The lines of one file after its directives; its active includes go to blocks, depth first."""
    out, stack = [], []          # [active_now, any_branch_taken, parent_active, else_seen, line]
    active = True
    for lineno, line in enumerate(src.splitlines(), 1):
        s = line.strip()
        if not s.startswith("#"):
            out.append(line if active else "")
            continue
        where = f"{name}.wgsl line {lineno}"
        word, arg = _directive(s, where)
        if word == "#include":
            if not arg.isidentifier():
                raise ShaderSourceError(f"{where}: bad #include name '{arg}' (a shader name: no path, no .wgsl)")
            out.append(_include(arg, where, f"{name}.wgsl:{lineno}", defines, loader, chain, done, blocks)
                       if active else "")
            continue
        if word == "#if":
            val = _eval(arg, defines, where)
            stack.append([active and val, val, active, False, lineno])
        elif not stack:
            raise ShaderSourceError(f"{where}: {word} without #if")
        elif stack[-1][3] and word != "#endif":
            raise ShaderSourceError(f"{where}: {word} after #else")
        elif word == "#elif":
            top = stack[-1]
            val = _eval(arg, defines, where) and not top[1]
            top[0], top[1] = top[2] and val, top[1] or val
        elif word == "#else":
            top = stack[-1]
            top[0], top[1], top[3] = top[2] and not top[1], True, True
        else:
            stack.pop()
        active = stack[-1][0] if stack else True
        out.append("")           # keep line numbers stable for compiler messages
    if stack:
        raise ShaderSourceError(f"{name}.wgsl line {stack[-1][4]}: #if without #endif")
    return out


def format_of(defines: dict, where: str = "?") -> formats.Format:
    """The weight format of define FORMAT (a bitweb.formats Format, or its type id)."""
    f = defines.get("FORMAT")
    if f is None or f is False:
        raise ShaderSourceError(f"{where}: #include format needs define FORMAT (a bitweb.formats Format); got none")
    try:
        return formats.get(f)
    except formats.FormatError as e:
        raise ShaderSourceError(f"{where}: #include format: FORMAT {f!r}: {e}") from None


def format_include(defines: dict, where: str = "?") -> str:
    """The include of the weight format in define FORMAT."""
    return format_of(defines, where).include


def _include(inc: str, where: str, at: str, defines: dict, loader, chain: tuple, done: set, blocks: list) -> str:
    fmt = None
    if inc == "format":
        fmt = format_of(defines, where)
        inc = fmt.include
    if inc in chain:
        cycle = " -> ".join(f"{n}.wgsl" for n in chain[chain.index(inc):] + (inc,))
        raise ShaderSourceError(f"{where}: #include cycle {cycle}")
    if inc in done:
        return f"// #include {inc} (already included)"
    done.add(inc)
    try:
        text = loader(inc)
    except ShaderSourceError as e:
        raise ShaderSourceError(f"{where}: #include {inc}: {e}") from None
    i = len(blocks)
    blocks.append(None)          # depth first: this file before the files it includes
    lines = _process(text, inc, defines, loader, chain + (inc,), done, blocks)
    if fmt is not None:          # the format's geometry, from the object (one line: line numbers stay)
        lines.append(" ".join(f"const {k}: u32 = {int(v)}u;" for k, v in fmt.wgsl_constants().items())
                     + f"  // bitweb.formats.{fmt.name}")
    blocks[i] = (inc, at, lines)
    return f"// #include {inc} (appended after the end of the module)"


def _eval(arg: str, defines: dict, where: str) -> bool:
    neg = arg.startswith("!")
    key = arg[1:].strip() if neg else arg
    if not key.isidentifier():
        raise ShaderSourceError(f"{where}: bad #if condition '{arg}'")
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
    # on line 1 (before its text): line n of the module is line n of shaders/<name>.wgsl
    return " ".join(head) + (" " if head else "") + body
