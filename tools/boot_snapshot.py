"""Make the boot snapshot shipped with the app: build/web/boot-snapshot.bin (+ .bin.gz, + .json).

A first visit has no boot snapshot of its own in the browser's Cache API, and Pyodide's cold start
(CPython's start-up in wasm) is most of its wait. This step boots Python the way the page does
(web/py.mjs makeBootSnapshot: loadPyodide with the snapshot maker, unpack build/web/bitweb.zip,
import every browser module, makeMemorySnapshot) in a worker of headless Chromium, served by
tools/serve.mjs, and writes the snapshot next to the archive with its key in boot-snapshot.json:

    {"pyodide": version, "zip_sha256": SHA-256 of bitweb.zip, "bytes": n, "sha256": of the snapshot,
     "gzip_bytes": n, "gzip_sha256": of boot-snapshot.bin.gz}

The page uses the shipped snapshot only when the key names its own Pyodide and archive and the
bytes are exactly those named. Made again only when the key changes; without Playwright or
Chromium (`npm start` without the test extras) it says so in one line and the app boots fresh.
Run by tools/build_web.py after the archive; `python tools/boot_snapshot.py` runs it alone.
"""
from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import importlib.util
import json
import os
import pathlib
import shutil
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))       # (tools/serving.py)
WEB = ROOT / "build" / "web"
ZIP = WEB / "bitweb.zip"
BIN = WEB / "boot-snapshot.bin"
GZ = WEB / "boot-snapshot.bin.gz"
META = WEB / "boot-snapshot.json"
PYODIDE = ROOT / "node_modules" / "pyodide" / "package.json"
CHROMIUM = os.environ.get("BITWEB_CHROMIUM", "/usr/bin/chromium")
CHROME_ARGS = ["--enable-unsafe-webgpu", "--no-sandbox", "--disable-background-networking", "--disable-component-update"]
MAKE_S = 300                  # a cold Pyodide boot on a loaded 2-core machine takes up to ~30 s

# In a page of the server's origin: a module worker runs py.mjs's makeBootSnapshot; the bytes come
# back base64-encoded (one string through the DevTools protocol).
MAKE_JS = """async (limitMs) => {
  const src = `import { makeBootSnapshot } from '${location.origin}/py.mjs';
    makeBootSnapshot().then((s) => postMessage(s), (e) => postMessage({ error: String(e?.stack || e) }));`;
  const w = new Worker(URL.createObjectURL(new Blob([src], { type: 'text/javascript' })), { type: 'module' });
  let timer;
  try {
    const r = await Promise.race([
      new Promise((ok, bad) => { w.onmessage = (e) => ok(e.data); w.onerror = (e) => bad(new Error(e.message || 'the worker failed')); }),
      new Promise((_, bad) => { timer = setTimeout(() => bad(new Error(`no snapshot after ${limitMs} ms`)), limitMs); }),
    ]);
    if (r.error) throw new Error(r.error);
    let s = '';
    for (let i = 0; i < r.bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, r.bytes.subarray(i, i + 0x8000));
    return { b64: btoa(s), pyodide: r.pyodide, zipSha256: r.zipSha256 };
  } finally {
    clearTimeout(timer);
    w.terminate();
  }
}"""


def say(text: str) -> None:
    print(f"[setup] {text}", flush=True)


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def pyodide_version(package_json: pathlib.Path = PYODIDE) -> str:
    return json.loads(package_json.read_text(encoding="utf-8"))["version"]


def wanted_key(zip_path: pathlib.Path = ZIP, package_json: pathlib.Path = PYODIDE) -> dict:
    """The key a snapshot for this build must carry: Pyodide's version and the archive's SHA-256."""
    return {"pyodide": pyodide_version(package_json), "zip_sha256": sha256(zip_path)}


def is_current(key: dict, meta: pathlib.Path = META, bin_path: pathlib.Path = BIN, gz: pathlib.Path = GZ) -> bool:
    """True when the files on disk are a whole snapshot made for `key`: the JSON names this key and
    the .bin and .bin.gz are exactly the bytes it names (a torn or edited file is made again)."""
    try:
        m = json.loads(meta.read_text(encoding="utf-8"))
        return (isinstance(m, dict) and m.get("pyodide") == key["pyodide"] and m.get("zip_sha256") == key["zip_sha256"]
                and bin_path.stat().st_size == m["bytes"] and gz.stat().st_size == m["gzip_bytes"]
                and sha256(bin_path) == m["sha256"] and sha256(gz) == m["gzip_sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def write(key: dict, data: bytes, meta: pathlib.Path = META, bin_path: pathlib.Path = BIN, gz: pathlib.Path = GZ) -> dict:
    """Write the snapshot (.bin, .bin.gz) and then its key (.json, last: what readers check)."""
    packed = gzip.compress(data, compresslevel=6, mtime=0)
    m = {**key, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
         "gzip_bytes": len(packed), "gzip_sha256": hashlib.sha256(packed).hexdigest()}
    for path, blob in ((bin_path, data), (gz, packed), (meta, (json.dumps(m, indent=1) + "\n").encode())):
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        tmp.replace(path)
    return m


def missing_tools() -> str | None:
    """Why the snapshot cannot be made here (None: it can)."""
    if importlib.util.find_spec("playwright") is None:
        return "no Playwright in this Python (the test extras: tools/setup.sh --test)"
    if not os.path.exists(CHROMIUM):
        return f"no {CHROMIUM} (Debian: apt-get install chromium)"
    if shutil.which("node") is None:
        return "no node"
    return None


def make_in_chromium() -> tuple[bytes, dict]:
    """(snapshot bytes, its key as the browser saw it) from a worker of headless Chromium."""
    from playwright.sync_api import sync_playwright
    from serving import served
    with served() as url, sync_playwright() as p:
        br = p.chromium.launch(executable_path=CHROMIUM, args=CHROME_ARGS, headless=True)
        try:
            page = br.new_page()
            page.goto(url + "__boot-snapshot")     # (a 404 page of the origin is enough)
            r = page.evaluate(MAKE_JS, MAKE_S * 1000)
        finally:
            br.close()
    return base64.b64decode(r["b64"]), {"pyodide": r["pyodide"], "zip_sha256": r["zipSha256"]}


@contextlib.contextmanager
def locked():
    """One maker at a time (test processes build side by side)."""
    import fcntl
    WEB.mkdir(parents=True, exist_ok=True)
    with open(WEB.parent / ".boot-snapshot.lock", "w") as f:      # (build/: not served)
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def main() -> int:
    """Make the snapshot when the one on disk is not for this build; never fails the build."""
    if not ZIP.exists() or not PYODIDE.exists():
        say("boot snapshot skipped: build/web/bitweb.zip or node_modules/pyodide is missing")
        return 0
    key = wanted_key()
    if is_current(key):
        return 0
    with locked():
        if is_current(key):                            # another process made it meanwhile
            return 0
        why = missing_tools()
        if why:
            say(f"boot snapshot skipped: {why}; a first visit boots Python fresh")
            return 0
        t0 = time.monotonic()
        try:
            data, seen = make_in_chromium()
            if seen != key:
                raise RuntimeError(f"the browser made it for {seen}, not {key} (the archive changed meanwhile?)")
            m = write(key, data)
        except Exception as e:                         # the app still works: it boots fresh
            say(f"boot snapshot not made ({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}); "
                "a first visit boots Python fresh")
            return 0
        say(f"wrote {BIN.relative_to(ROOT)} ({m['bytes']} bytes, gzip {m['gzip_bytes']}) "
            f"in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
