"""`bitweb generate` writing model text to a terminal: a token that holds escape sequences
(set the title, clear the screen), a C1 CSI, a bidi override or a carriage return is shown
escaped on a terminal (a pty here), never run; piped output and --json stay exact.

The model is a tiny generated one whose vocabulary has one more NORMAL token, EVIL, made the
greedy first reply token: its row of token_embd (also the tied F16 LM head) is set to 2x the row
of the token greedy decoding picks first, so its logit doubles (the argmax whenever that logit
is > 0; checked). Runs use the numpy backend (no GPU needed; the streaming code is shared)."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import tty

import pytest

from bitweb.commands.terminal import UNSAFE, for_terminal
from tests.conftest import ROOT, make_last_token_first

EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[31m\x9b2J\u202eevil\rX\x08\x7f"
PROMPT = "Hello there"
ENV = dict(os.environ, PYTHONIOENCODING="utf-8")


def test_every_unsafe_character_is_escaped_and_nothing_else():
    assert {chr(c) for c in range(0x20)} - UNSAFE == {"\n", "\t"}
    assert "\x7f" in UNSAFE and all(chr(c) in UNSAFE for c in range(0x80, 0xA0))
    assert {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"} <= UNSAFE
    for c in map(chr, range(0x3000)):
        out = for_terminal(c)
        if c in UNSAFE:
            assert out.startswith("\\") and len(out) > 1 and not set(out) & UNSAFE, (c, out)
        else:
            assert out == c
    assert for_terminal(EVIL) == "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m\\x9b2J\\u202eevil\\rX\\x08\\x7f"
    assert for_terminal("line\n\ttab é שלום \u200f 😀") == "line\n\ttab é שלום \u200f 😀"


def generate(model, *extra, stdout=subprocess.PIPE):
    cmd = [sys.executable, "-m", "bitweb", "generate", str(model), "--prompt", PROMPT, "--temperature", "0",
           "--max-tokens", "3", "--ignore-eos", "--backend", "numpy", *extra]
    return subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, cwd=ROOT, env=ENV, timeout=300)


def on_a_terminal(model, *extra) -> bytes:
    """What `bitweb generate` writes when its stdout is a terminal (a pty in raw mode: no
    newline translation), read from the pty's master side."""
    master, slave = pty.openpty()
    tty.setraw(slave)
    try:
        p = generate(model, *extra, stdout=slave)
        os.close(slave)
        slave = None
        assert p.returncode == 0, p.stderr.decode()
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:                  # EIO: the slave side is closed and drained
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)


@pytest.fixture(scope="module")
def evil_model(tmp_path_factory):
    from bitweb.authoring.makemodel import PRESETS, ModelSpec, load_vocab, write_model
    from bitweb.tokenizer import BYTE_TO_CHAR
    path = tmp_path_factory.mktemp("term") / "evil.gguf"
    voc = load_vocab("bytes")
    voc["tokenizer.ggml.tokens"] = list(voc["tokenizer.ggml.tokens"]) + ["".join(BYTE_TO_CHAR[b] for b in EVIL.encode())]
    voc["tokenizer.ggml.token_type"] = list(voc["tokenizer.ggml.token_type"]) + [1]
    write_model(ModelSpec(arch="bitnet-b1.58", fmt="i2_s", preset="tiny", seed=5, scale_tensors=False,
                          **PRESETS["tiny"]), voc, path)
    new_id = make_last_token_first(path, json.loads(generate(path, "--json").stdout)["ids"][0])
    res = json.loads(generate(path, "--json").stdout)
    assert res["ids"][0] == new_id and res["text"].startswith(EVIL), res       # the model says EVIL first
    return path, res


def test_terminal_gets_escapes_shown_not_run(evil_model):
    path, res = evil_model
    out = on_a_terminal(path).decode("utf-8")
    assert for_terminal(EVIL) in out, out
    assert not set(out) & UNSAFE, repr(out)                          # no raw control character at all
    assert out == for_terminal(res["text"]) + "\n"                   # everything else as it was


def test_pipe_and_json_are_exact(evil_model):
    path, res = evil_model
    p = generate(path)                                               # piped: unchanged
    assert p.returncode == 0
    assert p.stdout.decode("utf-8") == res["text"] + "\n"
    out = on_a_terminal(path, "--json").decode("utf-8")              # --json on a terminal: exact
    got = json.loads(out)
    assert {k: got[k] for k in ("prompt_ids", "ids", "text", "stop_reason")} == \
        {k: res[k] for k in ("prompt_ids", "ids", "text", "stop_reason")}
    assert not set(out) & UNSAFE                                     # the JSON encoder escapes them itself
