"""The model catalogue's GPU figures, computed from each model's published shapes.

    .venv/bin/python tools/catalogue.py           rewrite the "gpu" field of every entry of web/catalogue.json
    .venv/bin/python tools/catalogue.py --check   exit 1 (saying which) when a "gpu" field is stale

web/catalogue.json holds the facts of each model (repository, file, size, SHA-256, license, shapes,
weight types: checked against public sources, see its "sources" / "unconfirmed" fields). This
script adds what the fit check needs (web/catalogue.mjs fit()), from bitweb's own code: the tensor
table that bitweb.authoring.makemodel lays out for those shapes and types (the published files'
layout), bitweb.generation.fit_context for the default context (the KV cache held to KV_BUDGET),
bitweb.upload.estimate_bytes for the memory at that context, and the engine's buffers: every
tensor is its own buffer, bound whole, except token_embd / output.weight, split into shards of
whole rows (upload.check_limits). tests/test_catalogue.py checks that these figures are current
and that fit() gives the verdict the engine's own checks give.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
from types import SimpleNamespace

ROOT = pathlib.Path(__file__).resolve().parent.parent
CATALOGUE = ROOT / "web" / "catalogue.json"
TABLES = ("token_embd.weight", "output.weight")


def spec_of(entry: dict):
    """makemodel.ModelSpec for the entry's shapes and types (an architecture makemodel does not know
    is laid out as llama's blocks)."""
    from bitweb.authoring import makemodel as mm
    s = entry["shape"]
    arch = entry["architecture"] if entry["architecture"] in mm.ARCHS else "llama"
    return mm.ModelSpec(arch=arch, fmt=entry["weights"].lower(), preset=entry["id"], seed=0, scale_tensors=False,
                        embd_fmt=entry["table"].lower(), output_fmt=(entry["output"] or entry["table"]).lower(),
                        tied=entry["output"] is None, n_embd=s["n_embd"], n_layer=s["n_layer"], n_head=s["n_head"],
                        n_head_kv=s["n_head_kv"], head_dim=s["head_dim"], n_ff=s["n_ff"], n_ctx=entry["context"])


def plan(entry: dict) -> list:
    """[TensorPlan]: the file's tensor table (names, shapes, types, bytes)."""
    from bitweb.authoring import makemodel as mm
    return mm.plan_tensors(spec_of(entry), entry["shape"]["n_vocab"])


def config(entry: dict):
    """What bitweb's memory and context functions read of a model.Config."""
    s = entry["shape"]
    return SimpleNamespace(n_layer=s["n_layer"], n_embd=s["n_embd"], n_ff=s["n_ff"], n_vocab=s["n_vocab"],
                           n_ctx=entry["context"], n_head=s["n_head"], n_head_kv=s["n_head_kv"], head_dim=s["head_dim"],
                           q_dim=s["n_head"] * s["head_dim"], kv_dim=s["n_head_kv"] * s["head_dim"])


def gguf_of(entry: dict):
    """What upload.estimate_bytes reads of a GGUF file: its tensor table."""
    return SimpleNamespace(tensors={t.name: t for t in plan(entry)})


def gpu_figures(entry: dict) -> dict:
    from bitweb import generation, model, upload
    from bitweb.kernels import dense
    cfg, tensors = config(entry), plan(entry)
    gf = SimpleNamespace(tensors={t.name: t for t in tensors})
    ctx, _ = generation.fit_context(cfg)
    # every tensor but the tables is one buffer, but upload.PACKED groups (QK-norm weights, Q / K / V
    # biases): one buffer per block each
    by = {t.name: t for t in tensors}
    groups = [[by[model.tensor_name(i, n)] for n in names] for i in range(cfg.n_layer)
              for names in upload.PACKED.values() if model.tensor_name(i, names[0]) in by]
    grouped = {t.name for g in groups for t in g}
    items = [(t.nbytes, t.name) for t in tensors if t.name not in TABLES and t.name not in grouped]
    items += [(sum(t.nbytes for t in g), "|".join(t.name for t in g)) for g in groups]
    items += [(4 * cfg.n_vocab, "logits"), (4 * cfg.n_ff, "FFN activations")]
    big, what = max(items, key=lambda item: item[0])     # (the first of the largest)
    tables = [{"name": t.name, "rows": t.shape[1], "rowBytes": dense.row_bytes(t.format, t.shape[0])}
              for t in tensors if t.name in TABLES]
    weights = sum(t.nbytes for t in tensors)
    return {"weightBytes": weights, "largestBuffer": big, "largestBufferName": what, "tables": tables,
            "kvBytesPerPosition": generation.kv_bytes(cfg, 1), "storageBuffersPerStage": upload.NEED_STORAGE_BUFFERS,
            "defaultContext": ctx,
            "memoryAtDefaultContext": upload.estimate_bytes(SimpleNamespace(cfg=cfg, gguf=gf), ctx)}


def load() -> dict:
    return json.loads(CATALOGUE.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="only check that the figures are current")
    args = ap.parse_args(argv)
    data = load()
    stale = []
    for entry in data["models"]:
        want = gpu_figures(entry)
        if entry.get("gpu") != want:
            stale.append(entry["id"])
            entry["gpu"] = want
    if args.check:
        if stale:
            print(f"web/catalogue.json: stale gpu figures for {', '.join(stale)}: run tools/catalogue.py", file=sys.stderr)
            return 1
        return 0
    CATALOGUE.write_text(json.dumps(data, indent=1) + "\n")
    print(f"web/catalogue.json: {len(data['models'])} models, {len(stale)} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
