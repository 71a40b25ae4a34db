"""The web tree's layout: the app's modules (web/app/) import downward only (no cycle), every
relative import of a browser module names a file that is there, and the page loads the app's
entry module."""
import re

from tests.conftest import ROOT

WEB = ROOT / "web"
IMPORT = re.compile(r"""^\s*(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]""", re.M)


def relative_imports(path) -> list[str]:
    """The static imports of a module that are relative paths ('./x.mjs', '../y.mjs')."""
    found = [a or b for a, b in IMPORT.findall(path.read_text(encoding="utf-8"))]
    return [f for f in found if f.startswith(".")]


def graph(paths) -> dict:
    """{module: {modules of `paths` it imports}}."""
    names = {p.resolve() for p in paths}
    return {p.resolve(): {(p.parent / f).resolve() for f in relative_imports(p)} & names for p in paths}


def cycle(g: dict) -> list:
    """One import cycle of graph g as a list of its nodes, or [] when there is none."""
    state, stack = {}, []

    def visit(n):
        state[n] = "open"
        stack.append(n)
        for m in sorted(g.get(n, ())):
            if state.get(m) == "open":
                return stack[stack.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        state[n] = "done"
        stack.pop()
        return []

    for n in sorted(g):
        if n not in state and (found := visit(n)):
            return found
    return []


def test_the_cycle_finder_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_app_modules_import_downward_only():
    mods = sorted((WEB / "app").glob("*.mjs"))
    assert {"main.mjs", "state.mjs", "chatview.mjs", "store.mjs"} <= {p.name for p in mods}
    g = graph(mods)
    found = cycle(g)
    assert found == [], "import cycle: " + " -> ".join(p.name for p in found)
    main = (WEB / "app" / "main.mjs").resolve()
    assert not any(main in deps for deps in g.values()), "only the page imports app/main.mjs"


def test_relative_imports_name_files_that_exist():
    for p in sorted(WEB.rglob("*.mjs")):
        for f in relative_imports(p):
            assert (p.parent / f).is_file(), f"{p.relative_to(ROOT)} imports {f}, which is not there"


def test_the_page_loads_the_apps_entry_module():
    html = (WEB / "index.html").read_text(encoding="utf-8")
    srcs = re.findall(r'<script type="module" src="([^"]+)"', html)
    assert srcs == ["app/main.mjs", "offline.mjs"], srcs          # the app, then the service worker's registration
    assert all((WEB / s).is_file() for s in srcs)
