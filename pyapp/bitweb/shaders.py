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

Binding numbers are the loader's, given in the order of declaration among the lines kept:
    @group(0) @binding(auto) var<storage, read> x: ...   one more than the binding declared before it
                                                          (0 for the module's first)
    @group(0) @binding(vc) var<storage, ...> vcv: ...     the binding of the earlier variable vc (another
                                                          view of its buffer, or another entry point's
                                                          variable in that slot)
    @group(0) @binding(0) var<storage, read> part: ...    a number as written (another entry point's
                                                          set starts again at 0); auto goes on from it
so a launch spec binds its buffers by variable name and asks bindings() for the numbers
(bitweb.kernels.bound). A binding may not depend on a device define (#if SUBGROUPS around a binding is
an error: kernel cases fix their bind order where no device is known), nor sit in an include file.

NAME in #if comes from `defines` (passed to Device.pipeline), from the shader being compiled:
  SHADER_<NAME>   true while compiling shaders/<name>.wgsl (name upper-cased), so an include can
              have a section for one kernel (a float format's dense / lmhead reads: `#if SHADER_DENSE`)
from the weight format (define FORMAT):
  OWN_<name>  the format's include declares <name> (a fn, const or alias, in any #if branch), so the
              format interface gives a default only to a format without its own
              (common_codes.wgsl: `#if !OWN_fmt_ws` ... the default ... `#endif`)
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

import ast
import functools
import operator
import os
import re

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


DEVICE_DEFINES = ("SUBGROUPS", "F16", "DOT4", "BROWSER", "NATIVE")


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
    defines = dict(defines, **_own(defines, loader or source))
    out = _process(src, name, defines, loader or source, (name,), set(), blocks)
    for inc, at, lines in blocks:
        out.append(f"// ---- {inc}.wgsl (#include at {at}) starts: its line 1 is line {len(out) + 2} here ----")
        out.extend(lines)
        out.append(f"// ---- {inc}.wgsl ends ----")
    return "\n".join(_number_bindings(out, name)) + "\n"


_BINDING = re.compile(r"@binding\(\s*(\w+)\s*\)(\s*var\b(?:\s*<[^>]*>)?\s*(\w+))?")


def _number_bindings(lines: list, name: str) -> list:
    """The lines with each @binding(auto) / @binding(NAME) given its number (module docstring)."""
    numbers: dict = {}
    last = -1
    for i, line in enumerate(lines):
        code = line.split("//", 1)[0]
        if "@binding" not in code:
            continue
        m = _BINDING.search(code)
        where = f"{name}.wgsl line {i + 1}"
        if not m or not m.group(2):
            raise ShaderSourceError(f"{where}: a binding is written `@binding(auto | NAME | N) var<...> name: T;` "
                                    f"on one line, got '{line.strip()}'")
        arg, var = m.group(1), m.group(3)
        if arg.isdigit():
            n = int(arg)
        elif arg == "auto":
            n = last + 1
        elif arg in numbers:
            n = numbers[arg]
        else:
            raise ShaderSourceError(f"{where}: @binding({arg}): no binding named {arg!r} declared before {var!r}")
        numbers[var], last = n, n
        lines[i] = line[:m.start(1)] + str(n) + line[m.end(1):]
    return lines


_NUMBERED = re.compile(r"@binding\((\d+)\)\s*var\b(?:\s*<[^>]*>)?\s*(\w+)")


@functools.lru_cache(maxsize=512)
def _bindings(name: str, defines: tuple) -> tuple:
    # the shader's own lines only (an include declares no binding): includes read as empty
    code = re.sub(r"//[^\n]*", "", preprocess(source(name), dict(defines), name, loader=lambda inc: ""))
    return tuple((m.group(2), int(m.group(1))) for m in _NUMBERED.finditer(code))


def bindings(name: str, defines: dict | None = None) -> dict:
    """{variable: binding number} of shaders/<name>.wgsl under `defines` (the kernel's: a binding never
    depends on a device define), every entry point's variables."""
    return dict(_bindings(name, tuple(sorted((defines or {}).items(), key=lambda kv: kv[0]))))


@functools.lru_cache(maxsize=64)
def binding_names(name: str) -> frozenset:
    """Every variable shaders/<name>.wgsl declares with a @binding, in any #if branch."""
    code = re.sub(r"//[^\n]*", "", source(name))
    return frozenset(m.group(3) for m in _BINDING.finditer(code) if m.group(2))


def _process(src: str, name: str, defines: dict, loader, chain: tuple, done: set, blocks: list) -> list:
    """The lines of one file after its directives; its active includes go to blocks, depth first."""
    out, stack = [], []          # [active_now, any_branch_taken, parent_active, else_seen, line, names]
    active = True
    for lineno, line in enumerate(src.splitlines(), 1):
        s = line.strip()
        if not s.startswith("#"):
            if "@binding" in line.split("//", 1)[0]:
                if len(chain) > 1:
                    raise ShaderSourceError(f"{name}.wgsl line {lineno}: a binding in an include file (the "
                                            f"including shader declares its bindings)")
                if any(k in DEVICE_DEFINES for top in stack for k in top[5]):
                    raise ShaderSourceError(f"{name}.wgsl line {lineno}: a binding inside #if on a device define "
                                            f"({', '.join(DEVICE_DEFINES)}): bind orders are fixed without a device")
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
            stack.append([active and val, val, active, False, lineno, {arg.lstrip("!").strip()}])
        elif not stack:
            raise ShaderSourceError(f"{where}: {word} without #if")
        elif stack[-1][3] and word != "#endif":
            raise ShaderSourceError(f"{where}: {word} after #else")
        elif word == "#elif":
            top = stack[-1]
            val = _eval(arg, defines, where) and not top[1]
            top[0], top[1] = top[2] and val, top[1] or val
            top[5].add(arg.lstrip("!").strip())
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


_DECLARED = re.compile(r"^\s*(?:fn|const|alias|override)\s+(\w+)", re.M)


def _own(defines: dict, loader) -> dict:
    """{OWN_<name>: True} for each name the include of define FORMAT declares ({} without a usable
    FORMAT: `#include format` then says what is wrong)."""
    f = defines.get("FORMAT")
    if f is None or f is False:
        return {}
    try:
        text = loader(formats.get(f).include)
    except (formats.FormatError, ShaderSourceError):
        return {}
    return {f"OWN_{n}": True for n in _DECLARED.findall(re.sub(r"//[^\n]*", "", text))}


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


# ---- what a pipeline asks of the device's compute limits ----------------------------------------
# WebGPU refuses a pipeline whose entry point's workgroup variables need more than
# maxComputeWorkgroupStorageSize (the sum, over the variables the entry point statically uses, of
# roundUp(16, SizeOf(T))) or whose @workgroup_size exceeds maxComputeInvocationsPerWorkgroup /
# maxComputeWorkgroupSizeX/Y/Z. workgroup_use() computes those from the specialised WGSL, the entry
# point and the pipeline's override constants, so a kernel that cannot run on a device is refused by
# name before anything is compiled or uploaded (bitweb.gpu Device.check_pipelines), on every backend
# (wgpu-native 0.32 does not check workgroup memory itself).

_SCALAR = {"f32": 4, "i32": 4, "u32": 4, "f16": 2, "bool": 4}
_SHORT = {"f": "f32", "i": "i32", "u": "u32", "h": "f16"}
_DECL = re.compile(r"(override|const)\s+(\w+)\s*(?::\s*[\w<>]+\s*)?(?:=\s*([^;]+))?;")
_WG_VAR = re.compile(r"var<workgroup>\s+(\w+)\s*:\s*(.+?);")


class WGSLValueError(ValueError):
    """An array length or workgroup size workgroup_use cannot evaluate (names the expression)."""


def _value(expr: str, env: dict) -> int:
    """An integer WGSL constant expression (literals, names of env, + - * / %, min / max)."""
    py = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[ui]\b", r"\1", expr.strip()).replace("/", "//")

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name) and isinstance(env.get(n.id), int):
            return env[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("min", "max") and not n.keywords:
            return (min if n.func.id == "min" else max)(ev(a) for a in n.args)
        raise WGSLValueError(f"cannot evaluate {expr!r}")
    try:
        return ev(ast.parse(py, mode="eval"))
    except (SyntaxError, ZeroDivisionError) as e:
        raise WGSLValueError(f"cannot evaluate {expr!r}: {e}") from None


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod}


def _split_top(text: str) -> list:
    """text split at its commas outside <> and ()."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def _size_align(t: str, env: dict) -> tuple:
    """(SizeOf, AlignOf) of a WGSL type: scalars, vecN<T> (and vec4f-style), atomic<T>, array<T, N>."""
    t = t.strip()
    if t in _SCALAR:
        return _SCALAR[t], _SCALAR[t]
    m = re.fullmatch(r"vec([234])([fiuh])", t)                    # vec4f: vec4<f32>
    if m:
        t = f"vec{m.group(1)}<{_SHORT[m.group(2)]}>"
    m = re.fullmatch(r"atomic<\s*(\w+)\s*>", t)
    if m:
        return 4, 4
    m = re.fullmatch(r"vec([234])<\s*(\w+)\s*>", t)
    if m and m.group(2) in _SCALAR:
        n, s = int(m.group(1)), _SCALAR[m.group(2)]
        return n * s, (2 if n == 2 else 4) * s
    m = re.fullmatch(r"array<(.+)>", t, re.S)
    if m:
        parts = _split_top(m.group(1))
        if len(parts) != 2:
            raise WGSLValueError(f"array without a length: {t!r}")
        size, align = _size_align(parts[0], env)
        stride = -(-size // align) * align
        return _value(parts[1], env) * stride, align
    raise WGSLValueError(f"workgroup variable of type {t!r}")


def _functions(code: str) -> dict:
    """{name: body text} of the module's functions (brace matched)."""
    braces = [(m.start(), 1 if m.group() == "{" else -1) for m in re.finditer(r"[{}]", code)]
    out = {}
    for m in re.finditer(r"\bfn\s+(\w+)\s*\(", code):
        depth, end = 0, len(code)
        for pos, step in braces:
            if pos < m.end():
                continue
            depth += step
            if depth == 0:
                end = pos + 1
                break
        out[m.group(1)] = code[m.end():end]
    return out


@functools.lru_cache(maxsize=64)
def _module(code: str) -> tuple:
    """(declarations [(kind, name, init)], {function: identifiers in its body, functions it calls},
    [(workgroup var, type)]) of specialised WGSL, comments removed; cached per module text."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", code, flags=re.S)
    decls = [m.groups() for m in map(_DECL.match, code.splitlines()) if m]
    fns = {}
    bodies = _functions(code)
    for name, body in bodies.items():
        fns[name] = (frozenset(re.findall(r"\b\w+\b", body)),
                     frozenset(g for g in re.findall(r"\b(\w+)\s*\(", body) if g in bodies))
    sizes = {m.group(1): re.search(r"@workgroup_size\(([^)]*)\)\s*(?:@\w+(?:\([^)]*\))?\s*)*fn\s+" + re.escape(m.group(1)) + r"\b", code)
             for m in re.finditer(r"\bfn\s+(\w+)\s*\(", code)}
    return decls, fns, [m.groups() for m in _WG_VAR.finditer(code)], {k: v.group(1) for k, v in sizes.items() if v}


def workgroup_use(code: str, entry: str, constants: dict | None = None) -> dict:
    """What the compute entry point `entry` of specialised WGSL `code` asks of the device, with the
    pipeline's override `constants`: {"storage": bytes of workgroup memory, "vars": {name: bytes},
    "size": (x, y, z)}. WGSLValueError when a length or size cannot be evaluated."""
    decls, fns, wg_vars, wg_sizes = _module(code)
    env: dict = {}
    for kind, name, init in decls:                      # module-scope declarations, in order
        if kind == "override" and constants and name in constants:
            v = constants[name]
            env[name] = int(v) if float(v).is_integer() else v
        elif init is not None:
            try:
                env[name] = _value(init, env)
            except WGSLValueError:
                pass                                    # (a float, or not needed)
    if entry not in fns:
        raise WGSLValueError(f"no function {entry!r} in the module")
    used, todo = set(), [entry]
    while todo:                                         # the entry point and what it calls
        f = todo.pop()
        if f not in used:
            used.add(f)
            todo += fns[f][1]
    idents = set().union(*(fns[f][0] for f in used))
    sizes = {name: -(-_size_align(t, env)[0] // 16) * 16 for name, t in wg_vars if name in idents}
    dims = [_value(d, env) for d in _split_top(wg_sizes[entry]) if d.strip()] if entry in wg_sizes else [1]
    return {"storage": sum(sizes.values()), "vars": sizes, "size": tuple(dims + [1] * (3 - len(dims)))}
