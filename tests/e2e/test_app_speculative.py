"""The app's speculative decoding setting (web/app/settings.mjs speculativeOption), end to end on the
shipped default model in Chromium on SwiftShader, a CPU rasteriser: "Automatic" (the setting as it
starts) does not draft there (measured slower: PERFORMANCE.md, "Speculative decoding"). One greedy
chat asks the same question three times: Automatic, then Prompt lookup (the model's own first answer
is in the context: it is drafted and kept), then Off. Every reply equals the native engine's plain
decoding (drafting never changes greedy tokens); the drafted reply's usage has speculative {mode:
'lookup', drafted, accepted} and the Stats panel and the reply's footer show the acceptance; the
others have no usage.speculative and the panel says off; the choice survives a reload. The app's
other browser tests are in test_app.py."""
from __future__ import annotations

from tests.conftest import ROOT
from tests.e2e.app_driver import native_chat, new_app_context, no_errors

QUESTION = "What is 37 + 45?"       # asked again, the model's own first answer is in the context


def test_speculative_setting_drafts_where_it_pays_and_shows_the_acceptance(browser, server):
    path = ROOT / "web" / "models" / "bitweb-chat-i2_s.gguf"
    assert path.exists(), f"{path} is missing: the default model is part of the app"
    a = new_app_context(browser, server, {})
    page = a.page
    try:
        info = a.open(query="")
        assert info["adapter"]["software"] == "SwiftShader", info["adapter"]
        assert page.input_value("#speculative") == "auto"
        a.set(temperature=0, max_tokens=48)
        texts, usages, stats = [], [], []
        for n, setting in enumerate(["auto", "lookup", "off"], 1):
            page.select_option("#speculative", setting)
            got = a.reply(a.say(QUESTION))
            texts.append(got["text"])
            stats.append(got["stats"]["Drafted tokens kept"])
            usages.append(a.last_reply()["usage"])
            foot = page.locator(".msg.assistant").nth(n - 1).inner_text()
            spec = usages[-1].get("speculative")
            if spec:
                assert f"{spec['accepted']} of {spec['drafted']} drafted tokens kept" in foot, foot
        assert texts == native_chat(path, [QUESTION] * 3, 48)          # the same tokens, drafted or not
        recall = usages[1]["speculative"]
        assert recall["mode"] == "lookup" and 0 < recall["accepted"] <= recall["drafted"], usages
        assert stats[1] == f"{recall['accepted']} of {recall['drafted']} (prompt lookup)"
        for i in (0, 2):                                     # Automatic on a CPU rasteriser, Off
            assert "speculative" not in usages[i] and stats[i] == "off", (usages[i], stats[i])
        page.reload()                                        # the choice is kept
        a.wait_ready()
        assert page.input_value("#speculative") == "off"
        no_errors(a)
    finally:
        a.context.close()
