"""build/web/precache.js, the service worker's file list (tools/build_web.py write_precache): the
page's module graph followed from web/index.html, the data files, sizes and hashes, the version.
The service worker itself runs in tests/e2e/test_offline.py."""
from __future__ import annotations

import hashlib
import importlib.util
import json

import pytest

from tests.conftest import ROOT


def build_web():
    spec = importlib.util.spec_from_file_location("build_web", ROOT / "tools" / "build_web.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_precache_lists_the_page_its_modules_and_what_the_worker_fetches():
    """build/web/precache.js: every module the page imports (followed from web/index.html), the
    worker, the default model, Pyodide's runtime and bitweb.zip, with sizes and hashes that match;
    no dev page, no service worker script; a changed file changes the version."""
    bw = build_web()
    man = bw.write_precache(ROOT)                    # (written only when it changed)
    paths = [f["path"] for f in man["files"]]
    for want in ("web/index.html", "web/app/main.mjs", "web/app/models.mjs", "web/bitweb.mjs", "web/connection.mjs", "web/errors.mjs",
                 "web/shared.mjs", "web/worker.mjs", "web/py.mjs", "web/gpu.mjs",
                 "web/models.mjs", "web/offline.mjs", "web/style.css", "web/models/bitweb-chat-i2_s.gguf",
                 "build/web/bitweb.zip", "node_modules/pyodide/pyodide.mjs", "node_modules/pyodide/pyodide.asm.wasm",
                 "node_modules/pyodide/python_stdlib.zip", "node_modules/pyodide/pyodide-lock.json"):
        assert want in paths, (want, paths)
    assert not any(p.endswith(("sw.js", "kernels.html", "bench.html", ".d.ts")) for p in paths), paths
    assert len(paths) == len(set(paths))
    for f in man["files"]:
        data = (ROOT / f["path"]).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (f["bytes"], f["sha256"]), f["path"]
    text = (ROOT / "build" / "web" / "precache.js").read_text(encoding="utf-8")
    assert json.loads(text.split("self.BITWEB_PRECACHE = ", 1)[1].rstrip().rstrip(";")) == man


def test_precache_follows_imports_and_refuses_a_missing_file(tmp_path):
    """The module graph: a new module imported by the page is listed without anyone naming it; an
    import of a file that is not there stops the build."""
    bw = build_web()
    root = tmp_path / "site"
    (root / "web" / "app").mkdir(parents=True)
    (root / "web" / "index.html").write_text('<link rel="stylesheet" href="style.css">'
                                             '<script type="module" src="app.mjs"></script>')
    (root / "web" / "style.css").write_text("body {}")
    (root / "web" / "app.mjs").write_text("import { x } from './app/new.mjs';\n// import './commented.mjs';\n"
                                          "const w = new URL('./worker.mjs', import.meta.url);\n")
    (root / "web" / "app" / "new.mjs").write_text("export const x = await import('../../node_modules/lib/lib.mjs');\n")
    (root / "web" / "worker.mjs").write_text("")
    (root / "node_modules" / "lib").mkdir(parents=True)
    (root / "node_modules" / "lib" / "lib.mjs").write_text("")
    assert bw.app_files(root) == ["web/index.html", "web/style.css", "web/app.mjs", "web/app/new.mjs",
                                  "web/worker.mjs", "node_modules/lib/lib.mjs"]
    (root / "web" / "app" / "new.mjs").write_text("export * from './gone.mjs';\n")
    with pytest.raises(SystemExit, match="web/app/gone.mjs"):
        bw.app_files(root)
