"""A small Qwen-style tokenizer for generated test models (CPython, needs HF `tokenizers`).

`qwen_vocab()` returns GGUF tokenizer metadata shaped like a Qwen3 file's
(what llama.cpp's converter writes for Qwen3 / Bonsai): model "gpt2", pre
"qwen2", a byte-level BPE, then the added tokens <|endoftext|> (bos and
padding), <|im_start|>, <|im_end|> (eos) as CONTROL and <think>, </think> as
USER_DEFINED (Qwen3 marks them not special, and llama.cpp's converter keeps
them USER_DEFINED), add_bos_token false, and the Qwen3 chat template.

The BPE is trained here, offline and deterministically, with HF `tokenizers`
configured as transformers' Qwen2Tokenizer is (NFC normalizer, the Qwen2
split regex, ByteLevel without its own regex) on TRAIN_TEXT: a few
paragraphs of several languages, code and numbers. `vocab_size` counts the
BPE tokens (256 byte symbols + merges); the 5 added tokens come after them.
"""
from __future__ import annotations

import pathlib
import tempfile

# transformers' Qwen2Tokenizer (models/qwen2/tokenization_qwen2.py) PRETOKENIZE_REGEX
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CONTROL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
USER_TOKENS = ("<think>", "</think>")

# The chat template of Qwen/Qwen3-0.6B (tokenizer_config.json chat_template; Qwen3's
# other sizes and the Bonsai files carry the same text).
QWEN3_CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, "
    "\\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>')"
    " and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set content = message.content %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in message.content %}\n"
    "                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
    "                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n')"
    ".split('<think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n')"
    " + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}")

# Training text: chat-like English, other languages and scripts, code, numbers.
TRAIN_TEXT = """\
The model reads the question, thinks about it, and then answers in a short sentence.
Users ask the assistant to explain things: how the weather works, why the sky is blue, what a token is.
The assistant answers: "A token is a piece of text; the tokenizer splits the text into tokens."
Then the user says thank you, and the assistant says you're welcome. It's that simple, isn't it?
We've seen that they'll need more examples; I'd rather write them now than later. You're right.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 12 25 42 100 128 256 512 1024 2048 4096 65536 3.14159 2.71828 1e-6
Dates like 2024-05-17 and 1999-12-31, times like 12:30 and 09:45, prices like $19.99 and 4,50 €.
def tokenize(text):
    pieces = split(text)
    return [bpe(piece) for piece in pieces]

for i in range(10):
    if i % 2 == 0:
        print(i, "is even")
    else:
        print(i, "is odd")

function add(a, b) { return a + b; }
const xs = [1, 2, 3].map(x => x * 2);
SELECT name, count(*) FROM users WHERE age > 18 GROUP BY name;
Deutsch: Die Katze schläft auf dem Sofa, und der Hund läuft über die Straße. Grüße aus München!
Français : Le chat dort sur le canapé ; l'enfant mange une pomme. Ça va très bien, merci.
Español: El perro corre por el parque y los niños juegan. ¿Dónde está la biblioteca? ¡Qué bien!
Português: O gato está dormindo e a menina lê um livro. Não há problema, obrigado.
Русский: Кошка спит на диване, а собака бегает по улице. Спасибо, всё хорошо.
Ελληνικά: Η γάτα κοιμάται στον καναπέ και ο σκύλος τρέχει στον δρόμο.
中文：猫在沙发上睡觉，狗在街上跑。今天天气很好，我们去公园散步吧。谢谢你的帮助。
日本語：猫はソファで寝ています。犬は道を走っています。今日はいい天気ですね。ありがとう。
한국어: 고양이가 소파에서 자고 있고 개가 길에서 뛰고 있습니다. 감사합니다.
العربية: القطة نائمة على الأريكة والكلب يجري في الشارع. شكرا جزيلا.
עברית: החתול ישן על הספה והכלב רץ ברחוב. תודה רבה.
हिन्दी: बिल्ली सोफे पर सो रही है और कुत्ता सड़क पर दौड़ रहा है। धन्यवाद।
ไทย: แมวนอนอยู่บนโซฟาและสุนัขวิ่งอยู่บนถนน ขอบคุณมาก
Tiếng Việt: Con mèo đang ngủ trên ghế sofa và con chó chạy trên đường. Cảm ơn bạn.
Emoji: 🙂 😀 🚀 ✅ ❤️ 👍 🎉 🐱 🐶
"""


def train_qwen_bpe(vocab_size: int = 1024, text: str = TRAIN_TEXT):
    """A `tokenizers.Tokenizer`: byte-level BPE with `vocab_size` BPE tokens trained on `text`
    with the Qwen2 normalizer and pre-tokenizer, then the Qwen chat tokens added."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in CONTROL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in USER_TOKENS])
    return tok


def qwen_vocab(vocab_size: int = 1024) -> dict:
    """GGUF tokenizer metadata of the trained Qwen-style vocabulary (see the module docstring)."""
    from bitweb.authoring.vocab import vocab_from_tokenizer_json
    tok = train_qwen_bpe(vocab_size)
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "tokenizer.json"
        tok.save(str(path))
        md = vocab_from_tokenizer_json(path)
    ids = {t: i for i, t in enumerate(md["tokenizer.ggml.tokens"])}
    return {**md, "tokenizer.ggml.pre": "qwen2",
            "tokenizer.ggml.bos_token_id": ids["<|endoftext|>"],
            "tokenizer.ggml.eos_token_id": ids["<|im_end|>"],
            "tokenizer.ggml.padding_token_id": ids["<|endoftext|>"],
            "tokenizer.ggml.add_bos_token": False,
            "tokenizer.chat_template": QWEN3_CHAT_TEMPLATE}
