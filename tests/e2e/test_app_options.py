"""The app's settings form takes its choices and bounds from the library's table (bitweb.OPTIONS,
bitweb.SETTINGS: pyapp/bitweb/options.py), as the page shows them: the load options' choices with
their labels and defaults, each sampling field's range (a bound the setting excludes: the field's
first step above it), the context's minimum. tests/test_options.py checks the rest of the sides."""
from bitweb import options
from tests.e2e.conftest import new_page

FORM_JS = """() => ({
  selects: Object.fromEntries(['activations', 'kv-cache'].map((id) => { const s = document.getElementById(id);
    return [id, { value: s.value, options: [...s.options].map((o) => [o.value, o.textContent]) }]; })),
  fields: Object.fromEntries([...document.querySelectorAll('#settings input')].map((i) => [i.name, [i.min, i.max, i.step]])),
  context: document.getElementById('max-context').min,
})"""


def test_the_form_shows_the_tables_choices_and_bounds(browser, server):
    ctx = browser.new_context()
    ctx.route("**/*.gguf", lambda route: route.abort())        # no model loads (it would set max_tokens' max)
    try:
        page = new_page(ctx)
        page.goto(server)
        page.wait_for_function("document.querySelectorAll('#kv-cache option').length > 0", timeout=60_000)
        form = page.evaluate(FORM_JS)
    finally:
        ctx.close()
    for sid, key in (("activations", "activations"), ("kv-cache", "kv_cache")):
        opt = options.DATA[key]
        assert form["selects"][sid] == {"value": opt["default"], "options": [list(c) for c in opt["choices"].items()]}
    assert sorted(form["fields"]) == sorted(options.REQUEST)
    for name, (lo, hi, step) in form["fields"].items():
        b = options.REQUEST[name]
        want_lo = b.lo + float(step) if b.lo_open else b.lo
        assert (float(lo), float(hi)) == (want_lo, b.hi), (name, lo, hi)
    assert form["context"] == str(options.MIN_CONTEXT)
