"""The WGSL loader's preprocessor (bitweb.shaders): #include, #if / #elif / #else / #endif.

Sources are given through a dict loader, so these tests do not depend on shaders/; the last test
checks that every real shader preprocesses with its includes resolved.
"""
import pathlib
import re

import pytest

from bitweb import formats, shaders
from bitweb.shaders import ShaderSourceError, preprocess


def lines(src, defines=None, files=None, name="main"):
    """The non-blank output lines (directive lines become blank lines)."""
    out = preprocess(src, defines or {}, name, loader=_loader(files or {}))
    return [s for s in out.splitlines() if s.strip()]


def _loader(files):
    def load(n):
        if n not in files:
            raise ShaderSourceError(f"shader '{n}.wgsl' not found")
        return files[n]
    return load


def code(ls):
    """Output lines without the include comments and markers."""
    return [s for s in ls if not s.startswith("//")]


# ---- #if / #elif / #else / #endif --------------------------------------------------------------

SRC = "a\n#if X\nb\n#elif Y\nc\n#else\nd\n#endif\ne\n"


@pytest.mark.parametrize("defines,kept", [
    ({"X": True}, ["a", "b", "e"]),
    ({"X": True, "Y": True}, ["a", "b", "e"]),      # first true branch only
    ({"Y": True}, ["a", "c", "e"]),
    ({}, ["a", "d", "e"]),
    ({"X": False, "Y": 0}, ["a", "d", "e"]),        # falsy values are false
])
def test_if_elif_else(defines, kept):
    assert lines(SRC, defines) == kept


def test_negation_and_line_numbers_kept():
    out = preprocess("a\n#if !X\nb\n#endif\nc\n", {}, "main")
    assert out.splitlines() == ["a", "", "b", "", "c"]      # same line count, directives blank
    assert preprocess("#if !X\nb\n#endif\n", {"X": True}).splitlines() == ["", "", ""]


def test_nesting():
    src = "#if A\na\n#if B\nab\n#else\na_b\n#endif\n#elif C\nc\n#if B\ncb\n#endif\n#endif\nz\n"
    assert lines(src, {"A": 1, "B": 1}) == ["a", "ab", "z"]
    assert lines(src, {"A": 1}) == ["a", "a_b", "z"]
    assert lines(src, {"C": 1, "B": 1}) == ["c", "cb", "z"]
    assert lines(src, {"B": 1}) == ["z"]          # inner branches of an inactive block stay off


def test_inactive_parent_hides_taken_inner_branch():
    src = "#if A\n#if !B\nx\n#else\ny\n#endif\n#endif\n"
    assert lines(src, {}) == []


@pytest.mark.parametrize("src,msg", [
    ("#endif\n", "main.wgsl line 1: #endif without #if"),
    ("#else\n", "main.wgsl line 1: #else without #if"),
    ("#elif X\n", "main.wgsl line 1: #elif without #if"),
    ("a\n#if X\nb\n", "main.wgsl line 2: #if without #endif"),
    ("#if X\n#else\n#else\n#endif\n", "main.wgsl line 3: #else after #else"),
    ("#if X\n#else\n#elif Y\n#endif\n", "main.wgsl line 3: #elif after #else"),
    ("#if X && Y\n#endif\n", "line 1: bad #if condition 'X && Y'"),
    ("#if\n#endif\n", "line 1: bad #if condition ''"),
    ("#endif X\n", "line 1: '#endif' takes no argument"),
    ("#ifdef X\n#endif\n", "line 1: unknown directive '#ifdef X'"),
    ("#define X 1\n", "line 1: unknown directive '#define X 1'"),
])
def test_errors(src, msg):
    with pytest.raises(ShaderSourceError) as e:
        preprocess(src, {"X": True}, "main")
    assert msg in str(e.value)


# ---- #include --------------------------------------------------------------------------------

def test_include_appends_once_after_the_module():
    files = {"inc": "// header\nfn f() {}\n"}
    out = preprocess("x\n#include inc\ny\n#include inc\n", {}, "main", loader=_loader(files))
    ls = out.splitlines()
    assert ls[:4] == ["x", "// #include inc (appended after the end of the module)", "y",
                      "// #include inc (already included)"]          # lines 1..4 keep their numbers
    assert ls.count("fn f() {}") == 1
    marker = ls[4]
    assert marker.startswith("// ---- inc.wgsl (#include at main.wgsl:2) starts: its line 1 is line 6 here")
    assert ls[5:7] == ["// header", "fn f() {}"]                        # line 6 = the include's line 1
    assert ls[7] == "// ---- inc.wgsl ends ----"


def test_marker_line_numbers_are_module_lines():
    files = {"a": "a1\n#include b\na3\n", "b": "b1\nb2\n", "c": "c1\n"}
    ls = preprocess("m1\n#include a\n#include c\n", {}, "main", loader=_loader(files)).splitlines()
    for i, s in enumerate(ls):
        if " starts: its line 1 is line " in s:
            inc = s.split("---- ")[1].split(".wgsl")[0]
            n = int(s.split("is line ")[1].split()[0])
            assert n == i + 2 and ls[n - 1] == inc + "1", (s, ls)
    assert code(ls) == ["m1", "a1", "a3", "b1", "b2", "c1"]          # depth first: a, a's b, then c


def test_include_sees_defines_and_inactive_include_is_skipped():
    files = {"inc": "#if F\nfast\n#else\nslow\n#endif\n", "never": "fn never() {}\n"}
    assert code(lines("#include inc\n", {"F": 1}, files)) == ["fast"]
    assert code(lines("#include inc\n", {}, files)) == ["slow"]
    # an #include in a branch not taken is not resolved (the file need not even exist)
    assert code(lines("#if G\n#include never\n#include missing\n#endif\nm\n", {}, files)) == ["m"]
    assert code(lines("#if G\n#include never\n#endif\n", {"G": 1}, files)) == ["fn never() {}"]


def test_nested_include_and_diamond_once():
    files = {"a": "#include c\na\n", "b": "#include c\nb\n", "c": "c\n"}
    assert code(lines("#include a\n#include b\nm\n", {}, files)) == ["m", "a", "c", "b"]


def test_include_format_picks_the_include_of_the_format_object():
    """define FORMAT is the Format object (a launch spec's) or its type id (a kernel case's)."""
    files = {f.include: f"fn {f.include}() {{}}\n" for f in formats.TYPES.values()}
    for f in formats.TYPES.values():
        for v in (f, f.type_id):
            assert code(lines("#include format\nm\n", {"FORMAT": v}, files))[:2] == ["m", f"fn {f.include}() {{}}"]
    with pytest.raises(ShaderSourceError, match=r"main.wgsl line 1: #include format needs define FORMAT .*got none"):
        lines("#include format\n", {}, files)
    with pytest.raises(ShaderSourceError, match=r"main.wgsl line 1: #include format: FORMAT 77: unknown GGML type id 77"):
        lines("#include format\n", {"FORMAT": 77}, files)


def test_include_format_declares_the_objects_geometry():
    """The loader appends the constants the Format declares (one line, after the include's lines)."""
    files = {f.include: "x\n" for f in formats.TYPES.values()}
    out = code(lines("#include format\nm\n", {"FORMAT": formats.Q2_0_G128}, files))
    assert out[:2] == ["m", "x"] and out[2].startswith("const BLK: u32 = 128u; const BBYTES: u32 = 34u; const NP: u32 = 4u;")
    out = code(lines("#include format\nm\n", {"FORMAT": formats.F16}, files))
    assert out[2].startswith("const BLK: u32 = 16u; const BBYTES: u32 = 32u;") and "NP" not in out[2]   # bitlinear's lane unit


def test_shader_name_is_a_define_of_its_own_includes():
    """SHADER_<NAME> is true while shaders/<name>.wgsl compiles: an include's section for one kernel."""
    files = {"inc": "#if SHADER_DENSE\nd\n#endif\n#if SHADER_LMHEAD\nh\n#endif\n"}
    assert code(lines("#include inc\nm\n", {}, files, name="dense")) == ["m", "d"]
    assert code(lines("#include inc\nm\n", {}, files, name="lmhead")) == ["m", "h"]
    assert code(lines("#include inc\nm\n", {}, files, name="bitlinear")) == ["m"]


def test_every_format_has_its_include_file():
    names = {p.stem for p in (pathlib.Path(__file__).resolve().parent.parent / "shaders").glob("fmt_*.wgsl")}
    assert names == {f.include for f in formats.TYPES.values()}


def test_unknown_include():
    with pytest.raises(ShaderSourceError) as e:
        lines("x\n#include nope\n", {}, {})
    assert "main.wgsl line 2: #include nope" in str(e.value) and "not found" in str(e.value)
    with pytest.raises(ShaderSourceError, match=r"a\.wgsl line 1: #include nope"):
        lines("#include a\n", {}, {"a": "#include nope\n"})


@pytest.mark.parametrize("arg", ["common/x", "x.wgsl", "../x", ""])
def test_bad_include_name(arg):
    with pytest.raises(ShaderSourceError, match="bad #include name"):
        lines(f"#include {arg}\n", {}, {"x": ""})


@pytest.mark.parametrize("files,src,cycle", [
    ({}, "#include main\n", "main.wgsl -> main.wgsl"),
    ({"a": "#include a\n"}, "#include a\n", "a.wgsl -> a.wgsl"),
    ({"a": "#include b\n", "b": "#include main\n"}, "#include a\n", "main.wgsl -> a.wgsl -> b.wgsl -> main.wgsl"),
    ({"a": "#include b\n", "b": "#include a\n"}, "#include b\n#include a\n", "b.wgsl -> a.wgsl -> b.wgsl"),
])
def test_include_cycle(files, src, cycle):
    with pytest.raises(ShaderSourceError) as e:
        lines(src, {}, files)
    assert f"#include cycle {cycle}" in str(e.value)


def test_if_blocks_do_not_cross_files():
    with pytest.raises(ShaderSourceError, match=r"inc\.wgsl line 1: #if without #endif"):
        lines("#include inc\n", {}, {"inc": "#if X\nx\n"})
    with pytest.raises(ShaderSourceError, match=r"inc\.wgsl line 1: #endif without #if"):
        lines("#if X\n#include inc\n#endif\n", {"X": 1}, {"inc": "#endif\n"})


# ---- the real shaders --------------------------------------------------------------------------

SHADERS = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parent.parent / "shaders").glob("*.wgsl"))


@pytest.mark.parametrize("name", SHADERS)
@pytest.mark.parametrize("subgroups", [False, True])
def test_real_shaders_preprocess(name, subgroups):
    fmt = formats.I2_S if name.startswith("bitlinear") else formats.F16
    out = preprocess(shaders.source(name), {"SUBGROUPS": subgroups, "FORMAT": fmt, "A8": True, "NORM": True}, name)
    src_lines = shaders.source(name).splitlines()
    out_lines = out.splitlines()
    for i, s in enumerate(src_lines):                 # the file's own lines keep their numbers
        if not s.strip().startswith("#") and out_lines[i]:
            assert re.sub(r"@binding\(\w+\)", "@binding()", out_lines[i]) == re.sub(r"@binding\(\w+\)", "@binding()", s)
    assert not any(s.strip().startswith("#") for s in out_lines)
    assert all(re.fullmatch(r"\d+", n) for n in re.findall(r"@binding\((\w+)\)", out))  # all numbered
    for inc in (s.split()[1] for s in src_lines if s.startswith("#include ")):
        assert inc.startswith(("common_", "fmt_")) or inc == "format", inc


def test_specialise_enables_on_line_one():
    class Caps:
        subgroups, shader_f16, dot4 = True, True, False

    class Dev:
        caps, backend = Caps(), "browser"
    src = "// first\nfn f() {}\n#include test_inc_probe\n"
    shaders._cache["test_inc_probe"] = "fn g() {}\n"
    try:
        code = shaders.specialise(src, Dev(), {}, "probe")
    finally:
        del shaders._cache["test_inc_probe"]
    ls = code.splitlines()
    assert ls[0] == "enable f16; enable subgroups; // first"
    assert ls[1] == "fn f() {}" and "fn g() {}" in ls[3:]


# ---- binding numbers (the loader's) ---------------------------------------------------------------

def _b(var, arg="auto", rw=""):
    return f"@group(0) @binding({arg}) var<storage, read{rw}> {var}: array<f32>;"


def test_bindings_numbered_in_order_of_the_lines_kept():
    src = "\n".join([_b("x"), "#if N", _b("nw"), "#endif", _b("y", rw="_write"), "#if P", _b("w1"), "#endif",
                     _b("shape")]) + "\n"
    def numbered(d):
        return re.findall(r"@binding\((\d+)\) var<[^>]*> (\w+)", preprocess(src, d))
    assert numbered({}) == [("0", "x"), ("1", "y"), ("2", "shape")]
    assert numbered({"N": 1, "P": 1}) == [("0", "x"), ("1", "nw"), ("2", "y"), ("3", "w1"), ("4", "shape")]
    assert numbered({"P": 1}) == [("0", "x"), ("1", "y"), ("2", "w1"), ("3", "shape")]


def test_bindings_auto_alias_and_restart():
    src = "\n".join([_b("kc"), _b("vc"), _b("out"), _b("vcv", "vc"), _b("outv", "out"), _b("extra"),
                     "fn f() {}", _b("part", "0"), _b("co")]) + "\n"
    got = re.findall(r"@binding\((\d+)\) var<[^>]*> (\w+)", preprocess(src, {}))
    assert got == [("0", "kc"), ("1", "vc"), ("2", "out"), ("1", "vcv"), ("2", "outv"), ("3", "extra"),
                   ("0", "part"), ("1", "co")]
    assert preprocess(_b("x") + "  // @binding(auto) in a comment stays\n", {}).startswith(
        "@group(0) @binding(0) var<storage, read> x: array<f32>;  // @binding(auto) in a comment")


@pytest.mark.parametrize("src,msg", [
    (_b("vcv", "vc") + "\n", "main.wgsl line 1: @binding(vc): no binding named 'vc' declared before 'vcv'"),
    ("#if SUBGROUPS\n" + _b("x") + "\n#endif\n", "main.wgsl line 2: a binding inside #if on a device define"),
    ("#if A\n#elif !F16\n" + _b("x") + "\n#endif\n", "main.wgsl line 3: a binding inside #if on a device define"),
    ("@group(0) @binding(auto)\nvar<storage> x: array<f32>;\n", "main.wgsl line 1: a binding is written"),
    ("#include inc\n", "inc.wgsl line 2: a binding in an include file"),
])
def test_binding_errors(src, msg):
    with pytest.raises(ShaderSourceError) as e:
        preprocess(src, {}, "main", loader=_loader({"inc": "fn f() {}\n" + _b("x") + "\n"}))
    assert msg in str(e.value)


def test_bindings_of_a_real_shader_follow_its_defines():
    b = shaders.bindings("bitlinear", {"FORMAT": formats.I2_S, "NORM": True, "PARTS2": True, "SHAPE": True})
    assert b == {"x": 0, "nw": 1, "mult": 2, "y": 3, "w0": 4, "w1": 5, "shape": 6}
    b = shaders.bindings("bitlinear", {"FORMAT": formats.I2_S, "PARTS2": True, "PARTS3": True})
    assert b == {"x": 0, "mult": 1, "y": 2, "w0": 3, "w1": 4, "w2": 5}
    assert "vcv" in shaders.binding_names("attention") and "nw" in shaders.binding_names("bitlinear")


def test_bound_orders_buffers_by_the_loaders_numbers():
    from bitweb.kernels import bound
    d = {"FORMAT": formats.I2_S, "PARTS2": True}
    names = {"x": "x", "nw": "norm", "mult": "mult", "y": "y", "w0": "gate", "w1": "up", "shape": "shape"}
    assert bound("bitlinear", d, names) == ("x", "mult", "y", "gate", "up")          # nw, shape: not declared
    assert bound("bitlinear", dict(d, NORM=True), names) == ("x", "norm", "mult", "y", "gate", "up")
    with pytest.raises(ValueError, match=r"declares no binding \['nope'\]"):
        bound("bitlinear", d, dict(names, nope="z"))
    with pytest.raises(ValueError, match="not one buffer each of 0..n-1"):       # a gap: mult unbound
        bound("bitlinear", d, {k: v for k, v in names.items() if k != "mult"})
    with pytest.raises(ValueError, match="not one buffer each"):                 # one slot, two buffers
        bound("attention", {}, {"kc": "k", "vc": "v", "vcv": "other"})
