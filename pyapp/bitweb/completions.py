"""OpenAI chat-completion semantics, one home for the library's worker (bitweb.webapp) and the CLI's
chat path (`bitweb generate --chat`, bitweb.commands.generate).

Stdlib only (a browser module). What a request means, apart from how it travels:

- the request: the sampling settings (checked against bitweb.options REQUEST: type and range, an
  error naming the field), max_tokens, stop strings (at most MAX_STOPS, non-empty), speculative
  decoding ({"mode": one of bitweb.options SPECULATIVE} or null: `checked_speculative`), the messages
  (bitweb.structured.check_messages: tool calls and results too) and the structured-output fields
  (structured.request_spec); `Request.parse` checks them all;
- the prompt: the messages in the model's chat format (bitweb.chat.ChatFormat), with its thinking
  switch (off for a constrained reply: the grammar starts at the reply's first token) and the
  request's tools (`prompt_ids`);
- the reply (`Completion`): streamed content with stop strings cut (text that may start a stop
  string is held back until it cannot), tool calls streamed apart (structured.Reply), the think
  block a template opened in the prompt carried at the reply's start, then the finish reason
  ("stop", "length", "abort", "tool_calls"), the usage (with the drafting's counts when the request
  asked for it) and the timing.

Errors are `bitweb.errors.AppError(kind, message, **extra)`: the kinds are the library's (a
settings error names its field); the CLI prints them as one line.
"""
from __future__ import annotations

import json
import math
import time

from bitweb import structured
from bitweb.errors import AppError
from bitweb.options import REQUEST, SAMPLER, SPECULATIVE

# Sampling settings a request may carry: name -> (integer?, lowest, highest, lowest excluded?, default)
# (bitweb.options REQUEST; the default is the sampler's, max_tokens none: what the context holds)
SETTINGS = {name: (b.integer, b.lo, b.hi, b.lo_open, SAMPLER[b.sampler].default if b.sampler else None)
            for name, b in REQUEST.items()}
MAX_STOPS = 4                           # stop strings per request (as OpenAI's API)
THINK_OPEN = "<think>\n"
# the engine's stop reasons -> OpenAI's finish_reason
FINISH = {"eos": "stop", "eot": "stop", "max_tokens": "length", "context": "length", "stopped": "abort"}


def checked_setting(name: str, value):
    """`value` as the setting's type, or AppError("settings") naming the field and the range."""
    integer, lo, hi, lo_open, _ = SETTINGS[name]
    want = (f"an integer from {lo} to {hi}" if integer else
            f"a number {'above' if lo_open else 'from'} {lo}{' and at most' if lo_open else ' to'} {hi}")
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
          and (value > lo if lo_open else value >= lo) and value <= hi
          and (not integer or value == int(value)))
    if not ok:
        raise AppError("settings", f"{name} = {value!r}: must be {want}", field=name)
    return int(value) if integer else float(value)


def params_from(req: dict):
    """SamplingParams, max_tokens (None: as many as the context holds) and the stop strings of a
    create() request. Every value is checked (type and range); an unknown name is an error too."""
    from bitweb.sampling import SamplingParams
    vals = {}
    for name in SETTINGS:
        if req.get(name) is not None:
            vals[name] = checked_setting(name, req[name])
    stop = req.get("stop")
    if stop is None:
        stops = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise AppError("settings", f"stop = {stop!r}: must be a string or a list of strings", field="stop")
    if len(stops) > MAX_STOPS or any(not s for s in stops):
        raise AppError("settings", f"stop: at most {MAX_STOPS} non-empty strings", field="stop")
    kw = {REQUEST[k].sampler: v for k, v in vals.items() if REQUEST[k].sampler}
    return SamplingParams(**kw), vals.get("max_tokens"), stops


def checked_speculative(value):
    """A request's `speculative`: null / absent (plain decoding) or {"mode": one of SPECULATIVE} ->
    Engine.generate's speculative (None or the mode), else AppError("settings") naming the field
    (web/bitweb.mjs checks it with the same rules and messages: tests/test_options.py)."""
    if value is None:
        return None
    modes = " or ".join(json.dumps(m) for m in SPECULATIVE)
    if not isinstance(value, dict):
        raise _speculative_error("speculative", f"must be {{mode: {modes}}} or null (got {_shown(value)})")
    for k in value:
        if k != "mode":
            raise _speculative_error(f"speculative.{k}", "not a speculative option (mode is the one)")
    if value.get("mode") not in SPECULATIVE:
        raise _speculative_error("speculative.mode", f"must be {modes} (got {_shown(value.get('mode'))})")
    return value["mode"]


def _speculative_error(field: str, why: str) -> AppError:
    return AppError("settings", f"{field}: {why}", field=field)


def _shown(v) -> str:
    """v as JSON, as the library's JSON.stringify shows it (undefined / absent: null)."""
    try:
        return json.dumps(v, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(v)


def structured_call(fn, *args):
    """fn(*args) of bitweb.structured, its RequestError as a settings error naming the field."""
    try:
        return fn(*args)
    except structured.RequestError as e:
        raise AppError("settings", str(e), field=e.field) from None


def checked_messages(messages) -> list:
    """The OpenAI messages list, checked (structured.check_messages: tool calls and results too)."""
    return structured_call(structured.check_messages, messages)


def chat_format(eng):
    """The file's chat format (bitweb.chat.ChatFormat: its own template, run with jinja2 from
    the archive, with its thinking switch; or the built-in BitNet format). A template that
    cannot be run makes the model unsupported."""
    from bitweb.chat import ChatFormat
    try:
        return ChatFormat.from_tokenizer(eng.tokenizer)
    except Exception as e:
        raise AppError("unsupported", f"the file's chat template cannot be used: {e}") from None


def thinking_for(fmt, enable_thinking, constrained: bool):
    """The thinking switch a prompt is made with: off for a constrained reply on a template that
    has one (the grammar starts at the reply's first token), else as asked."""
    return False if constrained and fmt.has_thinking else enable_thinking


def prompt_ids(fmt, messages, enable_thinking=None, spec=None) -> list:
    """The prompt of checked messages; spec (bitweb.structured.Spec): the request's tools."""
    msgs, tools = structured_call(structured.prompt_messages, fmt, messages, spec or structured.Spec())
    return fmt.ids(msgs, enable_thinking=enable_thinking, tools=tools)


class Request:
    """A create() request, checked: messages, SamplingParams, max_tokens (None: what the context
    holds), stop strings, the structured-output Spec, the thinking switch the prompt gets and the
    speculative mode (None: plain decoding; else Engine.generate's speculative)."""

    def __init__(self, messages, params, max_tokens, stops, spec, thinking, speculative=None):
        self.messages, self.params, self.max_tokens = messages, params, max_tokens
        self.stops, self.spec, self.thinking = stops, spec, thinking
        self.speculative = speculative

    @classmethod
    def parse(cls, req: dict, fmt) -> "Request":
        messages = checked_messages(req.get("messages"))
        params, max_tokens, stops = params_from(req)
        speculative = checked_speculative(req.get("speculative"))
        spec = structured_call(structured.request_spec, req)
        return cls(messages, params, max_tokens, stops, spec,
                   thinking_for(fmt, req.get("enable_thinking"), spec.constrained), speculative)

    def prompt(self, fmt) -> list:
        return prompt_ids(fmt, self.messages, self.thinking, self.spec)

    def budget(self, ids: list, n_ctx: int) -> int:
        """Tokens the reply may take: max_tokens within the context's room; AppError("context")
        when the prompt leaves no room."""
        if len(ids) > n_ctx - 1:
            raise AppError("context", f"the conversation has {len(ids)} tokens but the context holds "
                                      f"{n_ctx} (room for a reply needs at most {n_ctx - 1}): "
                                      "drop old turns or start a new chat",
                           prompt_tokens=len(ids), context=n_ctx)
        room = n_ctx - len(ids)
        return room if self.max_tokens is None else min(self.max_tokens, room)


class Completion:
    """One reply as it streams: feed the engine's tokens to `on_token`; `on_text(text)` gets content
    as it is decoded (never text of a stop string: a possible start of one is held back), and
    `on_tool_call(event)` each tool call's start and pieces of its arguments (structured.Reply).
    `stopped()` is true once a stop string was found (the engine stops there). `result(res, ...)`
    is the finished reply: text, tool_calls, finish_reason, usage.

    opens_thinking: the prompt left a think block open (ChatFormat.prompt_opens_thinking), so the
    reply carries "<think>\\n" first, as a reply that opened it itself would."""

    def __init__(self, stops=(), on_text=None, on_tool_call=None, reply=None, constraint=None,
                 opens_thinking=False):
        self.stops, self.reply, self.constraint = list(stops), reply, constraint
        self.on_text = on_text or (lambda text: None)
        self.on_tool_call = on_tool_call or (lambda event: None)
        self.text = []                  # all decoded text
        self.sent = 0                   # characters of it passed to on_text
        self.hit = None                 # where a stop string starts
        self.tokens = 0                 # tokens generated so far
        self.t0 = time.perf_counter()
        self.first = None               # perf_counter() of the first token
        if opens_thinking:
            self.text.append(THINK_OPEN)
            self._flush(len(THINK_OPEN))

    def _flush(self, upto: int):
        if upto > self.sent:
            self.on_text("".join(self.text)[self.sent:upto])
            self.sent = upto

    def stopped(self) -> bool:
        return self.hit is not None

    def on_token(self, tok_id, piece):
        """The engine's on_token; tok_id None: the decoder's final flush, not a token."""
        if tok_id is not None:
            self.tokens += 1
        if self.first is None:
            self.first = time.perf_counter()
        if not piece or self.hit is not None:
            return
        if self.reply is None:
            self._content(piece)
            return
        for kind, v in self.reply.push(piece):    # tool calls stream apart; stop strings cut content only
            if kind == "content":
                self._content(v)
            else:
                self.on_tool_call(v)

    def _content(self, piece):
        self.text.append(piece)
        if not self.stops:
            self._flush(self.sent + len(piece))
            return
        full = "".join(self.text)
        found = [i for i in (full.find(st, self.sent) for st in self.stops) if i >= 0]
        if found:
            self.hit = min(found)
            self._flush(self.hit)
            return
        hold = max(overlap(full, st) for st in self.stops)   # a stop string may be starting
        self._flush(len(full) - hold)

    def result(self, res, prompt_tokens: int, context: int | None = None) -> dict:
        """{"text", "tool_calls"?, "finish_reason", "context"?, "usage"} of the finished generation
        `res` (bitweb.generation's result: ids, stop_reason; speculative, drafted, accepted: usage's
        "speculative" {mode, drafted, accepted} when it drafted); context: the engine's n_ctx."""
        calls = []
        if self.reply is not None:
            for _, held in self.reply.finish():     # (text held back as the start of a call that never came)
                if self.hit is None:
                    self._content(held)
            calls = self.reply.calls
        self.t1 = time.perf_counter()
        full = "".join(self.text)
        if self.hit is not None:
            full = full[:self.hit]
            finish = "stop"
        else:
            self._flush(len(full))
            finish = FINISH[res.stop_reason]
            if finish == "length" and self.constraint is not None and self.constraint.accepts() \
                    and (self.reply is None or self.reply.mode == "calls"):
                finish = "stop"            # JSON or calls that are complete: the budget made them end in time
            if calls and finish == "stop":
                finish = "tool_calls"
        n = len(res.ids)
        out = {"text": full, **({"tool_calls": calls} if calls else {}), "finish_reason": finish}
        if context is not None:
            out["context"] = context
        out["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
        if getattr(res, "speculative", ""):          # drafted: tokens verified; accepted: the ones kept
            out["usage"]["speculative"] = {"mode": res.speculative, "drafted": res.drafted, "accepted": res.accepted}
        return out

    def timing(self, res, prompt_tokens: int, cached_tokens: int, prefill_plan: str,
               tokens_after_stop: int | None = None) -> dict:
        """The reply's timing (after result()): total, time to the first token, prefill and decode
        rates, the engine's per-token dispatches and host calls; tokens_after_stop: tokens the
        engine made after a Stop arrived."""
        t0, t1, first, n = self.t0, self.t1, self.first, len(res.ids)
        read = prompt_tokens - cached_tokens
        timing = {"total_ms": round((t1 - t0) * 1000, 1),
                  "ttft_ms": round((first - t0) * 1000, 1) if first is not None else None,
                  "prefill_ms": res.prefill_ms, "prefill_tokens": read, "cached_tokens": cached_tokens,
                  "decode_ms_per_token": res.decode_ms_per_token,
                  "dispatches_per_token": res.dispatches_per_token,
                  "host_calls_per_token": res.host_calls_per_token, "stop_reason": res.stop_reason,
                  "prefill_plan": prefill_plan}
        if tokens_after_stop is not None:
            timing["tokens_after_stop"] = tokens_after_stop
        if res.prefill_ms:
            timing["prefill_tok_s"] = round(read / (res.prefill_ms / 1000), 2)
        if first is not None and n > 1 and t1 > first:
            timing["decode_tok_s"] = round((n - 1) / (t1 - first), 2)
        elif res.decode_ms_per_token:
            timing["decode_tok_s"] = round(1000 / res.decode_ms_per_token, 2)
        return timing


def overlap(text: str, stop: str) -> int:
    """Length of the longest end of `text` that is a beginning of `stop` (held back: it may
    become the stop string)."""
    for k in range(min(len(stop) - 1, len(text)), 0, -1):
        if text.endswith(stop[:k]):
            return k
    return 0
