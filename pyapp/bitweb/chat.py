"""Chat formats: the file's own chat template, or the built-in BitNet b1.58 2B4T format.

`ChatFormat.from_tokenizer(tok)` (or `.from_metadata(md)`) picks one per model file:

* **built-in 2B4T format** (stdlib only) for files without `tokenizer.chat_template`,
  with the 2B4T template, or with the placeholder the published 2B4T GGUF embeds
  (see below). The model's template (microsoft/bitnet-b1.58-2B-4T
  tokenizer_config.json, `bitweb.authoring.vocab.TEMPLATE_2B4T`) renders each message as

      Role: content<|eot_id|>          Role = role.capitalize(), content = content.strip()

  and, for a generation prompt, ends with "Assistant: ". BOS comes from the
  tokenizer (add_bos_token), so the full prompt is

      <|begin_of_text|>System: ...<|eot_id|>User: ...<|eot_id|>Assistant: ...<|eot_id|>User: ...<|eot_id|>Assistant: 

  with no newlines anywhere. The GGUF upload (ggml-model-i2_s.gguf) embeds a
  placeholder from Microsoft's converter ("Human: ...\\n\\nBITNETAssistant: " +
  eos), which is not the trained format; ik_llama.cpp's "bitnet" renderer writes
  "System: " + content without <|eot_id|>. `detect_template` calls both the
  model's template and that placeholder "bitnet".

* **the file's template** (any other `tokenizer.chat_template`), run with jinja2
  the way transformers' `apply_chat_template` runs it: an
  ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
  loopcontrols extension, `{% generation %}` blocks accepted, the globals
  `raise_exception`, `strftime_now`, `dict` and `namespace` (no underscore
  names), transformers' `tojson` filter (no HTML escaping), and the variables
  `messages`, `tools` (None, or the request's tool list: OpenAI's [{type:
  "function", function: {name, description, parameters}}]), `documents` (none),
  `add_generation_prompt`,
  `bos_token` / `eos_token` / `pad_token` / `unk_token` (the token texts the file
  names) and `enable_thinking` when the caller sets it. A render that runs too
  long (deadline), builds too much text or asks for huge ranges / repetitions
  is stopped with a ChatError. jinja2 is imported only for such files (natively a
  dependency; in the browser the copy set-up bundles into the web archive).

Messages for templates: {role, content} with role system / user / assistant / tool;
an assistant message may carry `tool_calls` (OpenAI's [{id, type: "function",
function: {name, arguments}}], content then a str or None) and a tool message
`tool_call_id` and `name` (bitweb.structured builds them; templates read what
transformers passes them).

Ids. The rendered text is tokenized the way llama.cpp tokenizes a rendered prompt
(special tokens parsed, BOS added when the file's add_bos_token is set and the
text does not start with it), except that **message text can never produce
special tokens**: before rendering, every CONTROL token text inside a message or
the tool list (content, tool call names and arguments, tool descriptions and
schemas, dict keys too; e.g. "<|im_end|>") gets a marker character inserted after its first character,
so the only special tokens in the rendered text are the template's own; the text
between them is then tokenized with the markers removed and special tokens off
(USER_DEFINED tokens such as <think> are matched everywhere, as llama.cpp and HF
do). The marker is a character found in no message and not in the template. A
template that changes message text so that removing the markers does not give
the same text as rendering the real messages is refused (ChatError), never
guessed at.

Stops. `ChatFormat.stop_ids` = the tokenizer's stop ids (the file's EOS, EOT and
EOM) plus the template's end-of-turn token: the first CONTROL token the template
writes after an assistant message (<|im_end|> for ChatML, <|eot_id|> for 2B4T).

Thinking. `has_thinking` is true when the template renders the generation prompt
differently with `enable_thinking` true and false (Qwen3: off opens the
assistant turn with "<think>\\n\\n</think>\\n\\n"); `thinking_default` says what
the template does when the variable is not set. `split_thinking` separates a
reply's <think>...</think> block from its answer.

Multi-turn: the ids of a conversation are a prefix of the ids of the same
conversation with more messages for the 2B4T format; templates may re-render
earlier turns (Qwen3 drops old <think> blocks), so an engine reusing a KV cache
keeps `bitweb.generation.common_prefix(cached_ids, new_ids)` tokens.
"""
from __future__ import annotations

import contextvars
import json
import time

BOS, EOT = "<|begin_of_text|>", "<|eot_id|>"
ROLES = ("system", "user", "assistant")
TEMPLATE_ROLES = ("system", "user", "assistant", "tool")
GENERATION_PROMPT = "Assistant: "
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

RENDER_SECONDS = 10.0          # a template render past this is stopped
RENDER_MAX_CHARS = 4_000_000   # rendered text longer than this is refused
RENDER_MAX_RANGE = 1_000_000   # range() items per render, all calls together


class ChatError(ValueError):
    """A malformed message list or a chat template that cannot be used; the message names
    the message index and field, or what the template did."""


def _strings(x):
    """Every str inside x (dict keys and values, list items), depth first."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _strings(v)


def _map_strings(x, fn):
    """x with fn applied to every str inside it (dict keys too)."""
    if isinstance(x, str):
        return fn(x)
    if isinstance(x, dict):
        return {_map_strings(k, fn): _map_strings(v, fn) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_map_strings(v, fn) for v in x]
    return x


def _template_messages(messages) -> list[dict]:
    """The messages a template gets: {role, content} (roles TEMPLATE_ROLES), plus an assistant
    message's tool_calls (content then str or None) and a tool message's tool_call_id / name."""
    if not isinstance(messages, (list, tuple)):
        raise ChatError(f"messages must be a list of {{role, content}} dicts, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") if isinstance(m, dict) and m.get("role") == "assistant" else None
        if calls is not None:
            if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
                raise ChatError(f"messages[{i}].tool_calls must be a list of dicts")
            if m.get("content") is not None and not isinstance(m.get("content"), str):
                raise ChatError(f"messages[{i}].content must be a str or None beside tool_calls")
            out.append({"role": "assistant", "content": m.get("content"), "tool_calls": list(calls)})
            continue
        (role, content), = _checked([m], TEMPLATE_ROLES, i)
        msg = {"role": role, "content": content}
        if role == "tool":
            for key in ("tool_call_id", "name"):
                if m.get(key) is not None:
                    if not isinstance(m[key], str):
                        raise ChatError(f"messages[{i}].{key} must be a str")
                    msg[key] = m[key]
        out.append(msg)
    return out


def _checked(messages, roles=ROLES, first: int = 0) -> list[tuple[str, str]]:
    """[(role, content)] after checking the message list's shape."""
    if not isinstance(messages, (list, tuple)):
        raise ChatError(f"messages must be a list of {{role, content}} dicts, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages, first):
        if not isinstance(m, dict):
            raise ChatError(f"messages[{i}] must be a dict with 'role' and 'content', got {type(m).__name__}")
        role, content = m.get("role"), m.get("content")
        if role not in roles:
            raise ChatError(f"messages[{i}].role is {role!r}; expected one of {', '.join(roles)}")
        if not isinstance(content, str):
            raise ChatError(f"messages[{i}].content must be a str, got {type(content).__name__}")
        out.append((role, content))
    return out


# ------------------------------------------------------------- built-in 2B4T

def _bitnet_turns(messages):
    return [(role.capitalize() + ": ", content.strip()) for role, content in _checked(messages)]


def format_chat(messages, add_generation_prompt: bool = True) -> str:
    """The 2B4T prompt text, starting with <|begin_of_text|> (encode it with add_bos=False,
    parse_special=True; or use chat_ids, which cannot be fooled by special-token text
    inside a message)."""
    text = BOS + "".join(head + body + EOT for head, body in _bitnet_turns(messages))
    return text + GENERATION_PROMPT if add_generation_prompt else text


def chat_ids(tokenizer, messages, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of format_chat(messages): BOS and <|eot_id|> as their ids, message text
    tokenized as plain text (a "<|eot_id|>" typed by a user stays text)."""
    if tokenizer.bos_id is None or EOT not in tokenizer.token_to_id:
        raise ChatError("the vocabulary lacks <|begin_of_text|> (bos) or <|eot_id|>, "
                        "which the BitNet chat format needs")
    eot = tokenizer.token_to_id[EOT]
    ids = [tokenizer.bos_id]
    for head, body in _bitnet_turns(messages):
        ids += tokenizer.encode(head + body, add_bos=False, parse_special=False)
        ids.append(eot)
    if add_generation_prompt:
        ids += tokenizer.encode(GENERATION_PROMPT, add_bos=False, parse_special=False)
    return ids


def detect_template(template) -> str:
    """'bitnet' when the file's tokenizer.chat_template is absent, the 2B4T template, or
    the placeholder embedded in the published GGUF; 'template' otherwise (run it)."""
    if not template:
        return "bitnet"
    t = "".join(str(template).split())                 # compare without whitespace
    if "capitalize+':'" in t and "<|eot_id|>" in t and "'Assistant:'" in t:
        return "bitnet"
    if "BITNETAssistant" in t:
        return "bitnet"
    return "template"


def split_thinking(text: str, opened: bool = False) -> tuple:
    """(thinking, answer) of a reply. A reply that starts (after whitespace) with <think>,
    or any reply when `opened` (the prompt already opened the block), has its text up to
    </think> as `thinking` (newlines at its ends stripped) and the rest, leading newlines
    stripped, as `answer`; while </think> has not arrived, everything is thinking and the
    answer is "". Otherwise thinking is None and the answer is the text unchanged."""
    if not opened:
        s = text.lstrip()
        if not s.startswith(THINK_OPEN):
            return None, text
        text = s[len(THINK_OPEN):]
    i = text.find(THINK_CLOSE)
    if i < 0:
        return text.strip("\n"), ""
    return text[:i].strip("\n"), text[i + len(THINK_CLOSE):].lstrip("\n")


# ------------------------------------------------------------ jinja2 templates

class _Budget:
    def __init__(self):
        self.deadline = time.monotonic() + RENDER_SECONDS
        self.range_left = RENDER_MAX_RANGE

    def tick(self):
        if time.monotonic() > self.deadline:
            raise ChatError(f"the chat template ran longer than {RENDER_SECONDS:g} s")


_BUDGET = contextvars.ContextVar("bitweb_chat_budget", default=None)
_ENV = None
_COMPILED = {}


def _tick():
    b = _BUDGET.get()
    if b is not None:
        b.tick()


def _environment():
    """The jinja2 environment transformers' _compile_jinja_template builds (built once)."""
    global _ENV
    if _ENV is not None:
        return _ENV
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
        import jinja2.utils
    except ImportError as e:
        raise ChatError(f"this model's chat template needs jinja2, which is not installed ({e})") from None
    from datetime import datetime

    class Generation(jinja2.ext.Extension):
        """{% generation %}...{% endgeneration %}: transformers marks assistant text with it; renders its body."""
        tags = {"generation"}

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context, operator, left, right):
            if operator == "*":
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) \
                            and len(seq) * n > RENDER_MAX_CHARS:
                        raise ChatError("the chat template repeats a sequence past the output limit")
            elif isinstance(right, int) and not isinstance(right, bool) and abs(right) > 4096 \
                    and isinstance(left, int):
                raise ChatError(f"the chat template raises to the power {right} (limit 4096)")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja2's signature)
            _tick()
            return super().call(__context, __obj, *args, **kwargs)

        def getattr(self, obj, attribute):
            _tick()
            return super().getattr(obj, attribute)

        def getitem(self, obj, argument):
            _tick()
            return super().getitem(obj, argument)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    def safe_range(*args):
        rng = jinja2.sandbox.safe_range(*args)
        b = _BUDGET.get()
        if b is not None:
            b.range_left -= len(rng)
            if b.range_left < 0:
                raise ChatError(f"the chat template asks for more than {RENDER_MAX_RANGE} range() items")
        return rng

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):  # noqa: N805 (jinja2's signature trick)
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a chat template cannot set the namespace name {name!r}")

    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                       namespace=TemplateNamespace, range=safe_range)
    _ENV = env
    return env


def _compile(template: str):
    compiled = _COMPILED.get(template)
    if compiled is None:
        env = _environment()
        import jinja2
        try:
            compiled = env.from_string(template)
        except jinja2.TemplateSyntaxError as e:
            raise ChatError(f"tokenizer.chat_template does not compile: {e.message} (line {e.lineno})") from None
        if len(_COMPILED) >= 8:
            _COMPILED.clear()
        _COMPILED[template] = compiled
    return compiled


def render_template(template: str, messages, add_generation_prompt: bool = True, enable_thinking=None,
                    tools=None, **variables) -> str:
    """`template` rendered as transformers' apply_chat_template(tokenize=False) renders it.
    messages: [{role, content}] (roles system, user, assistant, tool; the module docstring's
    tool fields); tools: the tool list or None; variables: e.g. bos_token / eos_token texts.
    enable_thinking None: the variable is not set."""
    return _render(_compile(template), _template_messages(messages), add_generation_prompt, enable_thinking,
                   variables, tools)


def _render(compiled, msgs, add_generation_prompt, enable_thinking, variables, tools=None) -> str:
    import jinja2
    kw = dict(variables, messages=msgs, tools=tools or None, documents=None,
              add_generation_prompt=bool(add_generation_prompt))
    if enable_thinking is not None:
        kw["enable_thinking"] = bool(enable_thinking)
    token = _BUDGET.set(_Budget())
    try:
        parts, n = [], 0
        for chunk in compiled.generate(**kw):
            n += len(chunk)
            if n > RENDER_MAX_CHARS:
                raise ChatError(f"the chat template wrote more than {RENDER_MAX_CHARS} characters")
            parts.append(chunk)
        return "".join(parts)
    except ChatError:
        raise
    except jinja2.TemplateError as e:
        raise ChatError(f"the chat template failed: {e.message or type(e).__name__}") from None
    except Exception as e:        # template code raising TypeError, RecursionError ...
        raise ChatError(f"the chat template failed: {type(e).__name__}: {e}") from None
    finally:
        _BUDGET.reset(token)


def _free_char(texts) -> str:
    """A character none of `texts` contains (Unicode noncharacters first)."""
    seen = set()
    for t in texts:
        seen.update(t)
    for cp in (*range(0xFDD0, 0xFDF0), *range(0xF0000, 0x110000)):
        c = chr(cp)
        if c not in seen:
            return c
    raise ChatError("no free marker character")   # unreachable: texts are finite


# ------------------------------------------------------------------- format

class ChatFormat:
    """How one model file turns messages into prompt ids (see the module docstring).

    kind            "bitnet" (built-in 2B4T format) or "template" (the file's jinja template)
    template        the template text (None for "bitnet" without one)
    has_thinking    the template has an enable_thinking switch
    thinking_default  what the template does without the switch (True: thinks)
    end_of_turn_id  the template's end-of-turn token id (None if it writes none)
    stop_ids        tokenizer.stop_ids | {end_of_turn_id}
    """

    def __init__(self, tokenizer, template: str | None = None, kind: str | None = None):
        self.tokenizer = tokenizer
        self.template = template
        self.kind = kind or detect_template(template)
        self.has_thinking = False
        self.thinking_default = False
        self._opened = {}
        tok = tokenizer
        if self.kind == "bitnet":
            self.end_of_turn_id = tok.token_to_id.get(EOT)
        else:
            if not template:
                raise ChatError("kind 'template' needs a chat template")
            self._compiled = _compile(template)
            self._variables = {name: tok.tokens[i] for name, i in
                               (("bos_token", tok.bos_id), ("eos_token", tok.eos_id),
                                ("pad_token", tok.pad_id), ("unk_token", tok.unk_id)) if i is not None}
            self.end_of_turn_id = self._find_end_of_turn()
            if "enable_thinking" in template:
                on, off, unset = (self._probe_prompt(flag) for flag in (True, False, None))
                self.has_thinking = on is not None and off is not None and on != off
                self.thinking_default = self.has_thinking and unset == on
        extra = {self.end_of_turn_id} if self.end_of_turn_id is not None else set()
        self.stop_ids = frozenset(tok.stop_ids | extra)

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "ChatFormat":
        """The format for a loaded Tokenizer (its chat_template decides the kind)."""
        return cls(tokenizer, tokenizer.chat_template)

    @classmethod
    def from_metadata(cls, md: dict) -> "ChatFormat":
        """The format for GGUF metadata (builds the Tokenizer)."""
        from bitweb.tokenizer import Tokenizer
        return cls.from_tokenizer(Tokenizer.from_metadata(md))

    _PROBES = ([{"role": "user", "content": "Hi"}],
               [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}])

    def _probe_prompt(self, enable_thinking):
        """A generation prompt for a one-question conversation (None if the template refuses both
        probes, e.g. one that raises unless some other message shape comes first)."""
        for probe in self._PROBES:
            try:
                return self.render(probe, True, enable_thinking)
            except ChatError:
                continue
        return None

    def _find_end_of_turn(self):
        """The first CONTROL token the template writes after an assistant message's text."""
        reply = "bitweb probe reply 7"
        for probe in ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": reply}],
                      [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                       {"role": "assistant", "content": reply}]):
            try:
                text = self.render(probe, add_generation_prompt=False)
            except ChatError:
                continue
            at = text.rfind(reply)
            ctl = self.tokenizer.control_re
            if at >= 0 and ctl is not None:
                m = ctl.search(text, at + len(reply))
                if m is not None:
                    return self.tokenizer.token_to_id[m.group()]
            return None
        return None

    def render(self, messages, add_generation_prompt: bool = True, enable_thinking=None, tools=None) -> str:
        """The prompt text (what transformers' apply_chat_template(tokenize=False) gives for
        templates; format_chat for the built-in format, which starts with BOS). tools: the
        template's `tools` (the built-in format has none: bitweb.structured writes them as text)."""
        if self.kind == "bitnet":
            if tools:
                raise ChatError("the built-in BitNet chat format has no tools section")
            return format_chat(messages, add_generation_prompt)
        return _render(self._compiled, _template_messages(messages), add_generation_prompt, enable_thinking,
                       self._variables, tools)

    def ids(self, messages, add_generation_prompt: bool = True, enable_thinking=None, tools=None) -> list[int]:
        """Prompt token ids; message text never becomes special tokens (module docstring).
        enable_thinking: True / False sets the template's switch, None leaves it unset."""
        tok = self.tokenizer
        if self.kind == "bitnet":
            if tools:
                raise ChatError("the built-in BitNet chat format has no tools section")
            return chat_ids(tok, messages, add_generation_prompt)
        msgs = _template_messages(messages)
        ctl, marker, safe, safe_tools = tok.control_re, "", msgs, tools
        if ctl is not None and any(ctl.search(t) for t in _strings([msgs, tools])):
            marker = _free_char([self.template, *self._variables.values(), *_strings([msgs, tools])])
            mark = lambda t: ctl.sub(lambda x: x.group()[0] + marker + x.group()[1:], t)   # noqa: E731
            safe, safe_tools = _map_strings(msgs, mark), _map_strings(tools, mark)
        text = _render(self._compiled, safe, add_generation_prompt, enable_thinking, self._variables, safe_tools)
        if marker:
            real = _render(self._compiled, msgs, add_generation_prompt, enable_thinking, self._variables, tools)
            if text.replace(marker, "") != real:
                raise ChatError("the chat template rewrites message text that contains special-token text, "
                                "so it cannot be kept from becoming special tokens; remove the special-token "
                                "text (e.g. <|...|>) from the messages")
        ids = []
        for part in tok.split_special(text, parse_special=True):
            if isinstance(part, int):
                ids.append(part)
            else:
                ids += tok.encode(part.replace(marker, "") if marker else part, add_bos=False, parse_special=False)
        if tok.add_bos and tok.bos_id is not None and ids[:1] != [tok.bos_id]:
            ids.insert(0, tok.bos_id)
        return ids

    def prompt_opens_thinking(self, enable_thinking=None) -> bool:
        """True when the generation prompt leaves a <think> block open, so the reply starts
        inside it (templates that write "<think>\\n" themselves)."""
        if self.kind == "bitnet" or not self.has_thinking:
            return False
        key = None if enable_thinking is None else bool(enable_thinking)
        if key not in self._opened:
            text = self._probe_prompt(key) or ""
            self._opened[key] = text.rfind(THINK_OPEN) > text.rfind(THINK_CLOSE)
        return self._opened[key]

    def split_reply(self, text: str, enable_thinking=None) -> tuple:
        """split_thinking(text) for a reply to this format's prompt: (thinking or None, answer)."""
        if self.kind == "bitnet":
            return None, text
        return split_thinking(text, self.prompt_opens_thinking(enable_thinking))
