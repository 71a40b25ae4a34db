"""JSON Schema -> GBNF (stdlib only), after llama.cpp's json-schema-to-grammar.

Supported: type (one or a list: nullable is ["T", "null"]), enum, const, anyOf, oneOf (branches must
be provably disjoint, else use anyOf), allOf with one subschema, $ref to "#..." ($defs /
definitions, recursion included); objects: properties, required, additionalProperties (false / true
/ a schema); arrays: items, prefixItems, minItems, maxItems; strings: minLength, maxLength, pattern
(bitweb.grammar.regex: what a grammar can express), format (date, time, date-time, uuid); integers:
minimum, maximum, exclusiveMinimum, exclusiveMaximum; numbers. Annotations (title, description,
default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly, discriminator) are
ignored. Anything else is a SchemaError that names every such keyword and where it is.

Choices (as llama.cpp): whitespace is `space ::= | " " | "\\n"{1,2} [ \\t]{0,20}` after each token of
JSON; properties come in the schema's order, required ones first; an object with properties and no
additionalProperties gets no other keys (a schema without properties, any object); numbers have at
most 16 integer and 16 fraction digits; string escapes never encode a surrogate (\\uD800-\\uDFFF).
Every text the grammar accepts is JSON that validates against the schema.
"""
from __future__ import annotations

import json
import math
import re

from bitweb.grammar.gbnf import GrammarError, char_class, literal
from bitweb.grammar import regex


class SchemaError(GrammarError):
    """A JSON Schema the grammar cannot express: names the keywords and their locations."""


SPACE = '| " " | "\\n"{1,2} [ \\t]{0,20}'
PRIMITIVES = {
    "space": (SPACE, ()),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | '
             '[dD] [0-7] [0-9a-fA-F]{2}))', ()),
    "string": ('"\\"" char* "\\"" space', ("char", "space")),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "number": ('"-"? integral-part ("." decimal-part)? ([eE] [-+]? integral-part)? space',
               ("integral-part", "decimal-part", "space")),
    "integer": ('"-"? integral-part space', ("integral-part", "space")),
    "boolean": ('("true" | "false") space', ("space",)),
    "null": ('"null" space', ("space",)),
    "value": ("object | array | string | number | boolean | null",
              ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? "}" space',
               ("string", "value", "space")),
    "array": ('"[" space ( value ("," space value)* )? "]" space', ("value", "space")),
}
FORMATS = {
    "date": '[0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [12] [0-9] | "3" [01])',
    "time": '([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? '
            '("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])',
    "uuid": '[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}',
}
FORMATS["date-time"] = f'{FORMATS["date"]} [Tt] {FORMATS["time"]}'
ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
               "readOnly", "writeOnly", "discriminator", "$defs", "definitions"}
BY_TYPE = {
    "object": {"properties", "required", "additionalProperties"},
    "array": {"items", "prefixItems", "minItems", "maxItems"},
    "string": {"minLength", "maxLength", "pattern", "format"},
    "integer": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    "number": set(),
    "boolean": set(),
    "null": set(),
}
TYPES = tuple(BY_TYPE)
COMMON = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref"}
KNOWN = COMMON | ANNOTATIONS | set().union(*BY_TYPE.values())
MAX_COUNT = 2000                  # the grammar's repetition limit (llama.cpp's)


def _pointer(path: str) -> str:
    return path or "/"


class Converter:
    def __init__(self, root):
        self.root = root
        self.rules = {}                    # name -> body
        self.bodies = {}                   # body -> name (identical rules shared)
        self.refs = {}                     # "#/..." -> rule name
        self.errors = []

    # ------------------------------------------------------------ rules
    def add(self, name: str, body: str) -> str:
        """A rule with this body (an existing one when the body is the same); returns its name."""
        name = re.sub(r"[^a-zA-Z0-9-]+", "-", name).strip("-") or "r"
        if name in self.rules and self.rules[name] is None:      # reserved by a $ref: its body
            self.rules[name] = body
            self.bodies.setdefault(body, name)
            return name
        if body in self.bodies:
            return self.bodies[body]
        base, k = name, 1
        while name in self.rules and self.rules[name] != body:
            k += 1
            name = f"{base}-{k}"
        self.rules[name] = body
        self.bodies.setdefault(body, name)
        return name

    def prim(self, name: str) -> str:
        if name not in self.rules:
            body, deps = PRIMITIVES[name]
            self.rules[name] = body
            for d in deps:
                self.prim(d)
        return name

    def fail(self, path: str, message: str) -> str:
        self.errors.append(f"{message} (at {_pointer(path)})")
        return self.prim("null")           # a placeholder: conversion goes on to find every error

    # ------------------------------------------------------------ schemas
    def resolve(self, ref: str, path: str):
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None, self.fail(path + "/$ref", f"$ref {ref!r}: only local references (\"#/...\") are supported")
        node = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None, self.fail(path + "/$ref", f"$ref {ref!r} points at nothing in the schema")
        return node, None

    def ref_rule(self, ref: str, path: str) -> str:
        if ref in self.refs:
            return self.refs[ref]
        target, err = self.resolve(ref, path)
        if err is not None:
            return err
        name = re.sub(r"[^a-zA-Z0-9-]+", "-", ref.rsplit("/", 1)[-1]).strip("-") or "ref"
        base, k = name, 1
        while name in self.rules or name in self.refs.values() or name in PRIMITIVES or name == "root":
            k += 1
            name = f"{base}-{k}"
        self.refs[ref] = name
        self.rules[name] = None            # reserved: a recursive reference finds the name
        expr = self.visit(target, name, ref[1:])
        if self.rules[name] is None:
            self.rules[name] = expr
        return name

    def visit(self, s, name: str, path: str) -> str:
        """A GBNF expression for the values schema s allows."""
        if s is True or s == {}:
            return self.prim("value")
        if s is False:
            return self.fail(path, "the schema false allows no value")
        if not isinstance(s, dict):
            return self.fail(path, f"a schema must be an object or a boolean, not {type(s).__name__}")
        unknown = sorted(k for k in s if k not in KNOWN)
        for k in unknown:                  # reported; the rest is still converted to find more
            self.fail(f"{path}/{k}", f"unsupported JSON Schema keyword {k!r}")
        s = {k: v for k, v in s.items() if k not in unknown}
        if "$ref" in s:
            others = sorted(k for k in s if k not in ANNOTATIONS and k != "$ref")
            if others:
                return self.fail(path, f"$ref together with {', '.join(others)} is not supported")
            return self.ref_rule(s["$ref"], path)
        if "allOf" in s:
            subs = s["allOf"]
            others = sorted(k for k in s if k not in ANNOTATIONS and k != "allOf")
            if not isinstance(subs, list) or len(subs) != 1 or others:
                return self.fail(path + "/allOf", "allOf is supported only with a single subschema and nothing beside it")
            return self.visit(subs[0], name, path + "/allOf/0")
        if "enum" in s or "const" in s:
            return self.enum(s, name, path)
        for key in ("anyOf", "oneOf"):
            if key in s:
                return self.union(s, key, name, path)
        types = s.get("type")
        if types is None:
            types = self.infer(s, path)
            if types is None:                  # annotations alone: any value
                return self.prim("value")
        elif isinstance(types, str):
            types = [types]
        if not isinstance(types, list) or not types or any(t not in TYPES for t in types):
            return self.fail(path + "/type", f"type {s.get('type')!r}: must be one of {', '.join(TYPES)} or a list of them")
        for k in sorted(k for k in s if k not in COMMON | ANNOTATIONS):
            if not any(k in BY_TYPE[t] for t in types):
                where = [t for t in TYPES if k in BY_TYPE[t]]
                self.fail(f"{path}/{k}", f"{k!r} with type {' or '.join(types)} is not supported (only with "
                                         f"{' or '.join(where)})")
        alts = [self.typed(t, s, name if len(types) == 1 else f"{name}-{t}", path) for t in types]
        return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"

    def infer(self, s, path, report: bool = True):
        """The type a schema without `type` means by its keywords (None: any value)."""
        kinds = [t for t in TYPES if any(k in BY_TYPE[t] for k in s)]
        if not kinds:
            return None
        if len(kinds) > 1 and report:
            self.fail(path, f"keywords of several types ({', '.join(kinds)}) without a type")
        return kinds[:1]

    def typed(self, t: str, s: dict, name: str, path: str) -> str:
        if t == "object":
            return self.object(s, name, path)
        if t == "array":
            return self.array(s, name, path)
        if t == "string":
            return self.string(s, name, path)
        if t == "integer":
            return self.integer(s, name, path)
        return self.prim(t)

    def enum(self, s, name, path):
        others = sorted(k for k in s if k not in ANNOTATIONS | {"enum", "const", "type"})
        if others:
            return self.fail(path, f"enum / const together with {', '.join(others)} is not supported")
        if "const" in s and "enum" in s:
            return self.fail(path, "both enum and const")
        values = [s["const"]] if "const" in s else s["enum"]
        if not isinstance(values, list) or not values:
            return self.fail(path + "/enum", "enum must be a non-empty array")
        types = s.get("type")
        if types is not None:
            types = [types] if isinstance(types, str) else types
            values = [v for v in values if json_type(v) in types or (json_type(v) == "integer" and "number" in types)]
            if not values:
                return self.fail(path, f"no enum / const value has the type {s['type']!r}")
        alts = []
        for v in values:
            try:
                text = json.dumps(v, ensure_ascii=False, allow_nan=False)
            except ValueError:
                return self.fail(path, f"enum / const value {v!r} is not JSON")
            alts.append(literal(text))
        return self.add(name, "(" + " | ".join(dict.fromkeys(alts)) + ") " + self.prim("space"))

    def union(self, s, key, name, path):
        others = sorted(k for k in s if k not in ANNOTATIONS and k != key)
        if others:
            return self.fail(path, f"{key} together with {', '.join(others)} is not supported (put them in each branch)")
        subs = s[key]
        if not isinstance(subs, list) or not subs:
            return self.fail(path + "/" + key, f"{key} must be a non-empty array")
        if key == "oneOf":
            for i in range(len(subs)):
                for j in range(len(subs)):
                    if i != j and not self.excludes(subs[i], subs[j]):
                        return self.fail(path + "/oneOf", f"oneOf branches {i} and {j} may both match one value, which "
                                                          f"oneOf forbids; use anyOf if either may match")
        alts = [self.visit(x, f"{name}-{i}", f"{path}/{key}/{i}") for i, x in enumerate(subs)]
        return self.add(name, " | ".join(alts))

    # ------------------------------------------------------------ oneOf: do branches exclude each other?
    def deref(self, s, depth=0):
        while isinstance(s, dict) and "$ref" in s and depth < 32:
            s, _ = self.resolve(s["$ref"], "")
            depth += 1
        return s if isinstance(s, dict) else {}

    def values(self, s):
        """The values s allows when it lists them (enum / const), else None."""
        s = self.deref(s)
        return [s["const"]] if "const" in s else s.get("enum") if isinstance(s.get("enum"), list) else None

    def kinds(self, s) -> set:
        s = self.deref(s)
        vals = self.values(s)
        if vals is not None:
            return {json_type(v) for v in vals}
        if "anyOf" in s or "oneOf" in s:
            return set().union(*(self.kinds(x) for x in s.get("anyOf", s.get("oneOf")) or [{}]))
        t = s.get("type")
        if t is None:
            t = self.infer(s, "", report=False) or list(TYPES)
        t = {t} if isinstance(t, str) else set(t)
        return t | ({"integer"} if "number" in t else set())

    def excludes(self, a, b) -> bool:
        """True when no value the grammar makes for schema a also matches schema b (a sufficient
        check: disjoint types or listed values, a required property whose listed values differ,
        a property b requires that a never writes)."""
        ka, kb = self.kinds(a), self.kinds(b)
        if not ka & kb:
            return True
        va, vb = self.values(a), self.values(b)
        if va is not None and vb is not None:
            return not any(x == y and json_type(x) == json_type(y) for x in va for y in vb)
        a, b = self.deref(a), self.deref(b)
        if ka & kb != {"object"}:
            return False
        pa, pb = a.get("properties") or {}, b.get("properties") or {}
        ra, rb = set(a.get("required") or ()), set(b.get("required") or ())
        if not pa and not ra:
            return False
        closed = a.get("additionalProperties") in (None, False)
        if closed and not rb <= set(pa) | ra:
            return True
        for p in ra & set(pb):
            x, y = self.values(pa.get(p, {})), self.values(pb[p])
            if x is not None and y is not None and not any(u == v for u in x for v in y):
                return True
        return False

    # ------------------------------------------------------------ objects
    def object(self, s, name, path):
        props = s.get("properties", {})
        required = s.get("required", [])
        extra = s.get("additionalProperties")
        if not isinstance(props, dict):
            return self.fail(path + "/properties", "properties must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            return self.fail(path + "/required", "required must be an array of strings")
        if "properties" not in s and not required and extra in (None, True):
            return self.prim("object")
        if extra is None:
            extra = False
        sp = self.prim("space")
        kvs = {}
        for p, sub in props.items():
            value = self.visit(sub, f"{name}-{p}", f"{path}/properties/{escape(p)}")
            kvs[p] = f'{literal(json.dumps(p, ensure_ascii=False))} {sp} ":" {sp} {value}'
        for p in dict.fromkeys(required):
            if p not in kvs:
                if extra is False:
                    self.fail(path + "/required", f"{p!r} is required but not in properties, and "
                                                  f"additionalProperties is false: no object matches")
                    continue
                value = self.prim("value") if extra is True else self.visit(extra, f"{name}-{p}", path + "/additionalProperties")
                kvs[p] = f'{literal(json.dumps(p, ensure_ascii=False))} {sp} ":" {sp} {value}'
        req = [p for p in kvs if p in required]
        opt = [p for p in kvs if p not in required]
        tail = None
        if extra is not False:
            value = self.prim("value") if extra is True else self.visit(extra, f"{name}-additional", path + "/additionalProperties")
            key = self.add(f"{name}-additional-key", self.other_key(list(kvs)))
            kv = self.add(f"{name}-additional-kv", f'{key} ":" {sp} {value}')
            tail = f'{kv} ("," {sp} {kv})*'
        for i in range(len(opt) - 1, -1, -1):       # any in-order choice of the optional ones (+ extras)
            kv = kvs[opt[i]]
            tail = kv if tail is None else self.add(f"{name}-opt-{i}", f'{kv} ("," {sp} {tail})? | {tail}')
        parts = [f'"{{" {sp}']
        if req:
            parts.append(f' "," {sp} '.join(kvs[p] for p in req))
            if tail:
                parts.append(f'("," {sp} {tail})?')
        elif tail:
            parts.append(f"({tail})?")
        parts.append(f'"}}" {sp}')
        return self.add(name, " ".join(parts))

    def other_key(self, names: list) -> str:
        """A JSON string (no escapes) that is none of names: a trie of the names, each node offering
        the other characters, so an extra key never repeats a property."""
        plain = '[^"\\\\\\x7F\\x00-\\x1F]'
        trie = {}
        for n in names:
            node = trie
            for c in n:
                node = node.setdefault(c, {})
            node[""] = {}

        def expr(node) -> str:
            alts = [f"{literal(c)} {expr(child)}" for c, child in sorted(node.items()) if c]
            others = sorted(ord(c) for c in node if c)
            exclude = [(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)] + [(o, o) for o in others]
            alts.append(f"{char_class(exclude, negated=True)} {plain}*")
            if "" not in node:
                alts.append("")
            return "(" + " | ".join(alts) + ")"

        return f'"\\"" {expr(trie)} "\\"" {self.prim("space")}'

    # ------------------------------------------------------------ arrays
    def array(self, s, name, path):
        prefix = s.get("prefixItems", [])
        items = s.get("items", True)
        lo, hi = s.get("minItems", 0), s.get("maxItems")
        if not isinstance(prefix, list):
            return self.fail(path + "/prefixItems", "prefixItems must be an array of schemas")
        for k, v in (("minItems", lo), ("maxItems", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                return self.fail(f"{path}/{k}", f"{k} must be a non-negative integer")
            if v is not None and v > MAX_COUNT:
                return self.fail(f"{path}/{k}", f"{k} {v} is more than the grammar's {MAX_COUNT} repetitions")
        if hi is not None and hi < lo:
            return self.fail(path, f"maxItems {hi} < minItems {lo}: no array matches")
        if isinstance(items, list):
            return self.fail(path + "/items", "items as an array (draft 4 tuples): use prefixItems")
        if items is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
            if hi < lo:
                return self.fail(path, f"minItems {lo} but items is false after {len(prefix)} prefixItems")
        sp = self.prim("space")
        fixed = [self.visit(x, f"{name}-{i}", f"{path}/prefixItems/{i}") for i, x in enumerate(prefix)]
        item = None
        if hi is None or hi > len(prefix):
            item = self.visit(items, f"{name}-item", path + "/items")

        def elements(k: int) -> str:                # elements k.. (each after a comma when k > 0)
            if hi is not None and k >= hi:
                return ""
            sep = f'"," {sp} ' if k else ""
            if k < len(fixed):
                body = f"{sep}{fixed[k]} {elements(k + 1)}".rstrip()
                return body if k < lo else f"({body})?"
            need = max(lo - k, 0)
            more = None if hi is None else hi - k
            rep_lo, rep_hi = max(need - 1, 0), None if more is None else more - 1
            rep = f'("," {sp} {item})' + ("*" if rep_hi is None else f"{{{rep_lo},{rep_hi}}}" if rep_hi else "")
            if rep_hi == 0:
                rep = ""
            elif rep_hi is None and rep_lo:
                rep = f'("," {sp} {item}){{{rep_lo},}}'
            body = f"{sep}{item} {rep}".rstrip()
            return body if need else f"({body})?"

        return self.add(name, f'"[" {sp} {elements(0)} "]" {sp}'.replace("  ", " "))

    # ------------------------------------------------------------ strings and integers
    def string(self, s, name, path):
        lo, hi = s.get("minLength", 0), s.get("maxLength")
        for k, v in (("minLength", lo), ("maxLength", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                return self.fail(f"{path}/{k}", f"{k} must be a non-negative integer")
            if v is not None and v > MAX_COUNT:
                return self.fail(f"{path}/{k}", f"{k} {v} is more than the grammar's {MAX_COUNT} repetitions")
        if hi is not None and hi < lo:
            return self.fail(path, f"maxLength {hi} < minLength {lo}: no string matches")
        sp = self.prim("space")
        if "pattern" in s or "format" in s:
            if "pattern" in s and "format" in s:
                return self.fail(path, "pattern together with format is not supported")
            if "minLength" in s or "maxLength" in s:
                return self.fail(path, f"{'pattern' if 'pattern' in s else 'format'} together with minLength / "
                                       f"maxLength is not supported")
            if "format" in s:
                fmt = s["format"]
                if fmt not in FORMATS:
                    return self.fail(path + "/format", f"format {fmt!r} is not supported (supported: "
                                                       f"{', '.join(sorted(FORMATS))})")
                return self.add(name, f'"\\"" {FORMATS[fmt]} "\\"" {sp}')
            self.prim("char")                 # an unanchored pattern side is char*
            try:
                body = regex.to_gbnf(s["pattern"])
            except regex.PatternError as e:
                return self.fail(path + "/pattern", str(e))
            return self.add(name, f'"\\"" {body} "\\"" {sp}')
        if lo == 0 and hi is None:
            return self.prim("string")
        ch = self.prim("char")
        rep = f"{ch}{{{lo},}}" if hi is None else f"{ch}{{{lo},{hi}}}"
        return self.add(name, f'"\\"" {rep} "\\"" {sp}')

    def integer(self, s, name, path):
        lo, hi = None, None
        for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            v = s.get(k)
            if v is None:
                continue
            if isinstance(v, bool):
                return self.fail(f"{path}/{k}", f"{k} as a boolean (draft 4) is not supported: give the bound")
            if not isinstance(v, (int, float)) or v != v or v in (math.inf, -math.inf):
                return self.fail(f"{path}/{k}", f"{k} must be a number")
            if k == "minimum":
                b = math.ceil(v)
            elif k == "exclusiveMinimum":
                b = math.floor(v) + 1
            elif k == "maximum":
                b = math.floor(v)
            else:
                b = math.ceil(v) - 1
            if k.endswith("inimum"):
                lo = b if lo is None else max(lo, b)
            else:
                hi = b if hi is None else min(hi, b)
        if lo is None and hi is None:
            return self.prim("integer")
        if lo is not None and hi is not None and lo > hi:
            return self.fail(path, "no integer lies between the minimum and the maximum")
        return self.add(name, f"{int_range(lo, hi)} {self.prim('space')}")


def escape(p: str) -> str:
    return p.replace("~", "~0").replace("/", "~1")


def json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


# ---------------------------------------------------------------- integer ranges
DIGITS = 16                        # integers have at most 16 digits (as the integer rule)


def _same_length(x: str, y: str) -> str:
    """Digit strings of one length from x to y (leading zeros kept)."""
    n = len(x)
    if n == 1:
        return f"[{x}-{y}]" if x != y else f'"{x}"'
    if x[0] == y[0]:
        return f'"{x[0]}" {_same_length(x[1:], y[1:])}'
    rest = f" [0-9]{{{n - 1}}}"
    alts = []
    a, b = int(x[0]), int(y[0])
    if x[1:] != "0" * (n - 1):
        alts.append(f'"{a}" {_same_length(x[1:], "9" * (n - 1))}')
        a += 1
    tail = None
    if y[1:] != "9" * (n - 1):
        tail = f'"{b}" {_same_length("0" * (n - 1), y[1:])}'
        b -= 1
    if a <= b:
        alts.append((f"[{a}-{b}]" if a != b else f'"{a}"') + rest)
    if tail:
        alts.append(tail)
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def _natural(lo: int, hi: int | None) -> str | None:
    """Naturals lo..hi (hi None: up to DIGITS digits), no leading zeros."""
    top = 10 ** DIGITS - 1 if hi is None else hi
    if lo > top:
        return None
    alts = []
    for n in range(len(str(lo)), len(str(top)) + 1):
        a, b = max(lo, 10 ** (n - 1) if n > 1 else 0), min(top, 10 ** n - 1)
        if a <= b:
            alts.append(_same_length(str(a), str(b)))
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def int_range(lo: int | None, hi: int | None) -> str:
    """A GBNF expression for the integers lo..hi in JSON (None: unbounded on that side, up to 16
    digits); no leading zeros, no -0."""
    alts = []
    if lo is None or lo < 0:                        # negatives lo..min(hi, -1): "-" and their magnitudes
        top = -1 if hi is None else min(hi, -1)
        if lo is None or lo <= top:
            neg = _natural(-top, None if lo is None else -lo)
            if neg is not None:
                alts.append(f'"-" {neg}')
    if hi is None or hi >= 0:
        pos = _natural(0 if lo is None else max(0, lo), hi)
        if pos is not None:
            alts.append(pos)
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def schema_to_gbnf(schema) -> str:
    """The GBNF grammar of the JSON texts that validate against `schema` (a dict, or JSON text).
    SchemaError lists every keyword the grammar cannot express."""
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise SchemaError(f"the schema is not JSON: {e}") from None
    c = Converter(schema)
    root = c.visit(schema, "root", "")
    if c.errors:
        raise SchemaError("JSON Schema not supported: " + "; ".join(dict.fromkeys(c.errors)))
    if root != "root":
        c.rules["root"] = root
    rules = {"root": c.rules.pop("root"), **c.rules}
    return "".join(f"{k} ::= {v}\n" for k, v in rules.items())
