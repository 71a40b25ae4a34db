"""`bitweb bench floor` (bitweb.floor): the per-token breakdown runs and its figures follow from one
another as the module docstring defines them. No timed assertions: times are only checked to be
positive and finite; the dispatch counts are checked against the model's shape."""
import json
import math

import pytest

from bitweb import commands as cli
from bitweb.floor import describe_floor
from bitweb.gguf import open_gguf
from tests.test_bench import close


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model(seed=5)


def check_floor(r: dict, n_layer: int) -> None:
    """The fields of a bench floor result (natively or from Chromium) and how they derive."""
    assert r["bench"] == "floor" and r["device"] and r["timing"] and r["model"]
    for k in ("wall_ms", "wall_serial_ms", "gpu_ms", "gpu_summed_ms", "floor_ms", "floor_gpu_ms", "fixed_ms", "slope_ms"):
        assert r[k] > 0 and math.isfinite(r[k]), k
    assert r["encode_ms"] >= 0 and math.isfinite(r["per_dispatch_us"])
    assert close(r["overhead_ms"], r["wall_ms"] - r["gpu_ms"]) and close(r["serial_overhead_ms"], r["wall_serial_ms"] - r["gpu_ms"])
    assert 0 <= r["overhead_share"] <= 1 and close(r["overhead_share"], max(0.0, r["overhead_ms"]) / r["wall_ms"])
    assert 0 < r["floor_share"] <= 1
    n = r["dispatches_per_token"]
    assert r["slope_dispatches"] == 4 * n and r["slope_ms"] > 0
    assert close(r["per_dispatch_us"], (r["slope_ms"] - r["fixed_ms"]) / (4 * n - 1) * 1e3, rel=0.05)
    fam = {f["family"]: f for f in r["families"]}
    assert sum(f["dispatches"] for f in fam.values()) == n
    assert close(sum(f["ms"] for f in fam.values()), r["gpu_summed_ms"]) and close(sum(f["share"] for f in fam.values()), 1.0)
    # one embedding row, one argmax, one attention per layer; the rest per layer except the LM head
    assert fam["embedding:embed"]["dispatches"] == 1 and fam["sampling:argmax"]["dispatches"] == 1
    assert fam["attention:decode"]["dispatches"] == n_layer
    per_token = {k for k in fam if k.split(":")[0] in ("embedding", "sampling", "lmhead", "dense")}
    assert sum(fam[k]["dispatches"] for k in fam if k not in per_token) == r["dispatches_per_layer"] * n_layer
    assert [f["ms"] for f in r["families"]] == sorted((f["ms"] for f in r["families"]), reverse=True)


def test_floor_cli(tiny, capsys):
    """One run through the CLI (--json), its figures checked; the text form; bad arguments."""
    assert cli.main(["bench", "floor", tiny, "--json", "--tokens", "4", "--prompt-tokens", "6", "--repeats", "1"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["prompt_tokens"] == 6 and r["decoded_tokens"] == 3 and r["position"] == 6 + 2
    check_floor(r, open_gguf(tiny).get("block_count"))
    text = describe_floor(r)
    assert f"{r['dispatches_per_token']} dispatches per token" in text and "attention:decode" in text
    assert cli.main(["bench", "floor", tiny, "--tokens", "1"]) == 1
    assert "--tokens >= 2" in capsys.readouterr().err
    assert cli.main(["bench", "floor"]) == 1
    assert "bench floor needs a MODEL.gguf" in capsys.readouterr().err
