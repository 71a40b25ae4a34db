"""Time to first token of the next reply after a reload, with and without the conversation's saved
KV cache (web/kvstore.mjs), in headless Chromium (SwiftShader). Per model and round, in a fresh
browser context: load, one reply to a user message of about --tokens tokens (the conversation
saved), reload, load, then the next reply's first token is timed from the page (create() to the
first streamed text: the lookup, the restore and the prefill of what is not restored); then the
saved caches are cleared, the page reloaded and the same reply timed again (everything prefilled).
Loads are not timed. Prints one line per run and the medians.

    .venv/bin/python dev/perf/kv_resume.py [--models default,smollm2] [--tokens 1000] [--rounds 2]

The default model holds 512 positions: its conversation is cut to --tokens or 440, whichever is less.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.e2e.conftest import CHROME_ARGS, CHROMIUM  # noqa: E402
sys.path.insert(0, str(ROOT / "tools"))
from serving import served  # noqa: E402  (tools/serving.py)

SMOLLM2 = ROOT / "build" / "assets" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PAGE = "kv-bench.html"
SENTENCE = "The river runs past the old mill and the children count the boats that go by. "

FIRST = """async ([url, tokens, sentence]) => {
  const bitweb = await import('/bitweb.mjs');
  const engine = await bitweb.load(url ?? bitweb.DEFAULT_MODEL);
  const size = async (k) => (await engine.tokenize([{ role: 'user', content: sentence.repeat(k) }])).length;
  const per = (await size(11)) - (await size(10));
  const k = Math.max(1, Math.floor((tokens - (await size(1)) + per) / per));
  const conv = [{ role: 'user', content: sentence.repeat(k) }];
  const r = await engine.chat.completions.create({ messages: conv, max_tokens: 8 });
  conv.push({ role: 'assistant', content: r.choices[0].message.content });
  localStorage.setItem('kvbench', JSON.stringify(conv));
  await bitweb.cache.conversations();               // (the save runs after the reply: done before the reload)
  return r.usage.prompt_tokens;
}"""

NEXT = """async ([url, clear]) => {
  const bitweb = await import('/bitweb.mjs');
  if (clear) await bitweb.cache.clearConversations();
  const engine = await bitweb.load(url ?? bitweb.DEFAULT_MODEL);
  const messages = [...JSON.parse(localStorage.getItem('kvbench')), { role: 'user', content: 'Go on.' }];
  const t0 = performance.now();
  let ttft = null, usage = null, timing = null;
  for await (const c of await engine.chat.completions.create({ messages, max_tokens: 4, stream: true })) {
    if (ttft === null && (c.choices[0].delta.content || c.choices[0].finish_reason)) ttft = performance.now() - t0;
    if (c.usage) { usage = c.usage; timing = c.timing; }
  }
  const saved = await bitweb.cache.conversations();
  const save = (await bitweb.stats()).kvSave;
  return { ttft, prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details.cached_tokens, saved_bytes: saved.bytes,
           plan: timing.prefill_plan, restore_ms: timing.restore_ms, save_ms: save?.ms ?? null };
}"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="default,smollm2")
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright
    served_dir = ROOT / "build" / "web" / f"kv-bench-{os.getpid()}"
    with served() as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS)
        urls = {"default": None}
        if "smollm2" in args.models:
            served_dir.mkdir(parents=True, exist_ok=True)
            os.link(SMOLLM2, served_dir / SMOLLM2.name)
            urls["smollm2"] = f"{server}build/web/{served_dir.name}/{SMOLLM2.name}"
        results = {}
        try:
            for r in range(args.rounds):
                for name in args.models.split(","):
                    tokens = min(args.tokens, 440) if name == "default" else args.tokens
                    ctx = browser.new_context()
                    ctx.route(server + PAGE, lambda route: route.fulfill(status=200, content_type="text/html",
                                                                         body="<!doctype html><title>kv bench</title>"))
                    page = ctx.new_page()
                    page.goto(server + PAGE)
                    prompt = page.evaluate(FIRST, [urls[name], tokens, SENTENCE])
                    for how, clear in (("saved", False), ("none", True)):
                        page.reload()
                        got = page.evaluate(NEXT, [urls[name], clear])
                        results.setdefault((name, how), []).append(got)
                        print(f"round {r} {name} first prompt {prompt} tokens; next reply, saved cache {how}: "
                              f"ttft {got['ttft']:.0f} ms, prompt {got['prompt']}, cached {got['cached']}, restore {got['restore_ms']} ms, "
                              f"save {got['save_ms']} ms, read by {got['plan']}, saved {got['saved_bytes']} bytes", flush=True)
                    ctx.close()
        finally:
            browser.close()
            shutil.rmtree(served_dir, ignore_errors=True)
    print("\n| model | prompt tokens | cached (saved) | TTFT with the saved cache | TTFT without | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.models.split(","):
        w, wo = results[(name, "saved")], results[(name, "none")]
        a, b = statistics.median(x["ttft"] for x in w), statistics.median(x["ttft"] for x in wo)
        print(f"| {name} | {w[0]['prompt']} | {w[0]['cached']} | {a:.0f} ms | {b:.0f} ms | {b / a:.1f}x |")


if __name__ == "__main__":
    main()
