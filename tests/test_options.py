"""One source for the option lists and their bounds (bitweb.options): every side reads it and none
keeps a copy. The Python sides are checked by their effective values (the CLI's choices and
defaults, the engine's lists, the sampler's defaults and ranges, the worker's request checks, the
CPU-rasteriser words) and by a scan for literal lists of option values left in their sources. The
browser library (web/bitweb.mjs) runs in node against the options.json tools/build_web.py writes;
its types (web/bitweb.d.ts) spell the values, checked here; the browser side's sources have no
literal option value left (the app's form is built from the library: tests/e2e/test_app_options.py).
The load options (options.LOAD) are checked by the library in node and by options.check_load on the
same values, message for message; each is read by the worker, named in the types, renamed nowhere."""
import argparse
import ast
import json
import re
import shutil
import subprocess

import pytest

from bitweb import commands, completions, engine, generation, gpu, kernels, numpy_model, options, sampling
from bitweb.kernels import ops
from tests.conftest import ROOT, need

PKG = ROOT / "pyapp" / "bitweb"
OPTION_VALUES = set(options.ACTIVATIONS) | set(options.KV_CACHES) | set(options.LM_HEADS) | set(options.SPECULATIVE)


def test_the_table_is_consistent():
    d = options.DATA
    for name in ("activations", "kv_cache"):
        assert d[name]["default"] in d[name]["choices"], name
        assert all(isinstance(label, str) and label for label in d[name]["choices"].values()), name
    assert d["lm_head"]["default"] is None and options.LM_HEADS == ("q8_0",)
    assert options.MIN_CONTEXT == 2
    for name, r in options.REQUEST.items():          # a request asks within what the sampler takes
        assert r.lo is not None and r.hi is not None and r.lo < r.hi, name
        assert isinstance(r.lo, int) == isinstance(r.hi, int) == r.integer, name    # (messages: 0 vs 0.0)
        if r.sampler is None:
            assert name == "max_tokens"
            continue
        s = options.SAMPLER[r.sampler]
        assert s.integer == r.integer, name
        assert s.lo is None or r.lo > s.lo or (r.lo == s.lo and r.lo_open >= s.lo_open), name
        assert s.hi is None or r.hi <= s.hi, name
        assert r.lo <= s.default <= r.hi and (not r.lo_open or s.default > r.lo), name
    assert set(options.SAMPLER) == {f.name for f in sampling.SamplingParams.__dataclass_fields__.values()}


def _actions(parser) -> dict:
    """{(subcommand, dest): action} of the CLI."""
    out = {}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                out.update({(name, dest): act for (_, dest), act in _actions(sub).items()})
        else:
            out[("", a.dest)] = a
    return out


def test_the_cli_offers_the_options():
    acts = _actions(commands.build_parser())
    for cmd in ("generate", "eval", "perplexity", "bench"):
        a = acts[(cmd, "activations")]
        assert tuple(a.choices) == options.ACTIVATIONS and a.default == options.DEFAULT_ACTIVATIONS, cmd
        k = acts[(cmd, "kv_cache")]
        assert tuple(k.choices) == options.KV_CACHES and k.default == options.DEFAULT_KV_CACHE, cmd
    assert tuple(acts[("generate", "speculative")].choices) == tuple(m for m in options.SPECULATIVE if m != "draft")
    assert acts[("generate", "speculative")].default is None is options.DATA["speculative"]["default"]
    for cmd in ("generate", "bench"):
        h = acts[(cmd, "lm_head")]
        assert tuple(h.choices) == options.LM_HEADS and h.default is None, cmd
    flags = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
             "repeat_penalty": "repeat_penalty", "seed": "seed"}
    for dest, field in flags.items():
        a = acts[("generate", dest)]
        assert a.default == options.SAMPLER[field].default and type(a.default) is type(options.SAMPLER[field].default)


def test_the_engine_and_the_numpy_model_take_the_options():
    assert engine.ACTIVATIONS == numpy_model.ACTIVATIONS == options.ACTIVATIONS
    assert engine.LM_HEADS == options.LM_HEADS
    assert generation.KV_CACHE == options.DEFAULT_KV_CACHE
    assert ops.KV_TYPES == options.KV_CACHES and set(ops.KV_BYTES) == set(options.KV_CACHES)   # (bytes per value)
    with pytest.raises(engine.EngineError, match="activations"):
        engine.Engine(None, None, "f16", 16)


def test_the_sampler_takes_its_defaults_and_ranges():
    p = sampling.SamplingParams()
    assert {k: getattr(p, k) for k in options.SAMPLER} == {k: b.default for k, b in options.SAMPLER.items()}
    for name, b in options.SAMPLER.items():
        if b.lo is None:
            sampling.SamplingParams(**{name: -12345})          # (the seed: any integer)
            continue
        step = 1 if b.integer else 1e-6
        edge = b.lo + step if b.lo_open else b.lo
        sampling.SamplingParams(**{name: edge})
        with pytest.raises(sampling.SamplingError, match=name):
            sampling.SamplingParams(**{name: b.lo if b.lo_open else b.lo - step})
        if b.hi is not None:
            sampling.SamplingParams(**{name: b.hi})
            with pytest.raises(sampling.SamplingError, match=name):
                sampling.SamplingParams(**{name: b.hi + step})
        if b.integer:
            with pytest.raises(sampling.SamplingError, match="integer"):
                sampling.SamplingParams(**{name: edge + 0.5})


def test_requests_are_checked_against_the_table():
    assert completions.SETTINGS == {n: (b.integer, b.lo, b.hi, b.lo_open,
                                   options.SAMPLER[b.sampler].default if b.sampler else None)
                               for n, b in options.REQUEST.items()}
    for name, b in options.REQUEST.items():
        step = 1 if b.integer else 1e-6
        assert completions.checked_setting(name, b.hi) == b.hi
        for bad in (b.hi + step, b.lo if b.lo_open else b.lo - step):
            with pytest.raises(completions.AppError, match=name):
                completions.checked_setting(name, bad)
        if b.sampler:                                      # the value reaches its sampler parameter
            p, _, _ = completions.params_from({name: b.hi})
            assert getattr(p, b.sampler) == b.hi


def test_cpu_rasterisers_have_one_list():
    assert gpu.SOFTWARE_NAMES == options.SOFTWARE_ADAPTERS
    for word, name in options.SOFTWARE_ADAPTERS.items():           # the kernels' tunes ask the same test
        assert gpu.software_reason({"device": f"{word} (LLVM 15)"}) == name
        assert kernels.rasteriser(type("Dev", (), {"info": {"device": word}})()) == name.lower()
    assert kernels.rasteriser(type("Dev", (), {"info": {"device": "NVIDIA H200"}})()) is None


# Sources that take their option lists from bitweb.options: no literal list of option values
# ("a8", "f16", ...) may be left in them, nor a table keyed by the sampling settings.
READERS = ["commands/__init__.py", "engine.py", "numpy_model.py", "generation.py", "sampling.py", "webapp.py",
           "completions.py", "gpu/__init__.py", "gpu/caps.py", "kernels/__init__.py"]


def literal_copies(src: str) -> list:
    found = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            strs = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if set(strs) & OPTION_VALUES:
                found.append((node.lineno, strs))
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
            if len(keys & (set(options.REQUEST) | set(options.SAMPLER) | set(options.SOFTWARE_ADAPTERS))) >= 2:
                found.append((node.lineno, sorted(keys)))
    return found


def test_the_scan_finds_a_copy():
    assert literal_copies('p.add_argument("--kv-cache", choices=["f16", "f32"])') == [(1, ["f16", "f32"])]
    assert literal_copies('S = {"top_p": (0, 1), "min_p": (0, 1)}') == [(1, ["min_p", "top_p"])]
    assert literal_copies('x = a8 if act == "a8" else "f32"') == []


@pytest.mark.parametrize("path", READERS)
def test_no_side_keeps_its_own_copy(path):
    assert literal_copies((PKG / path).read_text(encoding="utf-8")) == [], path


# ---------------------------------------------------------------- the browser side

LIBRARY_JS = """
const b = await import(process.argv[1]);
const out = { OPTIONS: b.OPTIONS, SETTINGS: b.SETTINGS, frozen: Object.isFrozen(b.OPTIONS.request.top_p), load: {}, check: {} };
const tries = { activations: ['x', ...Object.keys(b.OPTIONS.activations.choices)], kvCache: ['x', ...Object.keys(b.OPTIONS.kv_cache.choices)],
                context: [b.OPTIONS.context.min - 1, b.OPTIONS.context.min] };
for (const [k, vals] of Object.entries(tries)) {
  out.load[k] = [];
  for (const v of vals) {
    // a bad option fails before the source is looked at; a good one reaches the bad source (42)
    try { await b.load(42, { [k]: v }); } catch (e) { out.load[k].push([v, e.field, e.message]); }
  }
}
out.loadAll = [];
for (const [name, v] of JSON.parse(process.argv[2])) {       // every load option, good and bad values
  try { await b.load(42, { [name]: v }); out.loadAll.push([name, v, null, 'loaded?']); }
  catch (e) { out.loadAll.push([name, v, e.field ?? null, e.message]); }
}
for (const [name, [integer, lo, hi, open]] of Object.entries(b.SETTINGS)) {
  const step = integer ? 1 : 1e-6;
  out.check[name] = [lo, open ? lo + step : lo - step, hi, hi + step, integer ? lo + 1.5 : null]
    .map((v) => [v, v === null ? null : b.checkSetting(name, v)]);
}
// create()'s speculative: a value it refuses is a settings error; one it takes goes to the worker (a
// connection that keeps what it is sent)
out.speculative = [];
const conn = { kind: 'dedicated', note: '', live: new Map(), post: (m) => { throw Object.assign(new Error('sent'), { sent: m }); } };
const eng = new b.Engine({ engine: 1, info: {}, load: { stages: {} }, adapter: { features: [] } }, conn);
for (const v of JSON.parse(process.argv[3])) {
  try { await eng.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }], speculative: v }); out.speculative.push([v, null, 'answered?']); }
  catch (e) { out.speculative.push(e.sent ? [v, 'sent', e.sent.request.speculative ?? null] : [v, e.field ?? null, e.message]); }
}
console.log(JSON.stringify(out));
"""

SPECULATIVE_TRIALS = [None, {"mode": "lookup"}, {"mode": "draft"}, "lookup", ["lookup"], {}, {"mode": "fast"}, {"mode": None},
                      {"mode": ["lookup"]}, {"mode": "lookup", "k": 4}, 5, True]


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """What web/bitweb.mjs exports and says, run by node beside an options.json build_web writes."""
    need(shutil.which("node") is not None, "node is not installed")
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_web", ROOT / "tools" / "build_web.py")
    bw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bw)
    tmp = tmp_path_factory.mktemp("lib")
    (tmp / "web").mkdir()
    for name in ("bitweb.mjs", "catalogue.mjs", "catalogue.json", "protocol.mjs", "errors.mjs", "connection.mjs"):   # the library and what it imports
        shutil.copy(ROOT / "web" / name, tmp / "web" / name)
    bw.write_options(tmp / "build" / "web" / "options.json")
    p = subprocess.run(["node", "--no-warnings", "--input-type=module", "-e", LIBRARY_JS, str(tmp / "web" / "bitweb.mjs"),
                        json.dumps(load_trials()), json.dumps(SPECULATIVE_TRIALS)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_library_reads_the_table(library):
    assert library["OPTIONS"] == json.loads(json.dumps(options.DATA)) and library["frozen"]
    assert library["SETTINGS"] == {n: [b.integer, b.lo, b.hi, b.lo_open] for n, b in options.REQUEST.items()}
    assert list(library["SETTINGS"]) == list(completions.SETTINGS)        # (the same order: the same first error)


def test_the_library_checks_load_options_against_the_table(library):
    for field, choices in (("activations", options.ACTIVATIONS), ("kvCache", options.KV_CACHES)):
        (bad, f, msg), *good = library["load"][field]
        assert bad == "x" and f == field and all(f'"{c}"' in msg for c in choices), msg
        assert [(v, f) for v, f, _ in good] == [(c, "source") for c in choices]      # accepted
    (lo, f, msg), (ok, f2, _) = library["load"]["context"]
    assert (lo, f, ok, f2) == (options.MIN_CONTEXT - 1, "context", options.MIN_CONTEXT, "source")
    assert f"at least {options.MIN_CONTEXT}" in msg


def test_the_library_checks_settings_as_the_worker_does(library):
    """checkSetting (JS) and completions.checked_setting (Python) accept and refuse the same values."""
    for name, rows in library["check"].items():
        for value, why in rows:
            if value is None:
                continue
            try:
                completions.checked_setting(name, value)
                py_ok = True
            except completions.AppError:
                py_ok = False
            assert (why is None) == py_ok, (name, value, why)
        open_ = library["SETTINGS"][name][3]        # lo, beside lo (inside when excluded), hi, above hi
        assert [why is None for _, why in rows[:4]] == [not open_, open_, True, False], (name, rows)


def test_the_library_checks_speculative_as_the_worker_does(library):
    """create()'s speculative: the library (JS) and the worker's Python (completions.checked_speculative)
    take and refuse the same values, naming the same field with the same message; what the library
    takes reaches the worker as {mode} (null: nothing)."""
    got = library["speculative"]
    assert [v for v, _, _ in got] == SPECULATIVE_TRIALS
    outcomes = set()
    for value, field, said in got:
        try:
            mode = completions.checked_speculative(value)
            want = ("sent", None if mode is None else {"mode": mode})
        except completions.AppError as e:
            want = (e.extra["field"], str(e))
        assert (field, said) == want, value
        outcomes.add(field == "sent")
    assert outcomes == {True, False}                    # (both outcomes seen)


def _ts_union(src: str, name: str) -> list:
    m = re.search(rf"export type {name} = ([^;]+);", src)
    assert m, name
    return re.findall(r"'([^']+)'", m.group(1))


def test_the_types_spell_the_table():
    src = (ROOT / "web" / "bitweb.d.ts").read_text(encoding="utf-8")
    assert _ts_union(src, "Activations") == list(options.ACTIVATIONS)
    assert _ts_union(src, "KVCacheType") == list(options.KV_CACHES)
    assert _ts_union(src, "LMHead") == list(options.LM_HEADS)
    assert _ts_union(src, "SettingName") == list(options.REQUEST)
    assert _ts_union(src, "SamplerParameter") == list(options.SAMPLER)
    assert _ts_union(src, "SpeculativeMode") == list(options.SPECULATIVE)
    create = re.search(r"export interface CreateRequest \{(.*?)\n\}", src, re.S).group(1)
    assert all(re.search(rf"^\s*{n}\?:", create, re.M) for n in options.REQUEST), create
    # the option values appear only in those aliases (not as unions of their own elsewhere)
    code = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    lines = [ln for ln in code.splitlines() if re.search(r"'(a8|f16|q8_0)'", ln) and not ln.startswith("export type ")]
    assert lines == [] or all("pack2x16float" in ln for ln in lines), lines      # (info.kvCache: the variant)


BROWSER_READERS = ["web/bitweb.mjs", "web/connection.mjs", "web/index.html", *sorted(p.relative_to(ROOT).as_posix()
                                                            for p in (ROOT / "web" / "app").glob("*.mjs"))]


def browser_copies(src: str) -> list:
    """Literal option values, <option> lists, bounds of the number fields and sampling-limit
    tables left in a browser source (comments aside)."""
    code = re.sub(r"<!--.*?-->|/\*.*?\*/", "", src, flags=re.S)
    code = "\n".join(re.sub(r"(^|\s)//.*", "", ln) for ln in code.splitlines())
    values = "|".join(map(re.escape, sorted(OPTION_VALUES)))
    pats = [rf"""(['"`])({values})\1""", r"<option\b", r"<input\b[^>]*type=\"number\"[^>]*\b(min|max)=",
            r"2 \*\* (30|53)", r"\b(top_p|min_p|temperature)\s*:\s*\["]
    return [m.group(0) for p in pats for m in re.finditer(p, code)]


def test_the_browser_scan_finds_a_copy():
    assert browser_copies("if (!['a8', 'f32'].includes(x)) throw e;") == ["'a8'", "'f32'"]
    assert browser_copies('<select><option value="f16">f16</option></select>') == ['"f16"', "<option"]
    assert browser_copies('<input id="s" type="number" min="0" step="1">') == ['<input id="s" type="number" min=']
    assert browser_copies("const S = { top_p: [false, 0, 1, true] }; // 'a8'") == ["top_p: ["]


@pytest.mark.parametrize("path", BROWSER_READERS)
def test_no_browser_side_keeps_its_own_copy(path):
    assert browser_copies((ROOT / path).read_text(encoding="utf-8")) == [], path


# ---------------------------------------------------------------- the load options (options.LOAD)

def load_trials() -> list:
    """[name, value] for every load option: values of its type that pass and that fail."""
    lim, feat = options.LIMITS[0], options.FEATURES[0]
    by_type = {
        "context": [options.MIN_CONTEXT - 1, options.MIN_CONTEXT, 2.5, True],
        "number": [0, -1, 1, 1 << 33, "5"],
        "limits": [{lim: 5}, {"maxFoo": 5}, {lim: 0}, {lim: 2.5}, "x"],
        "features": [[feat], ["fp64"], feat, []],
        "boolean": [True, False, 0, "yes"],
        "download": [{"retries": 3}, {"retries": -1}, {"nope": 1}, {"stallMs": 0}, 5],
        "source": ["m.gguf", "", {"cached": "m.gguf"}, {"url": "hf:a/b/c.gguf"}, {"url": 5}, 5, []],
    }
    out = []
    for name, spec in options.LOAD.items():
        if spec["type"] == "choice":
            vals = ["x", 7, *options.DATA[spec["of"]]["choices"]]
        else:
            vals = by_type[spec["type"]]                 # (a new type: a KeyError here until it has trials)
        out += [[name, v] for v in vals]
    return out


def test_the_load_table_is_consistent():
    pys = [s["python"] for s in options.LOAD.values() if s["python"]]
    assert len(pys) == len(set(pys)) and all(re.fullmatch(r"[a-z0-9_]+", p) for p in pys), pys
    assert all(re.fullmatch(r"[a-z][A-Za-z0-9]*", n) for n in options.LOAD)     # the library's camelCase names
    for name, spec in options.LOAD.items():
        if spec["type"] == "choice":
            assert set(options.DATA[spec["of"]]) == {"default", "choices"}, name
    assert options.check_load({}) == {s["python"]: (options.DATA[s["of"]]["default"] if s["type"] == "choice"
                                                    else s.get("default")) for s in options.LOAD.values() if s["python"]}
    with pytest.raises(options.OptionError, match="not a load option") as e:
        options.check_load({"kv_cache": "f16"})                 # the Python name is not the library's
    assert e.value.field == "kv_cache"


def test_the_library_and_the_python_side_check_load_options_alike(library):
    """load() in JS and bitweb.options.check_load accept and refuse the same values of every load
    option, naming the same field with the same message: one table, two readers of it."""
    trials = load_trials()
    assert [[n, v] for n, v, _, _ in library["loadAll"]] == trials
    kinds = set()
    for name, value, field, message in library["loadAll"]:
        try:
            options.check_load({name: value})
            py = ("source", None)                       # accepted: the JS load went on to the bad source
        except options.OptionError as e:
            py = (e.field, str(e))
        assert (field, message if field != "source" else None) == py, (name, value, message)
        kinds.add(field == "source")
    assert kinds == {True, False}                       # (both outcomes seen)


def test_every_load_option_reaches_its_reader():
    """A load option the Python side takes is read by the worker's load (webapp: opts["name"]); the
    library's names reach Python as they are (no hand renaming in web/: the Python names never
    appear there) and the types list each option."""
    src = (PKG / "webapp.py").read_text(encoding="utf-8")
    for name, spec in options.LOAD.items():
        if spec["python"]:
            assert f'opts["{spec["python"]}"]' in src, name
    for path in ("web/worker.mjs", "web/bitweb.mjs"):
        text = (ROOT / path).read_text(encoding="utf-8")
        renamed = [s["python"] for n, s in options.LOAD.items() if s["python"] and s["python"] != n
                   and re.search(rf"\b{s['python']}\s*:", text)]          # ({kv_cache: opts.kvCache ...})
        assert renamed == [], (path, renamed)
    assert re.search(r"\bkv_cache\s*:", "const py = { kv_cache: o.kvCache };")       # (the scan can fail)
    dts = (ROOT / "web" / "bitweb.d.ts").read_text(encoding="utf-8")
    assert _ts_union(dts, "LoadOptionName") == list(options.LOAD)
    load = re.search(r"export interface LoadOptions \{(.*?)\n\}", dts, re.S).group(1)
    assert all(re.search(rf"^\s*{n}\?:", load, re.M) for n in options.LOAD), load
    assert _ts_union(dts, "GPULimit") == list(options.LIMITS) and _ts_union(dts, "GPUFeature") == list(options.FEATURES)
    assert _ts_union(dts, "Replace") == list(options.DATA["replace"]["choices"])
