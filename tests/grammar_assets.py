"""What the grammar tests share (loaded once per session): the real vocabularies fetched by
`tools/setup.sh --test` and small random-weight models (numpy forward pass) over them."""
import atexit
import functools
import os

from bitweb.commands.bench_grammar import DEFAULT_VOCABS, gguf_metadata, gguf_tokenizer
from bitweb.grammar import Vocabulary

SMOLLM2 = DEFAULT_VOCABS[0]              # SmolLM2-135M-Instruct: 49,152 tokens
QWEN2 = DEFAULT_VOCABS[1]                # llama.cpp's ggml-vocab-qwen2: 151,936 tokens


def assets_present():
    missing = [str(p) for p in DEFAULT_VOCABS if not p.exists()]
    assert not missing, f"missing {missing}: run tools/setup.sh --test"


@functools.lru_cache(maxsize=None)
def smollm2_vocab() -> Vocabulary:
    assets_present()
    return Vocabulary(gguf_tokenizer(SMOLLM2))


@functools.lru_cache(maxsize=None)
def random_model(vocab: str):
    """A 1-layer random-weight BitNet (numpy forward pass) with the tiny byte vocabulary ("bytes")
    or SmolLM2's real one ("smollm2")."""
    import tempfile
    from bitweb.authoring.makemodel import PRESETS, ModelSpec, load_vocab, write_model
    from bitweb.gguf import open_gguf
    from bitweb.numpy_model import NumpyModel
    if vocab == "smollm2":
        assets_present()
        voc = {k: v for k, v in gguf_metadata(SMOLLM2).items() if k.startswith("tokenizer.")}
        voc["tokenizer.ggml.pre"] = "llama-bpe"          # only token bytes matter here
    else:
        voc = load_vocab(vocab)
    fd, path = tempfile.mkstemp(suffix=".gguf", prefix=f"grammar-{vocab}-")
    os.close(fd)
    atexit.register(os.unlink, path)
    dims = dict(PRESETS["tiny"], n_embd=128, n_layer=1, n_head=2, n_head_kv=1, n_ff=256)
    write_model(ModelSpec(arch="bitnet-b1.58", fmt="i2_s", preset="tiny", seed=7, scale_tensors=False, **dims), voc, path)
    model = NumpyModel.from_gguf(open_gguf(path))
    return model, Vocabulary(model.tokenizer)
