"""Structured output and tool calls for chat completions (stdlib only; runs in Pyodide): an
OpenAI-style request's `response_format`, `tools`, `tool_choice`, `parallel_tool_calls` and
bitweb's `grammar` -> the GBNF the reply must follow (bitweb.grammar), the messages and tool list
the chat template gets, and the reply split into content and tool calls as it streams.

    spec = request_spec(req)                  # RequestError(field, message) names what is wrong
    d = dialect(fmt)                          # how this chat format writes tool calls (below)
    msgs, tools = prompt_messages(fmt, messages, spec)    # -> fmt.ids(msgs, tools=tools)
    gbnf = grammar_text(spec, d)              # None: no constraint
    reply = Reply(spec, d); reply.push(piece) -> events; reply.finish() -> (content, tool_calls)

Dialects. A chat template with a tools section renders the tool list and earlier calls and
results itself; `dialect` finds out how by rendering a probe conversation:
  "hermes"   the call is `<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>`, one per
             line (Qwen2.5 / Qwen3 / QwQ, Hermes 2 Pro / 3 templates);
  "llama3"   the call is the bare object `{"name": NAME, "parameters": ARGS}`, one per reply
             (Llama 3.1 / 3.2 / 3.3 templates);
  "generic"  a template without a tools section (SmolLM2-135M-Instruct's, the built-in BitNet
             format), or one that writes a call in neither form (XML-style arguments: GLM 4.x,
             Qwen3-Coder, Qwen3.5; Cohere's action lists) or drops earlier calls (SmolLM3): the
             grammar writes a call only in a form the template itself would render back.
             The tools are described in the system message (GENERIC_TOOLS below; at the start of
             the first user message when the template refuses a system message, as Gemma's does),
             calls are written as in "hermes", an earlier call is the assistant's text and a
             tool result a user message `<tool_response>\\nCONTENT\\n</tool_response>` (several
             results in a row: one message, one block each).

The grammar. A call's JSON is the JSON Schema {"name": {"const": NAME}, ARGS_KEY: the tool's
parameters} (anyOf over the tools), so a call always parses and its arguments validate; under
tool_choice "required" the reply is one or more calls ("llama3" and parallel_tool_calls false:
exactly one), a named function one call of it, "auto" either calls or a reply that does not
start as a call would (`<tool_call>`; "llama3": `{`), "none" only such a reply. A response_format
or grammar with tools is that reply's grammar. Constrained replies turn a template's thinking off
(the grammar starts at the first token).

The reply. `Reply` holds text back while it may still become the call marker (auto), then streams
content as text events and a call as {type: "tool_call", index, call_id, name} once its name is
known and {type: "tool_call", index, arguments} pieces of its arguments' JSON text (the arguments
object's span, found by bracket depth outside strings), which add up to `function.arguments`.
finish_reason is "tool_calls" when calls ended the reply and "stop" when max_tokens ended JSON or
calls the grammar accepts (the token budget makes them complete: only free text cut short is
"length"). Stop strings apply to content only and are refused with a grammar or schema. The
library (web/bitweb.mjs) checks the messages' roles, tool_calls and tool_call_id, returns
`message.tool_calls` (content null) and streams `delta.tool_calls` as OpenAI's stream does.
"""
from __future__ import annotations

import json
import os
import re

OPEN, CLOSE = "<tool_call>", "</tool_call>"
NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
CHOICES = ("none", "auto", "required")
GENERIC_TOOLS = (                          # the generic dialect's system text (short: small models, small contexts)
    "Functions you can call (parameters as JSON Schema):\n{tools}\n"
    "To call one, reply with only:\n" + OPEN + '\n{{"name": NAME, "arguments": {{...}}}}\n' + CLOSE + "\n"
    "Results come back as <tool_response>RESULT</tool_response>.")
PROBE_NAME, PROBE_RESULT = "bitweb_probe_fn", "bitweb probe result 7"
NO_PARAMETERS = {"type": "object", "properties": {}}     # a function without parameters: {} only


class RequestError(ValueError):
    """A request field that is wrong: `field` names it (the library's settings error)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


# ------------------------------------------------------------------ the request
class Spec:
    """What a request asks for. gbnf / schema: the reply's own grammar (response_format, grammar),
    None for free text; tools: the checked tool list or None; choice: "none" | "auto" | "required"
    | a function name; parallel: more than one call allowed."""

    def __init__(self, schema=None, gbnf=None, tools=None, choice="auto", parallel=True):
        self.schema, self.gbnf, self.tools, self.choice, self.parallel = schema, gbnf, tools, choice, parallel

    @property
    def constrained(self) -> bool:
        return self.schema is not None or self.gbnf is not None or bool(self.tools and self.choice != "none")

    @property
    def calls(self) -> bool:
        """The reply may hold tool calls."""
        return bool(self.tools) and self.choice != "none"


def request_spec(req: dict) -> Spec:
    """Check response_format, grammar, tools, tool_choice and parallel_tool_calls."""
    schema = gbnf = None
    rf = req.get("response_format")
    if rf is not None:
        kind = rf.get("type") if isinstance(rf, dict) else None
        if kind == "json_object":
            schema = {"type": "object"}
        elif kind == "json_schema":
            js = rf.get("json_schema")
            if not isinstance(js, dict):
                raise RequestError("response_format.json_schema", "must be an object {name, schema, strict?}")
            if not isinstance(js.get("name"), str) or not NAME_RE.fullmatch(js["name"]):
                raise RequestError("response_format.json_schema.name", "must be 1-64 letters, digits, _ or -")
            if js.get("strict") is not None and not isinstance(js["strict"], bool):
                raise RequestError("response_format.json_schema.strict", "must be true or false")
            schema = js.get("schema", {})
            if not isinstance(schema, (dict, bool)):
                raise RequestError("response_format.json_schema.schema", "must be a JSON Schema object")
        elif kind != "text":
            raise RequestError("response_format", 'must be {type: "text"}, {type: "json_object"} or '
                                                  '{type: "json_schema", json_schema: {name, schema, strict?}}')
    if req.get("grammar") is not None:
        if not isinstance(req["grammar"], str) or not req["grammar"].strip():
            raise RequestError("grammar", "must be GBNF text (a non-empty string)")
        if schema is not None:
            raise RequestError("grammar", "give a grammar or a JSON response_format, not both")
        gbnf = req["grammar"]
    tools = check_tools(req.get("tools"))
    choice = req.get("tool_choice")
    if choice is None:
        choice = "auto"
    elif isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type") == "function" else None
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str):
            raise RequestError("tool_choice", 'must be "none", "auto", "required" or {type: "function", '
                                              "function: {name}}")
        if not tools or name not in {t["function"]["name"] for t in tools}:
            raise RequestError("tool_choice", f"names the function {name!r}, which is not among the tools")
        choice = name
    elif choice not in CHOICES:
        raise RequestError("tool_choice", f'must be "none", "auto", "required" or {{type: "function", function: '
                                          f"{{name}}}} (got {choice!r})")
    elif choice == "required" and not tools:
        raise RequestError("tool_choice", '"required" needs tools')
    parallel = req.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise RequestError("parallel_tool_calls", "must be true or false")
    spec = Spec(schema, gbnf, tools, choice, parallel is not False)
    if spec.constrained and req.get("stop") is not None and not spec.calls:
        raise RequestError("stop", "stop strings would cut a reply that must follow a grammar or schema")
    if spec.constrained and req.get("enable_thinking"):
        raise RequestError("enable_thinking", "a constrained reply (response_format, grammar, tools) starts "
                                              "with its answer: thinking must be off")
    return spec


def check_tools(tools):
    """The request's tool list checked (None: no tools)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("tools", "must be a list of {type: 'function', function: {name, description?, parameters?}}")
    out, names = [], set()
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) and t.get("type") == "function" else None
        where = f"tools[{i}]"
        if not isinstance(fn, dict):
            raise RequestError(where, "must be {type: 'function', function: {name, description?, parameters?}}")
        name = fn.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise RequestError(f"{where}.function.name", "must be 1-64 letters, digits, _ or -")
        if name in names:
            raise RequestError(f"{where}.function.name", f"{name!r} is given twice")
        names.add(name)
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise RequestError(f"{where}.function.description", "must be a string")
        params = fn.get("parameters", NO_PARAMETERS)
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise RequestError(f"{where}.function.parameters", "must be a JSON Schema of an object")
        if fn.get("strict") is not None and not isinstance(fn["strict"], bool):
            raise RequestError(f"{where}.function.strict", "must be true or false")
        out.append({"type": "function", "function": {k: fn[k] for k in ("name", "description", "parameters", "strict")
                                                     if fn.get(k) is not None}})
    return out or None


def check_messages(messages) -> list:
    """The OpenAI messages list, checked: {role: system | user, content: str}, {role: assistant,
    content: str | null, tool_calls?: [{id, type: "function", function: {name, arguments: str}}]},
    {role: tool, content: str, tool_call_id: str}."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages", "must be a non-empty list of {role, content}")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "user", "assistant", "tool"):
            raise RequestError("messages", f"{where} must be {{role: 'system' | 'user' | 'assistant' | 'tool', "
                                           f"content: string}}")
        content = m.get("content")
        calls = m.get("tool_calls") if role == "assistant" else None
        if not isinstance(content, str) and not (calls and content is None):
            raise RequestError("messages", f"{where}.content must be a string"
                                           + (" (or null beside tool_calls)" if role == "assistant" else ""))
        msg = {"role": role, "content": content}
        if calls is not None:
            msg["tool_calls"] = [_checked_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(_list(calls, where))]
        if role == "tool":
            if not isinstance(m.get("tool_call_id"), str):
                raise RequestError("messages", f"{where}.tool_call_id must be a string (the call's id)")
            msg["tool_call_id"] = m["tool_call_id"]
        out.append(msg)
    return out


def _list(x, where):
    if not isinstance(x, list):
        raise RequestError("messages", f"{where}.tool_calls must be a list")
    return x


def _checked_call(c, where) -> dict:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments"), str) \
            or not isinstance(c.get("id"), str):
        raise RequestError("messages", f"{where} must be {{id, type: 'function', function: {{name, arguments: "
                                       f"a JSON string}}}}")
    return {"id": c["id"], "type": "function", "function": {"name": fn["name"], "arguments": fn["arguments"]}}


# ------------------------------------------------------------------ the chat format
def dialect(fmt) -> str:
    """"hermes", "llama3" or "generic" (module docstring), found once per ChatFormat by rendering
    a probe conversation with one tool, one call and its result."""
    got = getattr(fmt, "_tool_dialect", None)
    if got is None:
        got = fmt._tool_dialect = _probe(fmt)
    return got


def _probe(fmt) -> str:
    if fmt.kind != "template":
        return "generic"
    tool = [{"type": "function", "function": {"name": PROBE_NAME, "description": "probe",
                                              "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
    call = {"id": "call_probe", "type": "function", "function": {"name": PROBE_NAME, "arguments": {"q": "x"}}}
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": PROBE_RESULT, "tool_call_id": "call_probe", "name": PROBE_NAME}]
    try:
        listed = fmt.render(msgs[:1], True, tools=tool)
        text = fmt.render(msgs, True, tools=tool)
    except Exception:
        return "generic"
    if PROBE_NAME not in listed or PROBE_RESULT not in text:
        return "generic"
    after = text[max(0, text.find("Hi")):]
    if _PROBE_HERMES.search(after):
        return "hermes"
    if _PROBE_LLAMA3.search(after):
        return "llama3"
    return "generic"


# the probe's call as each dialect's grammar writes it (whitespace as the template likes)
_PROBE_HERMES = re.compile(re.escape(OPEN) + r'\s*\{\s*"name"\s*:\s*"' + PROBE_NAME + r'"\s*,\s*"arguments"\s*:')
_PROBE_LLAMA3 = re.compile(r'\{\s*"name"\s*:\s*"' + PROBE_NAME + r'"\s*,\s*"parameters"\s*:')


def prompt_messages(fmt, messages: list, spec: Spec) -> tuple:
    """(messages, tools) for fmt.ids: the tool list and tool messages as the dialect wants them."""
    tools = spec.tools
    if not tools and not any(m["role"] == "tool" or m.get("tool_calls") for m in messages):
        return [{"role": m["role"], "content": m["content"]} for m in messages], None
    if dialect(fmt) != "generic":
        names = {}
        out = []
        for i, m in enumerate(messages):
            if m.get("tool_calls"):
                calls = []
                for c in m["tool_calls"]:
                    names[c["id"]] = c["function"]["name"]
                    calls.append({**c, "function": {"name": c["function"]["name"],
                                                    "arguments": _arguments(c, i)}})
                out.append({"role": "assistant", "content": m["content"] or "", "tool_calls": calls})
            elif m["role"] == "tool":
                out.append({**m, "name": names.get(m["tool_call_id"], "")})
            else:
                out.append(m)
        return out, tools
    out = []
    for m in messages:
        if m.get("tool_calls"):
            text = "\n".join(_call_text(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"])
            out.append({"role": "assistant", "content": (m["content"] + "\n" if m["content"] else "") + text})
        elif m["role"] == "tool":
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool": True})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    out = [{"role": m["role"], "content": m["content"]} for m in out]
    if tools:
        listed = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
        intro = GENERIC_TOOLS.format(tools=listed)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + intro}
        elif _takes_system(fmt) or not out or out[0]["role"] != "user":
            out.insert(0, {"role": "system", "content": intro})
        else:                      # a template that refuses a system message (Gemma's): the first user message
            out[0] = {"role": "user", "content": intro + "\n\n" + out[0]["content"]}
    return out, None


def _takes_system(fmt) -> bool:
    """Whether the chat format renders a system message (found once, cached on fmt)."""
    got = getattr(fmt, "_takes_system", None)
    if got is None:
        try:
            fmt.render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], True)
            got = True
        except Exception:
            got = False
        fmt._takes_system = got
    return got


def _arguments(c, i):
    try:
        return json.loads(c["function"]["arguments"])
    except ValueError:
        raise RequestError("messages", f"messages[{i}]: the arguments of tool call {c['id']!r} are not JSON") from None


def _call_text(name: str, arguments: str) -> str:
    return f'{OPEN}\n{{"name": {json.dumps(name)}, "arguments": {arguments}}}\n{CLOSE}'


# ------------------------------------------------------------------ the grammar
def prefixed(gbnf: str, prefix: str) -> str:
    """The grammar with every rule name prefixed (definitions and references; the text inside
    literals, character classes, token elements and comments is left as it is). GrammarError
    for a grammar that does not parse."""
    from bitweb.grammar.gbnf import Parser
    names = set(Parser(gbnf).parse())
    out, i, n = [], 0, len(gbnf)
    while i < n:
        c = gbnf[i]
        if c in "\"[<":
            end = {"\"": "\"", "[": "]", "<": ">"}[c]
            j = i + 1
            while j < n and gbnf[j] != end:
                j += 2 if gbnf[j] == "\\" else 1
            out.append(gbnf[i:j + 1])
            i = j + 1
        elif c == "#":
            j = gbnf.find("\n", i)
            j = n if j < 0 else j
            out.append(gbnf[i:j])
            i = j
        elif c.isalnum() or c == "-":
            j = i
            while j < n and (gbnf[j].isalnum() or gbnf[j] == "-"):
                j += 1
            word = gbnf[i:j]
            out.append(prefix + word if word in names else word)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _rebase_refs(schema, base: str):
    """A schema placed at JSON pointer `base` of a larger one: its local $refs made absolute."""
    if isinstance(schema, dict):
        return {k: (("#" + base + v[1:]) if k == "$ref" and isinstance(v, str) and v.startswith("#")
                    else _rebase_refs(v, base)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_rebase_refs(v, base) for v in schema]
    return schema


def call_schema(tools: list, key: str = "arguments", only: str | None = None) -> dict:
    """The JSON Schema of one call's object: {"name": one tool's name, key: its parameters}."""
    picked = [t["function"] for t in tools if only is None or t["function"]["name"] == only]
    branches = []
    for k, fn in enumerate(picked):
        base = (f"/anyOf/{k}" if len(picked) > 1 else "") + f"/properties/{key}"
        branches.append({"type": "object", "properties": {"name": {"const": fn["name"]},
                                                          key: _rebase_refs(fn.get("parameters", NO_PARAMETERS), base)},
                         "required": ["name", key], "additionalProperties": False})
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def _literal(text: str) -> str:
    return json.dumps(text)                # a GBNF literal: JSON string escapes are GBNF's


def _not_starting_with(marker: str) -> str:
    """GBNF of any text that does not start with marker."""
    alts = []
    for i, ch in enumerate(marker):
        cls = "[^" + ("\\" + ch if ch in "]^\\-" else ch) + "]"
        head = _literal(marker[:i]) + " " if i else ""
        alts.append(f"{head}({cls} .*)?" if i else f"({cls} .*)?")
    return " | ".join(alts)


def grammar_text(spec: Spec, dialect_name: str):
    """The reply's GBNF (None: unconstrained). SchemaError / GrammarError name what is wrong."""
    from bitweb.grammar import GrammarError, schema_to_gbnf
    try:
        reply = spec.gbnf if spec.gbnf is not None else schema_to_gbnf(spec.schema) if spec.schema is not None else None
    except GrammarError as e:
        raise RequestError("response_format.json_schema.schema", str(e)) from None
    if not spec.tools or (spec.choice == "none" and reply is not None):
        return reply
    marker = "{" if dialect_name == "llama3" else OPEN
    rules = []
    if reply is not None:
        rules.append(prefixed(reply, "r-"))
        free = "r-root"
    else:
        rules.append(f"free ::= {_not_starting_with(marker)}\n")
        free = "free"
    if spec.choice == "none":
        return f"root ::= {free}\n" + "".join(rules)
    key = "parameters" if dialect_name == "llama3" else "arguments"
    only = spec.choice if spec.choice not in CHOICES else None
    try:
        call = prefixed(schema_to_gbnf(call_schema(spec.tools, key, only)), "c-")
    except GrammarError as e:
        raise RequestError("tools", f"a function's parameters: {e}") from None
    many = spec.parallel and only is None and dialect_name != "llama3"
    if dialect_name == "llama3":
        calls = "c-root"
    else:
        one = f'{_literal(OPEN + chr(10))} c-root {_literal(chr(10) + CLOSE)}'
        calls = f'{one} ("\\n" {one})*' if many else one
    root = f"calls | {free}" if spec.choice == "auto" else "calls"
    return f"root ::= {root}\ncalls ::= {calls}\n" + call + "".join(rules)


class Grammars:
    """Compiled grammars by their GBNF text, the newest `size` (each keeps its mask caches, which
    make a repeated schema cheap: keep one Grammars per worker)."""

    def __init__(self, size: int = 16):
        self.size, self.by_text = size, {}

    def get(self, gbnf: str, field: str):
        from bitweb.grammar import Grammar, GrammarError
        g = self.by_text.pop(gbnf, None)
        if g is None:
            try:
                g = Grammar(gbnf)
            except GrammarError as e:
                raise RequestError(field, str(e)) from None
            if len(self.by_text) >= self.size:
                del self.by_text[next(iter(self.by_text))]
        self.by_text[gbnf] = g                          # newest last
        return g

    def constraint(self, spec: Spec, fmt, vocab):
        """The request's Constraint (None: free text); vocab() gives the engine's Vocabulary."""
        text = grammar_text(spec, dialect(fmt))
        if text is None:
            return None
        if spec.gbnf is not None:
            self.get(spec.gbnf, "grammar")              # its own errors, in its own line numbers
        field = "tools" if spec.calls else "grammar" if spec.gbnf is not None else "response_format"
        return self.get(text, field).constraint(vocab(), stop_ids=fmt.stop_ids)


# ------------------------------------------------------------------ the reply
def call_id() -> str:
    return "call_" + os.urandom(12).hex()


class Reply:
    """Splits a streamed reply into content and tool calls. push(text) -> events:
    ("content", text) | ("call", {"index", "call_id", "name"}) | ("arguments", {"index", "arguments"});
    finish() -> the last events; then `calls`: [{id, type, function: {name, arguments}}]. The
    arguments streamed for a call are exactly its function.arguments (the JSON text the model wrote)."""

    def __init__(self, spec: Spec, dialect_name: str):
        self.calls_ok = spec.calls
        self.mode = "calls" if spec.calls and spec.choice != "auto" else "content" if not spec.calls else None
        self.llama = dialect_name == "llama3"
        self.marker = "{" if self.llama else OPEN
        self.key = "parameters" if self.llama else "arguments"
        self.buf = ""                    # text not yet turned into events
        self.content = []
        self.calls = []
        self.state = "open"              # calls: open (wrapper) | head (up to the arguments) | args | tail
        self.depth, self.in_str, self.esc = 0, False, False

    def push(self, text: str) -> list:
        if self.mode == "content":
            self.content.append(text)
            return [("content", text)]
        self.buf += text
        if self.mode is None:            # "auto": a call starts with the marker
            if self.marker.startswith(self.buf):
                return []
            self.mode = "calls" if self.buf.startswith(self.marker) else "content"
            if self.mode == "content":
                text, self.buf = self.buf, ""
                self.content.append(text)
                return [("content", text)]
        return self._calls()

    def _calls(self) -> list:
        ev = []
        while self.buf:
            if self.state == "open":
                m = re.match(r"\s*", self.buf) if self.llama else re.match(r"\n?" + re.escape(OPEN) + r"\n", self.buf)
                if self.llama:
                    self.buf = self.buf[m.end():]
                    self.state = "head"
                    continue
                if m is None:
                    return ev            # more to come (or the end of the reply)
                self.buf = self.buf[m.end():]
                self.state = "head"
            elif self.state == "head":
                m = re.match(r'\{\s*"name"\s*:\s*"([A-Za-z0-9_-]+)"\s*,\s*"' + self.key + r'"\s*:\s*', self.buf)
                if m is None or m.end() == len(self.buf):
                    return ev            # (the arguments' first character has not come)
                self.calls.append({"id": call_id(), "type": "function", "function": {"name": m.group(1), "arguments": ""}})
                ev.append(("call", {"index": len(self.calls) - 1, "call_id": self.calls[-1]["id"], "name": m.group(1)}))
                self.buf = self.buf[m.end():]
                self.state, self.depth, self.in_str, self.esc = "args", 0, False, False
            elif self.state == "args":
                end = self._scan()
                part, self.buf = self.buf[:end], self.buf[end:]
                if part:
                    self.calls[-1]["function"]["arguments"] += part
                    ev.append(("arguments", {"index": len(self.calls) - 1, "arguments": part}))
                if self.depth == 0 and not self.in_str and part:
                    self.state = "tail"
                elif not self.buf:
                    return ev
            else:                        # tail: spaces, "}", then the wrapper's end
                m = re.match(r"\s*\}\s*" + ("" if self.llama else re.escape(CLOSE)), self.buf)
                if m is None:
                    return ev
                self.buf = self.buf[m.end():]
                self.state = "open"
        return ev

    def _scan(self) -> int:
        """How much of buf belongs to the arguments' JSON value (which is an object)."""
        for i, ch in enumerate(self.buf):
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif ch == "\\":
                    self.esc = True
                elif ch == '"':
                    self.in_str = False
            elif ch == '"':
                self.in_str = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return i + 1
        return len(self.buf)

    def finish(self) -> list:
        """The last events: text held back as a possible start of a call is content after all
        (`calls`: the tool calls; `content`: the content pieces)."""
        if self.mode == "calls" or not self.buf:
            return []
        text, self.buf = self.buf, ""
        self.content.append(text)
        return [("content", text)]
