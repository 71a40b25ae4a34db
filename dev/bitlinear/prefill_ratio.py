"""prefill_over_decode of `bench decode` for several models, this tree against another, interleaved.

    python dev/bitlinear/prefill_ratio.py MODEL.gguf ... [--base DIR] [--rounds 1] [--prompt-tokens 64] [--tokens 32]

DIR: an unpacked older tree (e.g. `git archive main pyapp shaders | tar -x -C DIR`); its bitweb
package and shaders run through PYTHONPATH. Each round runs every model with this tree and then
with DIR, one `python -m bitweb bench decode MODEL --json` process each, and prints prefill tok/s,
decode tok/s and prefill_over_decode side by side, with the load average.
"""
import argparse, json, os, subprocess, sys


def bench(model, pythonpath, a):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run([sys.executable, "-m", "bitweb", "bench", "decode", model, "--prompt-tokens", str(a.prompt_tokens),
                          "--tokens", str(a.tokens), "--json"], capture_output=True, text=True, env=env, cwd="/tmp")
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    return json.loads(out.stdout[out.stdout.index("{"):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--base")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "pyapp")
    trees = [("this", os.path.abspath(here))] + ([("base", os.path.join(a.base, "pyapp"))] if a.base else [])
    for r in range(a.rounds):
        for m in a.models:
            for name, pp in trees:
                j = bench(m, pp, a)
                print(f"round {r + 1} {os.path.basename(m):24s} {name}: prefill {j['prefill_tok_s']:7.2f} tok/s  "
                      f"decode {j['decode_tok_s']:7.2f} tok/s  prefill_over_decode {j['prefill_over_decode']:5.2f}  "
                      f"(load {os.getloadavg()[0]:.1f})", flush=True)


main()
