"""The app's speculative decoding setting (web/app/settings.mjs speculativeOption), end to end on the
shipped default model (I2_S, 8-bit activations: where prompt lookup was measured to pay, so the
setting's "Automatic" drafts): one greedy chat asks the same question three times, the first two
replies with the setting as it starts (Automatic), the third with it Off. Every reply equals the
native engine's plain decoding (drafting never changes greedy tokens); a drafted reply's usage has
speculative {mode: 'lookup', drafted, accepted} and the Stats panel and the reply's footer show the
acceptance; the Off reply has no usage.speculative and the panel says off. The app's other browser
tests are in test_app.py."""
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
        assert (info["weights"], info["activations"]) == ("I2_S", "a8"), info
        assert page.input_value("#speculative") == "auto"
        a.set(temperature=0, max_tokens=48)
        texts, usages, stats = [], [], []
        for n, setting in enumerate(["auto", "auto", "off"], 1):
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
        assert usages[0]["speculative"]["mode"] == "lookup"
        assert "speculative" not in usages[2] and stats[2] == "off", (usages[2], stats[2])
        page.reload()                                        # the choice is kept
        a.wait_ready()
        assert page.input_value("#speculative") == "off"
        no_errors(a)
    finally:
        a.context.close()
