"""A loaded engine in the worker (bitweb.webapp): what the page knows about it (model_info), its
grammar vocabulary, and its conversation's saved KV cache: before a reply the longest saved prefix
of the prompt is restored, after it the cache is saved (the files: web/kvstore.mjs, whose find /
save / drop the worker hands to WebApp.set_kv_store). Stdlib only."""
from __future__ import annotations

import json
import time


def model_info(gf, cfg, name: str) -> dict:
    """What the page shows about a model (all plain values)."""
    types = {}
    for t in gf.tensors.values():
        types[t.format.name] = types.get(t.format.name, 0) + 1
    info = {"name": name, "file_size": gf.file_size, "header_bytes": gf.data_offset,
            "tensors": len(gf.tensors), "tensor_types": types,
            "title": gf.metadata.get("general.name") or name}
    if cfg is not None:
        for k in ("arch", "n_vocab", "n_ctx", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff",
                  "linear_type", "tied"):
            info[k] = getattr(cfg, k, None)
        if info["linear_type"] is not None:
            info["linear_type"] = info["linear_type"].name
    return info


class Slot:
    """One loaded engine and what the page knows about it."""

    def __init__(self, eng, info: dict, fmt):
        self.eng, self.info, self.fmt = eng, info, fmt
        self.busy = False
        self.draft = None                # the Slot of its draft model (set_draft), for speculative "draft"
        self.vocab = None                # bitweb.grammar Vocabulary, made for the first constrained reply
        self.unsaved = None              # the prompt length of a reply whose KV cache save_kv saves next

    def vocabulary(self):
        if self.vocab is None:
            from bitweb.grammar import Vocabulary
            self.vocab = Vocabulary(self.eng.tokenizer)
        return self.vocab

    async def save_kv(self, store, eid: int) -> dict:
        """Save the KV cache of this engine's last reply into store (web/kvstore.mjs save), once.
        -> {"saved": file name or None, "ms"}; a failed save is no error (the reply stood; it is
        just not saved)."""
        t0, name, prompt = time.perf_counter(), None, self.unsaved
        if prompt is not None and store is not None and self.eng.cached_ids:
            self.unsaved = None
            try:
                name = await store.save(eid, json.dumps(self.eng.cached_ids), await self.eng.export_kv(), prompt)
            except Exception as e:
                print(f"bitweb: the KV cache was not saved: {e}")
        return {"saved": name if isinstance(name, str) else None, "ms": round((time.perf_counter() - t0) * 1000, 1)}

    async def restore(self, store, eid: int, ids) -> int:
        """Restore the longest saved prefix of ids from store (short of its last token, which the
        reply runs) when it is longer than what the engine holds; a saved cache the engine refuses
        is deleted. -> the positions restored (0: none)."""
        from bitweb.generation import common_prefix
        eng = self.eng
        have = common_prefix(eng.cached_ids, ids)
        if len(ids) - 1 <= have:
            return 0
        try:
            hit = await store.find(eid, json.dumps(ids[:-1]), have)
        except Exception as e:
            print(f"bitweb: no saved KV cache: {e}")
            return 0
        if hit is None or not hasattr(hit, "data"):    # (undefined, or null: jsnull)
            return 0
        try:
            eng.restore_kv(ids[:int(hit.n)], hit.data, int(hit.rows))
            return int(hit.n)
        except Exception as e:
            print(f"bitweb: a saved KV cache was refused and deleted: {e}")
            eng.reset()
            await store.drop(str(hit.name))
            return 0
