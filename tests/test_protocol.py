"""The worker protocol is defined once (web/protocol.mjs): its types in web/bitweb.d.ts, the worker's
handlers (web/worker.mjs), the requests the library sends (web/bitweb.mjs) and the messages the
worker's Python side posts (bitweb.webapp) all agree with that table; its runtime checks refuse a
message that is not in it. Node runs the table; the sources are read as text."""
from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, need

TABLE_JS = """
const p = await import(process.argv[1]);
const fields = (t) => Object.fromEntries(Object.entries(t).map(([k, v]) => [k, Object.keys(v)]));
const probe = {
  ok: p.requestProblem({ id: 1, op: 'unload', engine: 3 }),
  unknownOp: p.requestProblem({ id: 1, op: 'explode' }),
  missing: p.requestProblem({ id: 1, op: 'generate', engine: 1 }),
  extra: p.requestProblem({ id: 1, op: 'stats', verbose: true }),
  msgOk: p.messageProblem({ type: 'tool_call', id: 1, index: 0, arguments: '{' }),
  msgUnknown: p.messageProblem({ type: 'shout', id: 1 }),
  msgExtra: p.messageProblem({ type: 'text', id: 1, text: 'x', colour: 'red' }),
  msgMissing: p.messageProblem({ type: 'progress', id: 1, stage: 'boot', done: 0 }),
};
console.log(JSON.stringify({ requests: fields(p.REQUESTS), messages: fields(p.MESSAGES), stages: p.STAGES, probe }));
"""


@pytest.fixture(scope="module")
def table():
    need(shutil.which("node") is not None, "node is not installed")
    p = subprocess.run(["node", "--input-type=module", "-e", TABLE_JS, str(ROOT / "web" / "protocol.mjs")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def ts_interface(src: str, name: str) -> dict:
    """{member: [field, ...]} of `export interface name { member: { field: ...; field?: ... }; ... }`
    (a field's '?' kept; nested braces inside a field's type skipped)."""
    body = re.search(rf"export interface {name} \{{\n(.*?)\n\}}", src, re.S).group(1)
    out, i = {}, 0
    for m in re.finditer(r"^  ('[^']+'|\w+): \{", body, re.M):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while depth:                                    # the member's { ... } (its fields' types may nest)
            depth += {"{": 1, "}": -1}.get(body[j], 0)
            j += 1
        inner, i = body[m.end():j - 1], j
        flat, depth = "", 0
        for ch in inner:                                # keep the top level of the member's fields only
            depth += {"{": 1, "}": -1, "<": 1, ">": -1, "(": 1, ")": -1}.get(ch, 0) if ch in "{}<>()" else 0
            flat += ch if depth == 0 and ch not in "{}<>()" else ""
        fields = re.findall(r"(?:^|;|\n)\s*(\w+\??):", flat)
        out[m.group(1).strip("'")] = fields
    return out


def ts_union(src: str, name: str) -> list:
    m = re.search(rf"export type {name} = ([^;]+);", src)
    assert m, name
    return re.findall(r"'([^']+)'", m.group(1))


DTS = (ROOT / "web" / "bitweb.d.ts").read_text(encoding="utf-8")


def test_the_types_spell_the_table(table):
    assert ts_interface(DTS, "WorkerRequests") == table["requests"]
    assert ts_interface(DTS, "WorkerMessages") == table["messages"]
    assert ts_union(DTS, "ProgressStage") == table["stages"]


def test_the_interface_reader_can_fail():
    src = "export interface X {\n  a: { b: number; c?: { d: string } };\n  'e-f': {};\n}\n"
    assert ts_interface(src, "X") == {"a": ["b", "c?"], "e-f": []}


def test_the_runtime_checks_refuse_what_is_not_in_the_table(table):
    p = table["probe"]
    assert p["ok"] is None and p["msgOk"] is None
    assert p["unknownOp"] == 'unknown request "explode"'
    assert p["missing"] == "request generate: missing request"
    assert p["extra"] == "request stats: unknown verbose"
    assert p["msgUnknown"] == 'unknown worker message "shout"'
    assert "unknown [colour]" in p["msgExtra"] and "missing [total]" in p["msgMissing"]


def test_the_worker_handles_every_request_and_no_other(table):
    src = (ROOT / "web" / "worker.mjs").read_text(encoding="utf-8")
    block = re.search(r"const HANDLERS = \{\n(.*?)\n\};", src, re.S).group(1)
    ops = re.findall(r"^  ('[^']+'|\w+): ", block, re.M)
    assert sorted(o.strip("'") for o in ops) == sorted(set(table["requests"]) - {"abort"})
    assert "msg.op === 'abort'" in src and "requestProblem(msg)" in src and "messageProblem(m)" in src


def test_the_library_sends_requests_of_the_table(table):
    src = "".join((ROOT / "web" / f).read_text(encoding="utf-8") for f in ("bitweb.mjs", "connection.mjs"))
    sent = set(re.findall(r"\bcall\('([^']+)'", src))
    assert sent and sent <= set(table["requests"]), sent - set(table["requests"])
    assert "op: 'abort', target" in src                        # (abort goes out beside call())
    handled = set(re.findall(r"m\.type === '([^']+)'", src))    # what its onmessage tells apart
    assert handled <= set(table["messages"]) and {"progress", "text", "tool_call", "device-lost", "result"} <= handled


def test_the_python_side_posts_messages_of_the_table(table):
    """Each self.send(type, rid, **fields) in bitweb.webapp names a message of the table and only
    its fields (the events of a tool call are checked in test_structured: they are passed whole)."""
    tree = ast.parse((ROOT / "pyapp" / "bitweb" / "webapp.py").read_text(encoding="utf-8"))
    sends = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "send" and n.args and isinstance(n.args[0], ast.Constant)]
    assert {n.args[0].value for n in sends} == {"progress", "text", "tool_call", "device-lost"}
    for n in sends:
        fields = {f.rstrip("?") for f in table["messages"][n.args[0].value]}
        assert {k.arg for k in n.keywords if k.arg} <= fields, (n.args[0].value, fields)
